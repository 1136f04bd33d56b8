// Package instrument reads what a host sees of an Android instrumentation
// run: the output of `am instrument -w -r` and the logcat lines that
// AndroidX Test's runner logs under the tag TestRunner. Both parsers are
// pure: they read text from an io.Reader and know nothing of adb, logging,
// metrics or allocations, like the codecs on the bottom floor (ddms,
// perfetto).
//
// AmReader reads `am instrument -w -r` output as a stream of status blocks
// and turns each into an Event (a test started, ended with an outcome, or
// in progress), then the run's Result. A value may span several lines: it
// goes on until the next INSTRUMENTATION_ line. Output that stops before
// INSTRUMENTATION_CODE (a run that never finishes, a device gone) ends with
// ErrIncomplete; what was read before stays available.
//
// LogReader reads logcat output in any of the layouts logcat prints
// (brief, time, threadtime, long, with the -v modifiers year, zone, epoch,
// monotonic, uid, usec and nsec) into Entries, and recognises the runner's
// messages in them (run started, started, finished, failed, assumption
// failed, ignored, run finished and the exception block in both runner
// styles). Lines of other tags, other processes or no layout at all are
// returned as records that are not runner events, never as errors.
//
// Both read lines of at most MaxLine bytes and accept "\r\n" line ends,
// which adbd before Android 7.0 produces. What a device prints, with the
// sources, is in docs/test-runs.md.
package instrument
