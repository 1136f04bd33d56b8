// Package pertest makes the test the unit of a run: it splits what a
// backend reported (DDM reports, heapprofd dumps) among the tests of an
// instrumentation run, using the runner's events (package instrument).
//
// DDM (Android 4.4-11): AndroidX Test's LogRunListener builds its
// "started: NAME" and "finished: NAME" messages by string concatenation on
// the instrumentation thread, so a report (in allocation order across all
// threads) holds records whose stacks pass through
// LogRunListener.testStarted and .testFinished: those records are the
// boundaries, exactly, and are the runner's own (never a test's).
// heapprofd (Android 12+): dumps are given to tests by device time, in
// proportion to their overlap; the figures are estimates, with the
// boundary error (the dump interval) stated.
//
// Attributor takes the run as it comes and gives a Run; Write and Read
// keep a Run as tests.json; StampTime reads logcat's timestamps.
//
// The package is pure: no adb, no logging, no metrics. See
// docs/test-runs.md.
package pertest
