// The vocabulary every part of alloctrack shares: the backends, the states
// an app is shown in, the stages its errors are counted by, and the errors
// sessions end with. Metrics, logs and the web view print these strings;
// they do not change.

package alloctrack

import (
	"errors"
	"fmt"
)

// Backends an app can be watched with.
const (
	BackendDDM       = "ddm"       // the VM's allocation tracker over JDWP (Android 4.4 to 11)
	BackendHeapprofd = "heapprofd" // perfetto's heapprofd sampling the Java heap (Android 12+)
)

// BackendAuto picks DDM or heapprofd by a device's API level.
const BackendAuto = "auto"

// APIHeapprofd is the first API level whose ART reports Java allocations
// to heapprofd (Android 12), and whose VM no longer answers REAQ.
const APIHeapprofd = 31

// APIBackgroundWait is the first API level (Android 13, perfetto v22)
// whose perfetto has --background-wait: it returns once tracing has
// started, and exits non-zero when the tracing service refuses the
// session. Android 12 has only --background, which returns before the
// service has answered.
const APIBackgroundWait = 33

// App states, as the exporter shows them.
const (
	StateConnecting  = "connecting"
	StateTracking    = "tracking"
	StateUnsupported = "unsupported" // Android 12+: no answer to REAQ
	StateFiltered    = "filtered"    // excluded by --package
	StateBackoff     = "backoff"     // waiting to retry after an error
	StateHeld        = "held"        // another debugger holds the app
	StateWaiting     = "waiting"     // the app waits for a debugger; left free for it
)

// End states of an app whose process the daemon no longer tracks; its
// counters stay.
const (
	StateExited       = "exited"       // the process is gone
	StateDisconnected = "disconnected" // its device is gone
)

// Device facts (API level, model, report cap), as the exporter shows
// them: a device whose facts are unknown is given no backend until they
// are read; the daemon keeps retrying.
const (
	FactsUnknown = "unknown" // not read yet, or the last read failed
	FactsKnown   = "known"
)

// StageFacts counts, per device, failed reads of its facts (getprop).
const StageFacts = "facts"

// Error stages counted per app.
const (
	StageConnect = "connect" // opening jdwp:<pid> through adb
	StageHello   = "hello"   // handshake, HELO, app name
	StageProbe   = "probe"   // REAQ
	StageReport  = "report"  // REAL request and reply
	StageParse   = "parse"   // malformed report
	StageDisable = "disable" // REAE 0 on the way out
)

// States and error stages of heapprofd sessions. The states are those of
// one app; the stages name where a session failed, in the error counts.
const (
	StateStarting      = "starting"         // a session runs, heapprofd has written nothing for it yet
	StateRefused       = "perfetto-refused" // the device's tracing service refused the session (too many sessions)
	StateUnprofileable = "unprofileable"    // the device says the app is neither debuggable nor profileable
	// An app another heapprofd session holds is shown StateHeld, as one
	// another debugger holds: heapprofd rejected it (rejected_concurrent).

	StagePerfettoStart   = "perfetto-start"   // perfetto could not be started
	StagePerfettoRefused = "perfetto-refused" // the tracing service refused the session
	StagePerfettoRead    = "perfetto-read"    // reading the trace file failed
	StagePerfettoEnded   = "perfetto-ended"   // perfetto ended on its own (disk full, max file size, traced restarted)
	StagePerfettoStalled = "perfetto-stalled" // perfetto lives but its file stopped growing
	StagePerfettoStop    = "perfetto-stop"    // perfetto did not end within the stop timeout
	StageRejected        = "rejected-concurrent"
	StageOverran         = "buffer-overran"
	StageDisconnected    = "disconnected"
	StageGuardrail       = "guardrail"
)

// StageCleanup counts a device where the clean-up of an earlier run's
// perfetto sessions failed.
const StageCleanup = "perfetto-cleanup"

// StageProcessList counts failed reads of a device's process list.
const StageProcessList = "process-list"

