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
