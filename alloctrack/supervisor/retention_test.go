package supervisor_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	"github.com/alloctrack/alloctrack/exporter"
	"github.com/alloctrack/alloctrack/sim"
)

// scrape returns the daemon's /metrics as serve serves it.
func (r *daemonRun) scrape(t *testing.T) string {
	t.Helper()
	h, err := exporter.NewHandler(prometheus.NewRegistry(), exporter.HandlerConfig{Counts: exporter.NewCollector(r.d)})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return string(body)
}

// seriesOf returns the sample lines of /metrics that carry serial.
func seriesOf(metrics, serial string) int {
	n := 0
	for line := range strings.Lines(metrics) {
		if !strings.HasPrefix(line, "#") && strings.Contains(line, `serial="`+serial+`"`) {
			n++
		}
	}
	return n
}

// TestDaemonForgetsGoneDevices: a device whose serial changes on every
// reconnect (wireless debugging's ip:port) leaves one serial behind each
// time; after the retention each is forgotten, with its apps, counters,
// errors and every series, and /metrics holds the present device's alone.
func TestDaemonForgetsGoneDevices(t *testing.T) {
	cfg := daemonConfig()
	cfg.Retention = 300 * time.Millisecond
	testChurn(t, cfg, 0)
}

// TestDaemonBoundsGoneDevices: within the retention, at most MaxGone gone
// devices are kept, the last gone.
func TestDaemonBoundsGoneDevices(t *testing.T) {
	cfg := daemonConfig()
	cfg.Retention = time.Hour
	cfg.MaxGone = 1
	testChurn(t, cfg, 1)
}

// testChurn reconnects one device under a new serial a few times and
// checks that the daemon ends up knowing the present one and the last
// kept gone ones alone.
func testChurn(t *testing.T, cfg supervisor.DaemonConfig, kept int) {
	const n, pkg = 5, "com.example.app1"
	serial := func(i int) string { return fmt.Sprintf("192.0.2.7:%d", 40001+i) }
	farm := newFarm(sim.FarmConfig{Devices: n, AppsPerDevice: 1, Device: func(i int, c *sim.DeviceConfig) { c.Serial = serial(i) }})
	r := startDaemon(t, farm, cfg)
	for i := 1; i < n; i++ {
		if err := farm.Disconnect(serial(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		eventually(t, serial(i)+" tracking", func() bool { return r.tracking(serial(i), pkg, 1) })
		if i == n-1 {
			break
		}
		if err := farm.Disconnect(serial(i)); err != nil {
			t.Fatal(err)
		}
		if err := farm.Reconnect(serial(i + 1)); err != nil {
			t.Fatal(err)
		}
	}
	known := map[string]bool{}
	for i := n - 1 - kept; i < n; i++ {
		known[serial(i)] = true
	}
	eventually(t, fmt.Sprintf("the present device and %d gone left, with their apps", kept), func() bool {
		s := r.d.Snapshot()
		for _, dv := range s.Devices {
			if !known[dv.Serial] {
				return false
			}
		}
		for _, a := range s.Apps {
			if !known[a.Serial] {
				return false
			}
		}
		return len(s.Devices) == len(known) && len(s.Apps) == len(known)
	})
	m, all := r.scrape(t), 0
	for i := range n {
		k := seriesOf(m, serial(i))
		all += k
		if (k == 0) == known[serial(i)] {
			t.Errorf("/metrics has %d series of %s (kept: %v)", k, serial(i), known[serial(i)])
		}
	}
	if c := strings.Count(m, `serial="`); c != all {
		t.Errorf("%d series carry a serial, %d of them the kept devices'", c, all)
	}
	// A pulled device keeps what it was doing; these never come back
	// for the daemon to turn their trackers off.
	for i := range n - 1 {
		dev := farm.Device(serial(i))
		for _, vm := range dev.VMs() {
			setTracking(t, dev, vm, false)
		}
	}
}

// TestDaemonForgetsExitedApps: an app that died is forgotten after the
// retention (its device stays); started again, it is tracked anew.
func TestDaemonForgetsExitedApps(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 2})
	const serial, gone, kept = "sim-1", "com.example.app1", "com.example.app2"
	cfg := daemonConfig()
	cfg.Retention = 300 * time.Millisecond
	r := startDaemon(t, farm, cfg)
	eventually(t, "both apps tracking", func() bool { return r.tracking(serial, gone, 2) && r.tracking(serial, kept, 2) })
	if err := farm.KillApp(serial, onlyPID(t, farm, serial, gone)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dead app forgotten", func() bool {
		_, ok := r.app(serial, gone)
		return !ok
	})
	if m := r.scrape(t); strings.Contains(m, `package="`+gone+`"`) {
		t.Errorf("/metrics still has series of %s, dead for longer than the retention", gone)
	}
	if !r.tracking(serial, kept, 2) {
		t.Errorf("%s, alive, no longer tracking", kept)
	}
	if dv, ok := r.device(serial); !ok || dv.State != "device" {
		t.Errorf("device %+v (found %v), want it kept", dv, ok)
	}
	if _, err := farm.AddApp(serial, sim.AppConfig{Package: gone}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the app back and tracked", func() bool { return r.tracking(serial, gone, 1) })
	if a, _ := r.app(serial, gone); a.State != alloctrack.StateTracking {
		t.Errorf("state %s", a.State)
	}
}

