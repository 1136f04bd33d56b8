package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// capture runs sessions, adb look-ups and signal watchers in goroutines;
// every one of them must be gone when run returns and the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHelpOnce: --help and -h print the usage once and exit 0, for the
// tool and for a subcommand.
func TestHelpOnce(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"serve", "--help"}, {"capture", "-h"}} {
		_, stderr, code := runCmd(t, args...)
		if n := strings.Count(stderr, "usage: alloctrack"); code != 0 || n != 1 {
			t.Errorf("%q: exit %d, usage printed %d times", args, code, n)
		}
	}
}

// TestHelpNamesEveryInput: report's and diff's help name every kind of
// input they read.
func TestHelpNamesEveryInput(t *testing.T) {
	for _, cmd := range []string{"report", "diff"} {
		_, stderr, _ := runCmd(t, cmd, "--help")
		for _, kind := range []string{"perfetto trace", "agent log", "capture director", "heap dump"} {
			if !strings.Contains(stderr, kind) {
				t.Errorf("%s --help does not mention %ss", cmd, kind)
			}
		}
	}
}

// TestFlagErrorsNameTheFlag: a value a flag cannot take is an error that
// names the flag and the value, in words, with the usage exit status.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "--top=abc", "x"}, `--top "abc": not a number`},
		{[]string{"serve", "--window", "abc"}, `--window "abc": not a duration`},
		{[]string{"serve", "--heapprofd.max-file-size=12Q"}, `--heapprofd.max-file-size "12Q": not a size`},
		{[]string{"serve", "--heapprofd.silence=-1s"}, `--heapprofd.silence must not be negative, got -1s`},
		// Another flag's value ("x") appears inside the error too.
		{[]string{"capture", "--out", "x", "--duration=3x"}, `--duration "3x": not a duration`},
	} {
		_, stderr, code := runCmd(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, %q; want exit %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}
