package offline

import (
	"errors"
	"fmt"
	"strings"
)

// How am dumpheap and the dump it asks for fail (docs/heapdumps.md, "What
// each Android version does", facts 4, 11 and 12).
var (
	// ErrUnknownProcess: am dumpheap found no such process.
	ErrUnknownProcess = errors.New("no such process (has the app ended?)")
	// ErrNotDebuggable: system_server refused the app (fact 4).
	ErrNotDebuggable = errors.New("am dumpheap dumps an app only when it is debuggable (android:debuggable) or the build is ro.debuggable=1 (userdebug, eng); a profileable app is not enough")
	// ErrDumpEmpty: the app's dump failed: ART leaves an empty file when
	// it cannot finish it.
	ErrDumpEmpty = errors.New("the app wrote no dump")
	// ErrNoDumpDone: from Android 10 am returns only when the app says
	// its dump is done, and waits without a limit (fact 12).
	ErrNoDumpDone = errors.New("the app did not say its dump was done before the timeout: it may have died, or its main thread (which writes the dump) is blocked; am waits for it without a limit")
)

// AmError is a failure am dumpheap reported.
type AmError struct {
	Err  error  // ErrUnknownProcess, ErrNotDebuggable, or nil
	Code int    // am's exit status; -1 when not known
	Line string // the line of am's text that says what went wrong
}

func (e *AmError) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Line, e.Err)
	case e.Code > 0:
		return fmt.Sprintf("exit status %d: %s", e.Code, e.Line)
	}
	return e.Line
}

func (e *AmError) Unwrap() error { return e.Err }

// ParseAmDumpheap turns what am dumpheap printed (stdout and stderr, or
// both in one stream, as a shell without protocol v2 gives them) and its
// exit status (-1: not known) into an *AmError, or nil when it did not
// fail. It reads each version's text (fact 11): up to 7.1 am exits 0 after
// "Error: Unknown process: X"; from 8 "Security exception: ..." or
// "Exception occurred while executing:" ("... 'dumpheap':" from 11) and
// the stack trace, exit status 255.
func ParseAmDumpheap(stdout, stderr []byte, code int) error {
	text := strings.ReplaceAll(string(stderr)+"\n"+string(stdout), "\r\n", "\n")
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	find := func(match func(string) bool) string {
		for _, l := range lines {
			if match(l) {
				return l
			}
		}
		return ""
	}
	if l := find(func(l string) bool { return strings.Contains(l, "Process not debuggable") }); l != "" {
		return &AmError{Err: ErrNotDebuggable, Code: code, Line: l}
	}
	if l := find(func(l string) bool { return strings.Contains(l, "Unknown process") }); l != "" {
		return &AmError{Err: ErrUnknownProcess, Code: code, Line: l}
	}
	l := find(func(l string) bool {
		return strings.HasPrefix(l, "Error") || strings.Contains(l, "Exception: ") || strings.Contains(l, "HEAP DUMP FAILED")
	})
	if l == "" {
		l = find(func(l string) bool { return strings.Contains(l, "Exception") || strings.Contains(l, "exception") })
	}
	switch {
	case l != "":
		return &AmError{Code: code, Line: l}
	case code > 0 && len(lines) > 0:
		return &AmError{Code: code, Line: lines[0]}
	case code > 0:
		return &AmError{Code: code, Line: "no output"}
	}
	return nil
}
