package instrument

import (
	"fmt"
	"io"
	"strings"
)

// RecordKind says what a logcat line was.
type RecordKind int

const (
	// NotLogcat is a line in no logcat layout (a message of adb or of the
	// shell, a cut line); Text holds it.
	NotLogcat RecordKind = iota
	// Divider is "--------- beginning of BUFFER".
	Divider
	// LogEntry is an entry; Runner says whether it is the runner's.
	LogEntry
)

// Record is what LogReader.Next returns for each entry or line.
type Record struct {
	Kind   RecordKind
	Entry  Entry
	Runner RunnerEvent
	Buffer string // Divider: the buffer's name
	Text   string // NotLogcat: the line
	Line   int
}

const dividerPrefix = "--------- beginning of "

// maxOpen bounds the processes with an open exception block or a failed
// test awaiting its exception.
const maxOpen = 1024

type openBlock struct {
	failed RunnerEvent // the last failed: of the process
	trace  []string
	size   int
	open   bool // between the markers
}

// LogReader reads logcat output and recognises the runner's lines.
type LogReader struct {
	// PID, when not 0, is the instrumentation process: TestRunner lines of
	// other processes are returned as NotRunner.
	PID    int
	l      *lines
	long   *Entry   // a long entry whose message lines are being read
	msg    []string // its message lines
	queue  []queued
	blocks map[int]*openBlock
}

type queued struct {
	rec Record
	err error
}

// NewLogReader reads logcat output from r.
func NewLogReader(r io.Reader) *LogReader {
	return &LogReader{l: newLines(r, "logcat"), blocks: map[int]*openBlock{}}
}

// Next returns the next record, or io.EOF. A malformed runner line comes
// with a *SyntaxError naming its line; the record is returned too and the
// reader goes on with the next call.
func (r *LogReader) Next() (Record, error) {
	for len(r.queue) == 0 {
		line, err := r.l.next()
		if err == io.EOF {
			if r.long == nil {
				return Record{}, io.EOF
			}
			r.finishLong()
			continue
		}
		if err != nil {
			return Record{}, err
		}
		if err := r.line(line); err != nil {
			return Record{}, err
		}
	}
	q := r.queue[0]
	r.queue = r.queue[1:]
	return q.rec, q.err
}

func (r *LogReader) line(line string) error {
	if buf, ok := strings.CutPrefix(line, dividerPrefix); ok {
		r.finishLong()
		r.push(Record{Kind: Divider, Buffer: buf, Line: r.l.n})
		return nil
	}
	if strings.HasPrefix(line, "[ ") {
		if e, ok := ParseLine(line); ok {
			r.finishLong()
			e.Line = r.l.n
			r.long, r.msg = &e, nil
			return nil
		}
	}
	if r.long != nil {
		return r.longLine(line)
	}
	e, ok := ParseLine(line)
	if !ok {
		r.push(Record{Kind: NotLogcat, Text: line, Line: r.l.n})
		return nil
	}
	e.Line = r.l.n
	r.entry(e)
	return nil
}

func (r *LogReader) longLine(line string) error {
	size := len(line)
	for _, m := range r.msg {
		size += len(m) + 1
	}
	if size > MaxValue {
		return r.l.errorf("long entry of line %d longer than %d bytes", r.long.Line, MaxValue)
	}
	r.msg = append(r.msg, line)
	return nil
}

// finishLong queues the long entry being read: its message is the lines
// after the header, less the blank line logcat prints after each entry.
func (r *LogReader) finishLong() {
	if r.long == nil {
		return
	}
	e := *r.long
	msg := r.msg
	if n := len(msg); n > 0 && msg[n-1] == "" {
		msg = msg[:n-1]
	}
	e.Message = strings.Join(msg, "\n")
	r.long, r.msg = nil, nil
	r.entry(e)
}

// entry queues an entry with its meaning for the runner.
func (r *LogReader) entry(e Entry) {
	rec := Record{Kind: LogEntry, Entry: e, Line: e.Line}
	if e.Tag != RunnerTag || (r.PID != 0 && e.PID != r.PID) {
		r.push(rec)
		return
	}
	if b := r.blocks[e.PID]; b != nil && b.open {
		if r.inBlock(b, rec) {
			return
		}
	}
	if rest, ok := strings.CutPrefix(e.Message, beginException); ok {
		r.begin(rec, strings.TrimPrefix(rest, "\n"))
		return
	}
	ev, bad := parseRunner(e.Message)
	rec.Runner = ev
	var err error
	if bad != "" {
		err = &SyntaxError{Source: "logcat", Line: e.Line, What: bad}
	}
	if ev.Kind == TestFailed || ev.Kind == TestAssumptionFailed {
		r.block(e.PID).failed = ev
	}
	r.queue = append(r.queue, queued{rec, err})
}

func (r *LogReader) push(rec Record) { r.queue = append(r.queue, queued{rec: rec}) }

// block returns the state of pid, making room when too many are kept.
func (r *LogReader) block(pid int) *openBlock {
	b := r.blocks[pid]
	if b == nil {
		if len(r.blocks) >= maxOpen {
			clear(r.blocks) // a failure awaiting its exception is forgotten
		}
		b = &openBlock{}
		r.blocks[pid] = b
	}
	return b
}

func (r *LogReader) begin(rec Record, first string) {
	b := r.block(rec.Entry.PID)
	b.open, b.trace, b.size = true, nil, 0
	if first != "" {
		b.add(first)
	}
	rec.Runner = RunnerEvent{Kind: InException}
	r.push(rec)
}

func (b *openBlock) add(s string) {
	if b.size+len(s) <= MaxValue {
		b.trace = append(b.trace, s)
		b.size += len(s) + 1
	}
}

// inBlock takes a runner line of a process inside an exception block; it
// reports false when the line is no part of the block: not an E line, a
// new begin marker, or a runner message such as the next "failed:" (then
// the block is closed as unterminated and the line read as usual).
func (r *LogReader) inBlock(b *openBlock, rec Record) bool {
	e := rec.Entry
	switch {
	case e.Message == endException:
		rec.Runner = b.close(false)
		delete(r.blocks, e.PID)
	case e.Priority == 'E' && !strings.HasPrefix(e.Message, beginException) && !isRunnerMessage(e.Message):
		b.add(e.Message)
		rec.Runner = RunnerEvent{Kind: InException}
	default:
		r.push(Record{Kind: LogEntry, Entry: e, Line: e.Line, Runner: b.close(true)})
		delete(r.blocks, e.PID)
		return false
	}
	r.push(rec)
	return true
}

// isRunnerMessage tells whether msg is one of the runner's own messages.
func isRunnerMessage(msg string) bool {
	ev, bad := parseRunner(msg)
	return ev.Kind != NotRunner && bad == ""
}

func (b *openBlock) close(unterminated bool) RunnerEvent {
	ev := RunnerEvent{Kind: Exception, Name: b.failed.Name, Class: b.failed.Class, Method: b.failed.Method,
		Trace: strings.TrimRight(strings.Join(b.trace, "\n"), "\n"), Unterminated: unterminated}
	b.open = false
	return ev
}

// String gives a record in one line, for messages and tests.
func (rec Record) String() string {
	switch rec.Kind {
	case Divider:
		return fmt.Sprintf("%d: divider %s", rec.Line, rec.Buffer)
	case NotLogcat:
		return fmt.Sprintf("%d: not logcat %q", rec.Line, rec.Text)
	}
	return fmt.Sprintf("%d: %s pid %d: %s %q", rec.Line, rec.Entry.Tag, rec.Entry.PID, rec.Runner.Kind, rec.Runner.Name)
}