// TestDaemonForgetsExitedHeapprofdApp: on an Android 12 device watched
// through heapprofd, an app that died is forgotten after the retention,
// and when it starts again its new counters are the ones shown and
// counted (the device's session binds it anew).
func TestDaemonForgetsExitedHeapprofdApp(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 2, APIs: []int{31}})
	const serial, gone, kept = "sim-1", "com.example.app1", "com.example.app2"
	cfg := daemonConfig()
	cfg.Backend = alloctrack.BackendAuto
	cfg.Retention = 300 * time.Millisecond
	r := startDaemon(t, farm, cfg)
	counted := func(pkg string) bool {
		a, ok := r.app(serial, pkg)
		return ok && a.Backend == alloctrack.BackendHeapprofd && a.Counts.Sampled.Allocations > 0
	}
	eventually(t, "both apps sampled", func() bool { return counted(gone) && counted(kept) })
	if err := farm.KillApp(serial, onlyPID(t, farm, serial, gone)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dead app forgotten", func() bool {
		_, ok := r.app(serial, gone)
		return !ok
	})
	if _, err := farm.AddApp(serial, sim.AppConfig{Package: gone, Workload: sim.DefaultWorkload()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the app back, sampled and tracking", func() bool {
		a, _ := r.app(serial, gone)
		return counted(gone) && a.State == alloctrack.StateTracking
	})
}

// TestDaemonForgetsAppDiedWaiting: an app shown waiting for a debugger
// (Android 15's track-app) that dies is shown exited, and forgotten after
// the retention; it stayed "waiting" for the life of the daemon.
func TestDaemonForgetsAppDiedWaiting(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{35}})
	const serial, pkg = "sim-1", "com.example.waits"
	waits, err := farm.AddApp(serial, sim.AppConfig{Package: pkg, WaitingForDebugger: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemonConfig()
	cfg.Backend = alloctrack.BackendDDM
	cfg.Retention = 300 * time.Millisecond
	r := startDaemon(t, farm, cfg)
	eventually(t, "the app shown waiting", func() bool {
		a, ok := r.app(serial, pkg)
		return ok && a.State == alloctrack.StateWaiting
	})
	if err := farm.KillApp(serial, waits.PID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the app that died waiting forgotten", func() bool {
		_, ok := r.app(serial, pkg)
		return !ok
	})
}

// TestDaemonForgetsUnprofileableAppThatDied: an app --package names that
// the device says is neither debuggable nor profileable is shown so; once
// its process ends it is exited, and forgotten after the retention.
func TestDaemonForgetsUnprofileableAppThatDied(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{33}})
	const serial, pkg = "sim-1", "com.example.release"
	vm, err := farm.AddApp(serial, sim.AppConfig{Package: pkg, NotDebuggable: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemonConfig()
	cfg.Backend = alloctrack.BackendAuto
	cfg.Retention = 300 * time.Millisecond
	if cfg.Packages, err = supervisor.NewFilter([]string{pkg, "com.example.app1"}, nil); err != nil {
		t.Fatal(err)
	}
	r := startDaemon(t, farm, cfg)
	eventually(t, "the release app shown unprofileable", func() bool {
		a, ok := r.app(serial, pkg)
		return ok && a.State == alloctrack.StateUnprofileable
	})
	if err := farm.KillApp(serial, vm.PID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unprofileable app that died forgotten", func() bool {
		_, ok := r.app(serial, pkg)
		return !ok
	})
}

// TestDaemonTinyRetention: a retention of a nanosecond (serve takes any
// positive --devices.retention) forgets what ends at once, and does not
// take the daemon down (a sweep every quarter of it was a ticker of 0,
// which panics).
func TestDaemonTinyRetention(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1})
	const serial, pkg = "sim-1", "com.example.app1"
	cfg := daemonConfig()
	cfg.Retention = time.Nanosecond
	r := startDaemon(t, farm, cfg)
	eventually(t, "the app tracking", func() bool { return r.tracking(serial, pkg, 1) })
	if err := farm.KillApp(serial, onlyPID(t, farm, serial, pkg)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dead app forgotten", func() bool {
		_, ok := r.app(serial, pkg)
		return !ok
	})
}
