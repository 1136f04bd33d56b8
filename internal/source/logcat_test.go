package source_test

import (
	"slices"
	"testing"

	"github.com/alloctrack/alloctrack/internal/source"
)

// The options each version accepts (docs/test-runs.md, sheet 4-5): -T
// from Android 5.0 only, with a count or an MM-DD stamp; epoch stamps
// from Android 12; never -c.
func TestLogcatArgs(t *testing.T) {
	for _, tc := range []struct {
		api   int
		since string
		want  []string
	}{
		{19, "", []string{"logcat", "-v", "threadtime", "-s", "TestRunner"}},
		{19, "11-27 08:00:00.123", []string{"logcat", "-v", "threadtime", "-s", "TestRunner"}},
		{21, "", []string{"logcat", "-v", "threadtime", "-T", "1", "-s", "TestRunner"}},
		{23, "11-27 08:00:00.123", []string{"logcat", "-v", "threadtime", "-T", "11-27 08:00:00.123", "-s", "TestRunner"}},
		{30, "01-02 03:04:05.006", []string{"logcat", "-v", "threadtime", "-T", "01-02 03:04:05.006", "-s", "TestRunner"}},
		// Android 12+: REALTIME stamps, the dumps' clock.
		{31, "", []string{"logcat", "-v", "threadtime,epoch,nsec", "-T", "1", "-s", "TestRunner"}},
		{33, "1795766400.123456789", []string{"logcat", "-v", "threadtime,epoch,nsec", "-T", "1795766400.123456789", "-s", "TestRunner"}},
	} {
		got := source.LogcatArgs(tc.api, tc.since)
		if !slices.Equal(got, tc.want) {
			t.Errorf("LogcatArgs(%d, %q) = %q, want %q", tc.api, tc.since, got, tc.want)
		}
		if slices.Contains(got, "-c") {
			t.Errorf("LogcatArgs(%d, %q) clears the log: %q", tc.api, tc.since, got)
		}
	}
}
