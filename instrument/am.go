package instrument

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Status codes of INSTRUMENTATION_STATUS_CODE as AndroidJUnitRunner sends
// them (docs/test-runs.md).
const (
	CodeStart            = 1
	CodeInProgress       = 2
	CodeOK               = 0
	CodeError            = -1
	CodeFailure          = -2
	CodeIgnored          = -3
	CodeAssumptionFailed = -4
)

// Kind says what a status block means.
type Kind int

const (
	// Other is a status code this package does not know; see Event.Code.
	Other Kind = iota
	Started
	Ended
	InProgress
	// RunFailed is a code -1 status naming no test: `am` could not start
	// the run (e.g. "Unable to find instrumentation info"); see Event.Values.
	RunFailed
)

func (k Kind) String() string {
	return [...]string{"other", "started", "ended", "in progress", "run failed"}[k]
}

// Outcome is how an Ended test ended.
type Outcome int

const (
	NoOutcome Outcome = iota
	Passed
	Errored
	Failed
	Ignored
	AssumptionFailed
)

func (o Outcome) String() string {
	return [...]string{"", "passed", "error", "failed", "ignored", "assumption failed"}[o]
}

// Event is one status block of `am instrument -r`.
type Event struct {
	Kind     Kind
	Outcome  Outcome // for Ended
	Code     int     // INSTRUMENTATION_STATUS_CODE as printed
	Class    string  // "class"
	Method   string  // "test"
	Current  int     // "current"; 0 when absent or not a number
	NumTests int     // "numtests"; 0 when absent or not a number
	Stack    string  // "stack", with its trailing "\n"
	// Crashed is set on the failure status the runner sends for the test
	// that was running when its process crashed.
	Crashed bool
	Values  map[string]string // every key of the block
	Line    int               // the line of INSTRUMENTATION_STATUS_CODE
}

// Result is the end of the run: INSTRUMENTATION_RESULT keys and
// INSTRUMENTATION_CODE.
type Result struct {
	Values  map[string]string
	Code    int
	HasCode bool // INSTRUMENTATION_CODE was read
	// Stray holds up to maxStray lines that belong to no key: stderr merged
	// by a pre-7.0 PTY, `am`'s own messages.
	Stray []string
}

// Crashed tells whether `am` reported that the instrumentation process
// died (shortMsg "Process crashed.").
func (r Result) Crashed() bool { return r.Values["shortMsg"] != "" }

const (
	maxStray = 100
	maxKeys  = 256
)

// AmReader reads `am instrument -w -r` output.
type AmReader struct {
	l       *lines
	status  map[string]string
	open    map[string]string // the map the last key went to
	key     string            // the key a continuation line extends
	result  Result
	running string // the test started and not ended, for ErrIncomplete
	failed  string // a RunFailed status's Error value
	done    bool
}

// NewAmReader reads from r.
func NewAmReader(r io.Reader) *AmReader {
	return &AmReader{l: newLines(r, "am instrument"), status: map[string]string{},
		result: Result{Values: map[string]string{}}}
}

// Result is the run's result, complete once Next has returned io.EOF.
func (a *AmReader) Result() Result { return a.result }

// Next returns the next status block. At the end of output it returns
// io.EOF if INSTRUMENTATION_CODE was read, a *FailedError for a run `am`
// could not start, or an error wrapping ErrIncomplete. A *SyntaxError is
// a malformed INSTRUMENTATION_ line.
func (a *AmReader) Next() (Event, error) {
	for {
		line, err := a.l.next()
		if err == io.EOF {
			return Event{}, a.end()
		}
		if err != nil {
			return Event{}, err
		}
		ev, ok, err := a.line(line)
		if err != nil || ok {
			return ev, err
		}
	}
}

// FailedError is a run `am` could not start: a code -1 status with Error.
type FailedError struct{ Msg string }

func (e *FailedError) Error() string { return "instrument: am instrument failed: " + e.Msg }

func (a *AmReader) end() error {
	switch {
	case a.result.HasCode:
		return io.EOF
	case a.failed != "":
		return &FailedError{Msg: a.failed}
	case a.running != "":
		return fmt.Errorf("instrument: am instrument output ended at line %d while %s was running: %w", a.l.n, a.running, ErrIncomplete)
	}
	return fmt.Errorf("instrument: am instrument output ended at line %d without INSTRUMENTATION_CODE: %w", a.l.n, ErrIncomplete)
}

