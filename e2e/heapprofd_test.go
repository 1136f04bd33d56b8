package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// TestHeapprofdRefusedThroughADB runs the daemon with --backend auto
// against an Android 12 device whose shell has no perfetto, behind the
// real adb server:
// the device is handed to the heapprofd path, not to DDM; its app is not
// shown as tracking but as backing off, with perfetto's refusal counted
// and logged in words that say why; the clean-up finds nothing to do; the Android 11 device beside it is tracked over DDM as before;
// and the daemon exits 0 on SIGTERM.
func TestHeapprofdRefusedThroughADB(t *testing.T) {
	cfg := sim.FarmConfig{Devices: 2, AppsPerDevice: 1, APIs: []int{31, 30}, Workload: quietWorkload(),
		Device: func(i int, c *sim.DeviceConfig) { c.NoPerfetto = i == 0 }}
	r := newRig(t, cfg, nil) // --backend auto is the default
	modern := r.app("sim-1", "com.example.app1")
	old := r.app("sim-2", "com.example.app1")
	r.d.waitState(t, []app{old}, "tracking", 20*time.Second)
	waitFor(t, 20*time.Second, "the Android 12 app's perfetto refusal counted", func() (bool, string) {
		sc := r.d.metrics(t)
		n := sc.value("alloctrack_app_errors_total", modern.labels("stage", "perfetto-start")...)
		return n >= 1, fmt.Sprintf("perfetto-start errors %v", n)
	})
	sc := r.d.metrics(t)
	if v := sc.value("alloctrack_app_tracking", modern.labels()...); v != 0 {
		t.Errorf("%v: tracking %v, want 0", modern, v)
	}
	if v := sc.value("alloctrack_app_state", modern.labels("state", "backoff")...); v != 1 {
		t.Errorf("%v: state backoff %v, want 1", modern, v)
	}
	if v := sc.value("alloctrack_app_state", modern.labels("state", "unsupported")...); v != 0 {
		t.Errorf("%v is shown unsupported: DDM was tried on it", modern)
	}
	if v := sc.value("alloctrack_device_errors_total", "serial", modern.serial, "stage", "perfetto-cleanup"); v != 0 {
		t.Errorf("device %s: %v clean-up errors, want 0 (nothing to clean)", modern.serial, v)
	}
	if n := r.vm(t, "sim-1", "com.example.app1").Stats().Chunks["REAQ"]; n != 0 {
		t.Errorf("the Android 12 app was sent %d REAQ probes", n)
	}
	// The device's shell was asked for perfetto, with our trace file.
	var started bool
	for _, argv := range r.farm.Device("sim-1").ShellLog() {
		if argv[0] == "perfetto" && strings.Contains(strings.Join(argv, " "), "-o /data/misc/perfetto-traces/alloctrack-") {
			started = true
		}
	}
	if !started {
		t.Errorf("no perfetto start in the device's shell log: %q", r.farm.Device("sim-1").ShellLog())
	}
	if log := r.d.out.String(); !strings.Contains(log, "perfetto exited 127") {
		t.Errorf("the log does not say perfetto could not run; tail:\n%s", r.d.tail(40))
	}
	if code := r.d.shutdown(t); code != 0 {
		t.Errorf("daemon exit status %d, want 0", code)
	}
}
