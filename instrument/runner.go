package instrument

import (
	"regexp"
	"strings"
)

// RunnerTag is the logcat tag of AndroidX Test's LogRunListener.
const RunnerTag = "TestRunner"

const (
	beginException = "----- begin exception -----"
	endException   = "----- end exception -----"
)

// RunnerKind says what a runner line means.
type RunnerKind int

const (
	NotRunner RunnerKind = iota
	RunStarted
	TestStarted
	TestFinished
	TestFailed
	TestAssumptionFailed
	TestIgnored
	RunFinished
	// InException is a line of an exception block not yet closed; the
	// block's text comes with the Exception event that closes it.
	InException
	// Exception closes an exception block.
	Exception
)

func (k RunnerKind) String() string {
	return [...]string{"not runner", "run started", "started", "finished", "failed",
		"assumption failed", "ignored", "run finished", "in exception", "exception"}[k]
}

// RunnerEvent is the meaning of one runner line.
type RunnerEvent struct {
	Kind RunnerKind
	// Name is the test as the runner prints it, method(fully.qualified.Class);
	// Class and Method split it. For Exception: the test of the last
	// failed: line of the same process, if any.
	Name, Class, Method string
	Tests               int // run started, run finished
	Failed, Ignored     int // run finished
	// Trace is an Exception's text between the markers, without the
	// trailing line end.
	Trace string
	// Unterminated: the block was closed by a line that is no part of it
	// (lines lost, a process gone), not by its end marker.
	Unterminated bool
}

var (
	runStartedRe  = regexp.MustCompile(`^(\d+) tests$`)
	runFinishedRe = regexp.MustCompile(`^(\d+) tests, (\d+) failed, (\d+) ignored$`)
)

var namePrefixes = []struct {
	prefix string
	kind   RunnerKind
}{
	{"started: ", TestStarted},
	{"finished: ", TestFinished},
	{"failed: ", TestFailed},
	{"assumption failed: ", TestAssumptionFailed},
	{"ignored: ", TestIgnored},
}

// parseRunner reads a runner message. It returns NotRunner for a message
// the runner does not print, and a description of the problem for one
// that starts like a runner message but does not parse.
func parseRunner(msg string) (RunnerEvent, string) {
	if rest, ok := strings.CutPrefix(msg, "run started: "); ok {
		m := runStartedRe.FindStringSubmatch(rest)
		if m == nil {
			return RunnerEvent{}, "run started: not \"N tests\""
		}
		return RunnerEvent{Kind: RunStarted, Tests: atoi(m[1])}, ""
	}
	if rest, ok := strings.CutPrefix(msg, "run finished: "); ok {
		m := runFinishedRe.FindStringSubmatch(rest)
		if m == nil {
			return RunnerEvent{}, "run finished: not \"N tests, F failed, I ignored\""
		}
		return RunnerEvent{Kind: RunFinished, Tests: atoi(m[1]), Failed: atoi(m[2]), Ignored: atoi(m[3])}, ""
	}
	for _, p := range namePrefixes {
		if name, ok := strings.CutPrefix(msg, p.prefix); ok {
			class, method, ok := SplitName(name)
			if !ok {
				return RunnerEvent{}, p.kind.String() + ": " + "test name " + quote(name) + " is not method(Class)"
			}
			return RunnerEvent{Kind: p.kind, Name: name, Class: class, Method: method}, ""
		}
	}
	return RunnerEvent{}, ""
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return `"` + s + `"`
}

// SplitName splits a JUnit display name, method(fully.qualified.Class), at
// its last "(": a method name may hold brackets ("test[0](pkg.Cls)") and
// parentheses, a class name neither. A name without parentheses is a
// class-level description (a failure in @BeforeClass): the class alone.
func SplitName(name string) (class, method string, ok bool) {
	if !strings.HasSuffix(name, ")") {
		if name == "" || strings.ContainsAny(name, "()") {
			return "", "", false
		}
		return name, "", true
	}
	i := strings.LastIndexByte(name, '(')
	if i < 0 || i+1 >= len(name)-1 {
		return "", "", false
	}
	return name[i+1 : len(name)-1], name[:i], true
}
