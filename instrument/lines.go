package instrument

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxLine is the longest line either reader accepts. logd keeps an entry
// under 4 KiB and `am` prints one key per line, so a longer line is not
// from a device.
const MaxLine = 1 << 20

// MaxValue bounds one value assembled from several lines: a status value,
// the run's result or an exception block.
const MaxValue = 4 << 20

// ErrIncomplete is returned when output ends before the run it describes
// has finished.
var ErrIncomplete = errors.New("instrument: output ended before the run finished")

// SyntaxError is a line that neither reader can accept.
type SyntaxError struct {
	Source string // "am instrument" or "logcat"
	Line   int    // 1-based
	What   string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("instrument: %s line %d: %s", e.Source, e.Line, e.What)
}

// lines reads lines of at most MaxLine bytes, without their "\n" or "\r\n".
type lines struct {
	br     *bufio.Reader
	source string
	n      int // lines read
}

func newLines(r io.Reader, source string) *lines {
	return &lines{br: bufio.NewReaderSize(r, 64<<10), source: source}
}

func (l *lines) errorf(format string, args ...any) error {
	return &SyntaxError{Source: l.source, Line: l.n, What: fmt.Sprintf(format, args...)}
}

// next returns the next line, or io.EOF. A last line without "\n" is
// returned as a line. Every "\r" before the "\n" goes: a PTY may add one.
func (l *lines) next() (string, error) {
	var long []byte
	for {
		b, err := l.br.ReadSlice('\n')
		if len(long)+len(b) > MaxLine+2 {
			l.n++
			return "", l.errorf("line longer than %d bytes", MaxLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, b...)
			continue
		}
		if long != nil {
			b = append(long, b...)
		}
		if err != nil && err != io.EOF {
			return "", fmt.Errorf("instrument: reading %s after line %d: %w", l.source, l.n, err)
		}
		if err == io.EOF && len(b) == 0 {
			return "", io.EOF
		}
		l.n++
		b = bytes.TrimRight(bytes.TrimSuffix(b, []byte{'\n'}), "\r")
		if len(b) > MaxLine {
			return "", l.errorf("line longer than %d bytes", MaxLine)
		}
		return string(b), nil
	}
}