// StageUnprofileable counts an app the --package filters ask for that the
// device says (track-app) is neither debuggable nor profileable.
const StageUnprofileable = "unprofileable"

// PreInitialized is the name a VM reports before its app is named.
const PreInitialized = "<pre-initialized>"

// ErrRefused is what a Source's OpenJDWP wraps when the device refused the
// stream: the process died, is not debuggable, or is frozen.
var ErrRefused = errors.New("alloctrack: the device refused the JDWP stream")

// ErrTrackAppUnsupported: the device's adbd has no track-app (before
// Android 12).
var ErrTrackAppUnsupported = errors.New("alloctrack: the device's adbd has no track-app")

// Errors a session ends with on purpose.
var (
	// ErrUnsupported: the VM never answered REAQ (Android 12+ on the
	// DDM-only path), so allocation tracking cannot be used.
	ErrUnsupported = errors.New("alloctrack: allocation tracking not supported by this VM (no REAQ reply; Android 12+)")
	// ErrFiltered: the app is excluded by the package filter.
	ErrFiltered = errors.New("alloctrack: app excluded by the package filter")
	// ErrStreamEnded: the JDWP stream ended while tracking, as it does when
	// the process dies (then it is no error) or the link breaks. Sessions
	// do not count it; the daemon does once it knows the process lives on.
	ErrStreamEnded = errors.New("alloctrack: the JDWP stream ended")
	// ErrHeld: another debugger (Android Studio) holds the app. Dalvik and
	// ART up to Android 8.1 accept a second connection and close it during
	// the handshake; ART on Android 9 to 13 never reads it, so the
	// handshake gets no echo at all until the holder leaves.
	ErrHeld = errors.New("alloctrack: another debugger holds the app (its VM closed or never answered the JDWP handshake)")
	// ErrProbeUnanswered: an Android 9–11 VM did not answer REAQ in
	// time: a slow VM (its adbconnection thread still moving a report),
	// retried with the usual backoff.
	ErrProbeUnanswered = errors.New("alloctrack: no REAQ reply in time")
	// ErrWaiting: the app waits for a debugger (started with "wait for
	// debugger"): it sent WAIT, and DDM traffic does not count as one, so
	// the session lets it go at once rather than keep it stuck.
	ErrWaiting = errors.New("alloctrack: the app waits for a debugger (WAIT); left free for one")
)

// Errors a heapprofd session ends with, inside a *SessionError.
var (
	// ErrPerfettoRefused: the tracing service refused the session: more
	// sessions of the shell's uid than it allows (5), more in all (15),
	// or a session of the same name.
	ErrPerfettoRefused = errors.New("alloctrack: the device's tracing service refused the perfetto session")
	// ErrPerfettoEnded: perfetto ended without being asked to.
	ErrPerfettoEnded = errors.New("alloctrack: perfetto ended on its own")
	// ErrPerfettoStalled: perfetto lives, but its trace file stopped
	// growing (its buffer overran once, which stops a DISCARD buffer for
	// good).
	ErrPerfettoStalled = errors.New("alloctrack: the perfetto session's trace file stopped growing")
)

// SessionError is the error a session ends with: the stage it failed in
// (one of the Stage constants) and why.
type SessionError struct {
	Stage string
	Err   error
}

func (e *SessionError) Error() string { return e.Stage + ": " + e.Err.Error() }

func (e *SessionError) Unwrap() error { return e.Err }

// StageErrorf returns a *SessionError of stage whose error is formatted
// as by fmt.Errorf.
func StageErrorf(stage string, format string, args ...any) *SessionError {
	return &SessionError{Stage: stage, Err: fmt.Errorf(format, args...)}
}

// ErrorStage returns the stage of a *SessionError in err's chain, or "".
func ErrorStage(err error) string {
	if se, ok := errors.AsType[*SessionError](err); ok {
		return se.Stage
	}
	return ""
}
