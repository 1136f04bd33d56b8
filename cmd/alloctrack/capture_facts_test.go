package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// TestCaptureAPIUnreadable: a device whose getprop does not answer in
// time is an error naming the API level, not a capture run as API 0
// (which took an Android 12 device for DDM).
func TestCaptureAPIUnreadable(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, APIs: []int{31}, AppsPerDevice: 1, Workload: quietCaptureWorkload()})
	// The stall is far past the request timeout, and the timeout far past
	// what the other lookup requests take on a loaded machine (300 ms was
	// near enough to them that a slow devices list could fail the test).
	f.Device("sim-1").StallGetprop(1, 10*time.Second)
	addr, _ := serveSimHost(t, f)
	out := filepath.Join(t.TempDir(), "capture")
	stdout, stderr, code := runCmd(t, "capture", "--adb.address", addr, "--serial", "sim-1", "--package", "com.example.app1",
		"--duration", "2s", "--request.timeout", "2s", "--out", out)
	if code != exitFailure {
		t.Fatalf("exit %d, want %d; stdout %q, stderr:\n%s", code, exitFailure, stdout, stderr)
	}
	for _, w := range []string{"reading the API level of sim-1", "--request.timeout"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not mention %q:\n%s", w, stderr)
		}
	}
}
