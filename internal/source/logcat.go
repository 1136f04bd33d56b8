package source

import (
	"context"
	"io"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	"github.com/alloctrack/alloctrack/instrument"
)

var _ supervisor.LogcatSource = ADB{}

// Logcat follows the test runner's lines in a device's logcat (see
// LogcatArgs); it never clears the log.
func (a ADB) Logcat(ctx context.Context, serial string, api int, since string) (io.ReadCloser, error) {
	// shell: on every version: the lines are read alike through a PTY
	// (before 7.0) or not, and the exit status is not needed.
	return a.Client.StartShell(ctx, serial, false, LogcatArgs(api, since)...)
}

// LogcatArgs is the logcat command that follows the tag TestRunner on a
// device at API level api, in the threadtime layout (every version has it,
// sheet 3-4), printing entries strictly after since (the last stamp read)
// or, with since "", from the last entry on. -T exists from Android 5.0
// (API 21) and takes "MM-DD hh:mm:ss.mmm" from then on, and "sss.mmm"
// from 7.0 (sheet 5); before it, logcat prints its whole buffer first and
// the caller drops what it has read already. -T 1 counts entries before
// the tag filter (sheet 5), so it starts at the newest entry of any tag.
// From Android 12 (heapprofd) the stamps are seconds and nanoseconds since
// 1970 (-v epoch,nsec, lists from 8.0, sheet 4): the REALTIME of the log
// call, the clock heapprofd's dumps are placed in (docs/test-runs.md, H2),
// and since is then such a stamp.
// Never -c: the log is the device's, and other readers need it.
func LogcatArgs(api int, since string) []string {
	args := []string{"logcat", "-v", "threadtime"}
	if api >= alloctrack.APIHeapprofd {
		args[2] = "threadtime,epoch,nsec"
	}
	if api >= 21 {
		if since == "" {
			since = "1"
		}
		args = append(args, "-T", since)
	}
	return append(args, "-s", instrument.RunnerTag)
}
