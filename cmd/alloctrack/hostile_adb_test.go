package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/adb/adbtest"
)

// capture and heapdump against an adb server that answers OKAY-001 or
// FAIL-001 to host:devices-l: a message and exit status 1, not a crash
// (through gadb, a panic in a goroutine nothing recovered).
func TestCaptureAndHeapdumpHostileServer(t *testing.T) {
	for _, m := range []adbtest.Mode{adbtest.NegativeLength, adbtest.FailNegative, adbtest.BadHex} {
		s := adbtest.NewServer(adbtest.Config{Host: m, Devices: []adbtest.Device{{Serial: "d"}}})
		t.Cleanup(s.Close)
		for _, cmd := range []string{"capture", "heapdump"} {
			_, stderr, code := runCmd(t, cmd, "--adb.address", s.Addr(), "--package", "com.example.app",
				"--out", filepath.Join(t.TempDir(), "out"))
			if code != exitFailure || !strings.Contains(stderr, "listing devices") || !strings.Contains(stderr, "is not 4 hex digits") {
				t.Errorf("%s against %s: exit %d, stderr %q", cmd, m, code, stderr)
			}
		}
	}
}