// line takes one line; ok reports an event.
func (a *AmReader) line(line string) (Event, bool, error) {
	tag, rest, isTag := strings.Cut(line, ": ")
	if !strings.HasPrefix(line, "INSTRUMENTATION_") || !isTag {
		if strings.HasPrefix(line, "INSTRUMENTATION_") {
			a.open = nil
		}
		return Event{}, false, a.more(line)
	}
	a.open = nil
	switch tag {
	case "INSTRUMENTATION_STATUS":
		return Event{}, false, a.keyValue(a.status, rest)
	case "INSTRUMENTATION_RESULT":
		return Event{}, false, a.keyValue(a.result.Values, rest)
	case "INSTRUMENTATION_STATUS_CODE":
		return a.statusCode(rest)
	case "INSTRUMENTATION_CODE":
		n, err := a.code(rest)
		a.result.Code, a.result.HasCode = n, err == nil
		return Event{}, false, err
	}
	return Event{}, false, a.more(line)
}

// more is a line that is not an INSTRUMENTATION_ key: the continuation of
// the open value, or a stray line.
func (a *AmReader) more(line string) error {
	if a.open == nil {
		if len(a.result.Stray) < maxStray {
			a.result.Stray = append(a.result.Stray, line)
		}
		return nil
	}
	v := a.open[a.key]
	if len(v)+1+len(line) > MaxValue {
		return a.l.errorf("value of %q longer than %d bytes", a.key, MaxValue)
	}
	a.open[a.key] = v + "\n" + line
	return nil
}

func (a *AmReader) keyValue(m map[string]string, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return a.l.errorf("no key=value in %q", kv)
	}
	if _, seen := m[k]; !seen && len(m) >= maxKeys {
		return a.l.errorf("more than %d keys in one block", maxKeys)
	}
	m[k] = v
	a.open, a.key = m, k
	return nil
}

func (a *AmReader) code(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, a.l.errorf("code %q is not a number", s)
	}
	return n, nil
}

func (a *AmReader) statusCode(s string) (Event, bool, error) {
	n, err := a.code(s)
	if err != nil {
		return Event{}, false, err
	}
	ev := newEvent(a.status, n, a.l.n)
	a.status = map[string]string{}
	name := ev.Method + "(" + ev.Class + ")"
	switch ev.Kind {
	case Started:
		a.running = name
	case Ended:
		a.running = ""
	case RunFailed:
		a.failed = ev.Values["Error"]
		if a.failed == "" {
			a.failed = "status code -1 naming no test"
		}
	}
	return ev, true, nil
}

func newEvent(v map[string]string, code, line int) Event {
	ev := Event{Code: code, Values: v, Line: line, Class: v["class"], Method: v["test"], Stack: v["stack"]}
	ev.Current, _ = strconv.Atoi(v["current"])
	ev.NumTests, _ = strconv.Atoi(v["numtests"])
	ev.Kind, ev.Outcome = kindOf(code)
	if code == CodeError && ev.Class == "" && ev.Method == "" {
		ev.Kind, ev.Outcome = RunFailed, NoOutcome
	}
	ev.Crashed = code == CodeFailure && strings.Contains(v["stream"], "Process crashed while executing ")
	return ev
}

func kindOf(code int) (Kind, Outcome) {
	switch code {
	case CodeStart:
		return Started, NoOutcome
	case CodeInProgress:
		return InProgress, NoOutcome
	case CodeOK:
		return Ended, Passed
	case CodeError:
		return Ended, Errored
	case CodeFailure:
		return Ended, Failed
	case CodeIgnored:
		return Ended, Ignored
	case CodeAssumptionFailed:
		return Ended, AssumptionFailed
	}
	return Other, NoOutcome
}

// Run is a whole run as ParseAm reads it.
type Run struct {
	Events []Event
	Result Result
}

// ParseAm reads a whole run. On an error it returns what it read before.
func ParseAm(r io.Reader) (Run, error) {
	a := NewAmReader(r)
	var run Run
	for {
		ev, err := a.Next()
		if err != nil {
			run.Result = a.Result()
			if errors.Is(err, io.EOF) {
				return run, nil
			}
			return run, err
		}
		run.Events = append(run.Events, ev)
	}
}
