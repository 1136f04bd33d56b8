package offline

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// ErrInsufficient is wrapped by every *ShortfallError.
var ErrInsufficient = errors.New("insufficient data")

// ShortfallError says why an input holds less than its run asked for, so
// that a budget or a diff would judge less than a whole run: a capture
// that failed, was interrupted, ended early or did not finish, or an
// input that holds nothing at all (Empty).
type ShortfallError struct {
	Input string
	Why   string
	// Empty: the input holds no allocation (or sample, or object) at
	// all; else it holds some, but less than was asked (partial).
	Empty bool
}

func (e *ShortfallError) Error() string {
	return fmt.Sprintf("%s: %s: %s", ErrInsufficient, e.Input, e.Why)
}

func (e *ShortfallError) Unwrap() error { return ErrInsufficient }

// Shortfall says why the input holds less than a whole run, or nil. A
// capture directory is partial when its summary.json has an error, says it
// was interrupted, ran shorter than its requested_seconds, counts more
// windows than the directory holds, or is missing (the capture never
// finished: killed, or the machine died); any input is empty when it
// holds no allocation record, heapprofd sample or agent-log sample.
func (in *Input) Shortfall() *ShortfallError {
	short := func(empty bool, format string, args ...any) *ShortfallError {
		return &ShortfallError{Input: in.Name, Why: fmt.Sprintf(format, args...), Empty: empty}
	}
	if s := in.Summary; s != nil {
		switch {
		case s.Error != "":
			return short(false, "the capture failed: %s", s.Error)
		case s.Interrupted:
			return short(false, "the capture was interrupted after %.1fs%s", s.DurationSeconds, asked(s))
		case s.RequestedSeconds > 0 && s.DurationSeconds < s.RequestedSeconds:
			return short(false, "the capture ran %.1fs of the %.1fs asked", s.DurationSeconds, s.RequestedSeconds)
		case s.Backend != "heapprofd" && len(in.Reports) < s.Windows:
			return short(false, "summary.json counts %d windows, the directory holds %d .alloc files", s.Windows, len(in.Reports))
		case s.Backend == "heapprofd" && in.Trace == "":
			return short(false, "summary.json says heapprofd, and the directory holds no %s", TraceFile)
		case s.Windows == 0 && s.Dumps == 0:
			return short(true, "the capture recorded no window (summary.json: 0 windows, 0 heapprofd dumps)")
		}
	} else if in.Dir {
		return short(false, "no summary.json: the capture did not finish (killed, or its machine stopped)")
	}
	if sf := in.lost(); sf != "" {
		return short(false, "%s", sf)
	}
	if in.records() == 0 {
		return short(true, "no allocation recorded (%s)", in.Kind())
	}
	return nil
}

// lost says what the input itself shows it lost, or "": windows that
// overflowed (older allocations dropped), an agent log cut short.
func (in *Input) lost() string {
	n := 0
	for _, r := range in.Reports {
		if r.Overflowed() {
			n++
		}
	}
	switch {
	case n > 0:
		return fmt.Sprintf("%d of %d windows overflowed (%d entries): their older allocations were lost, so counts are lower bounds", n, len(in.Reports), allocreport.MaxEntries)
	case in.Log != nil && in.Log.CutLine:
		return "the log's last line was cut short: the app died, or the log was copied while the agent wrote it"
	}
	return ""
}

// asked says what duration a summary asked for, if it knows.
func asked(s *Summary) string {
	if s.RequestedSeconds > 0 {
		return fmt.Sprintf(" of the %.1fs asked", s.RequestedSeconds)
	}
	return ""
}

// records counts the input's allocation records, heapprofd samples or
// agent-log samples.
func (in *Input) records() uint64 {
	var n uint64
	for _, r := range in.Reports {
		n += uint64(len(r.Allocations))
	}
	for _, d := range in.Dumps {
		n += heapprofd.WindowOfDump(d, time.Time{}, time.Time{}).Total.Allocations
	}
	if in.Log != nil {
		n += in.Log.Samples
	}
	return n
}

// DumpShortfall says why a heap dump's analysis holds nothing to judge (no
// object at all), or nil.
func DumpShortfall(path string, a *heapdump.Analysis) *ShortfallError {
	if a.Histogram.Objects == 0 {
		return &ShortfallError{Input: filepath.Clean(path), Why: "the heap dump holds no object", Empty: true}
	}
	return nil
}
