package supervisor_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/jdwp"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/internal/source"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// daemonConfig has short timings so that the tests run in seconds.
func daemonConfig() supervisor.DaemonConfig {
	return supervisor.DaemonConfig{
		Session: ddm.Config{
			Window:    100 * time.Millisecond,
			MinWindow: 50 * time.Millisecond,
			// Long enough for a HELO on a loaded machine (300 ms was
			// not: sessions never got back to a VM left tracking by a
			// cut stream, to turn it off), short enough to wait out
			// the unanswered requests of held and Android 12+ apps.
			RequestTimeout: 2 * time.Second,
			ReportTimeout:  10 * time.Second,
			// Turning tracking off on the way out: REAE 0 and REAQ
			// behind a report being built (2 s, the default, was not
			// always enough on a loaded machine).
			DisableTimeout: 10 * time.Second,
		},
		BackoffMin:   50 * time.Millisecond,
		BackoffMax:   500 * time.Millisecond,
		HeldRetry:    200 * time.Millisecond,
		WaitingRetry: 200 * time.Millisecond,
	}
}

type daemonRun struct {
	farm *sim.Farm
	d    *supervisor.Daemon
	addr string
	stop func() // cancels Run, waits for it, checks that no VM tracks
}

// startDaemon serves farm through an in-process adb host server and runs a
// daemon over it until the test ends (or stop).
func startDaemon(t *testing.T, farm *sim.Farm, cfg supervisor.DaemonConfig) *daemonRun {
	t.Helper()
	t.Cleanup(func() { farm.Close() })
	a, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	d := supervisor.NewDaemon(cfg, []supervisor.Source{source.New(a.String())}, log)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	var once sync.Once
	r := &daemonRun{farm: farm, d: d, addr: a.String()}
	r.stop = func() {
		once.Do(func() {
			cancel()
			start := time.Now()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(testwait.Bound):
				t.Fatalf("Run did not return within %v of cancel", testwait.Bound)
			}
			t.Logf("Run returned %v after cancel", time.Since(start).Round(time.Millisecond))
			// Every app that the daemon could reach has tracking off.
			for _, dev := range farm.Devices() {
				for _, vm := range dev.VMs() {
					if vm.Tracking() {
						t.Errorf("%s pid %d (%s): tracking still on after Run returned", dev.Serial(), vm.PID(), vm.ProcessName())
					}
				}
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

// eventually polls cond until it holds or testwait.Bound passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *daemonRun) app(serial, pkg string) (alloctrack.AppSnapshot, bool) {
	for _, a := range r.d.Snapshot().Apps {
		if a.Serial == serial && a.Package == pkg {
			return a, true
		}
	}
	return alloctrack.AppSnapshot{}, false
}

func (r *daemonRun) device(serial string) (alloctrack.DeviceStatus, bool) {
	for _, dv := range r.d.Snapshot().Devices {
		if dv.Serial == serial {
			return dv, true
		}
	}
	return alloctrack.DeviceStatus{}, false
}

// tracking tells whether the app is tracking with at least n windows
// counted since.
func (r *daemonRun) tracking(serial, pkg string, n uint64) bool {
	a, ok := r.app(serial, pkg)
	return ok && a.State == alloctrack.StateTracking && a.Tracking && a.Windows >= n
}

func newFarm(cfg sim.FarmConfig) *sim.Farm {
	if cfg.Workload.Rate == 0 {
		cfg.Workload = sim.DefaultWorkload()
	}
	return sim.NewFarm(cfg)
}

func onlyPID(t *testing.T, farm *sim.Farm, serial, pkg string) int {
	t.Helper()
	var pids []int
	for _, vm := range farm.Device(serial).VMs() {
		if vm.ProcessName() == pkg {
			pids = append(pids, vm.PID())
		}
	}
	if len(pids) != 1 {
		t.Fatalf("%s on %s runs as pids %v", pkg, serial, pids)
	}
	return pids[0]
}

func TestDaemonFollowsDevicesAndApps(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 2, AppsPerDevice: 2, APIs: []int{30, 28}})
	r := startDaemon(t, farm, daemonConfig())

	eventually(t, "every app tracking with 3 windows", func() bool {
		for _, s := range []string{"sim-1", "sim-2"} {
			for _, p := range []string{"com.example.app1", "com.example.app2"} {
				if !r.tracking(s, p, 3) {
					return false
				}
			}
		}
		return true
	})
	if !r.d.Ready() {
		t.Error("not ready although the adb server answered")
	}
	s := r.d.Snapshot()
	if len(s.Servers) != 1 || s.Servers[0].Addr != r.addr || !s.Servers[0].Up {
		t.Errorf("servers %+v", s.Servers)
	}
	for serial, api := range map[string]int{"sim-1": 30, "sim-2": 28} {
		dv, ok := r.device(serial)
		if !ok || dv.State != "device" || dv.API != api || dv.Server != r.addr {
			t.Errorf("device %s: %+v, want online with API %d", serial, dv, api)
		}
	}
	if len(s.Apps) != 4 {
		t.Fatalf("%d apps, want 4", len(s.Apps))
	}
	for _, a := range s.Apps {
		if a.Counts.Total.Allocations == 0 || a.PID == 0 || a.ReportBytes == 0 || a.RTT.Count == 0 {
			t.Errorf("%s/%s: %+v", a.Serial, a.Package, a.AppStatus)
		}
		if pid := onlyPID(t, farm, a.Serial, a.Package); a.PID != pid {
			t.Errorf("%s/%s: pid %d, the device runs it as %d", a.Serial, a.Package, a.PID, pid)
		}
	}

	r.stop()
	// What was counted was reported by the VMs; nothing is invented.
	for _, a := range r.d.Snapshot().Apps {
		_, reported := farm.Truth(a.Serial, a.Package)
		if a.Counts.Total.Allocations > reported.Total.Allocations || a.Counts.Total.Allocations == 0 {
			t.Errorf("%s/%s: counted %d allocations, VMs reported %d", a.Serial, a.Package, a.Counts.Total.Allocations, reported.Total.Allocations)
		}
		for _, vm := range farm.VMs(a.Serial, a.Package) {
			if n := vm.Stats().NonDDM; n != 0 {
				t.Errorf("%s pid %d: %d non-DDM commands", a.Serial, vm.PID(), n)
			}
		}
	}
}

func TestDaemonAppRestart(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1})
	r := startDaemon(t, farm, daemonConfig())
	const serial, pkg = "sim-1", "com.example.app1"
	eventually(t, "tracking", func() bool { return r.tracking(serial, pkg, 2) })
	old := onlyPID(t, farm, serial, pkg)
	before, _ := r.app(serial, pkg)

	vm, err := farm.RestartApp(serial, old)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new pid tracking", func() bool {
		a, ok := r.app(serial, pkg)
		return ok && a.PID == vm.PID() && a.State == alloctrack.StateTracking && vm.Tracking()
	})
	eventually(t, "counters growing past the old process's", func() bool {
		a, _ := r.app(serial, pkg)
		return a.Windows > before.Windows+2 && a.Counts.Total.Allocations > before.Counts.Total.Allocations
	})
	if n := len(r.d.Snapshot().Apps); n != 1 {
		t.Fatalf("%d apps after a restart, want 1 (counters are per serial and package)", n)
	}
	after, _ := r.app(serial, pkg)
	if after.Counts.Total.Allocations < before.Counts.Total.Allocations || after.Counts.Total.Bytes < before.Counts.Total.Bytes {
		t.Fatalf("counters went down across the restart: %+v -> %+v", before.Counts.Total, after.Counts.Total)
	}
}

func TestDaemonAppKilled(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 2})
	r := startDaemon(t, farm, daemonConfig())
	const serial = "sim-1"
	eventually(t, "both apps tracking", func() bool {
		return r.tracking(serial, "com.example.app1", 1) && r.tracking(serial, "com.example.app2", 1)
	})
	if err := farm.KillApp(serial, onlyPID(t, farm, serial, "com.example.app1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "app1 exited", func() bool {
		a, _ := r.app(serial, "com.example.app1")
		return a.State == alloctrack.StateExited && !a.Tracking
	})
	before, _ := r.app(serial, "com.example.app1")
	// The other app goes on; the dead one's counters stay as they were.
	w, _ := r.app(serial, "com.example.app2")
	eventually(t, "app2 still counting", func() bool { return r.tracking(serial, "com.example.app2", w.Windows+2) })
	a, _ := r.app(serial, "com.example.app1")
	if a.Counts.Total != before.Counts.Total || a.State != alloctrack.StateExited {
		t.Fatalf("exited app changed: %+v -> %+v, state %s", before.Counts.Total, a.Counts.Total, a.State)
	}
}

func TestDaemonDeviceDisconnectAndReconnect(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 2, AppsPerDevice: 1})
	r := startDaemon(t, farm, daemonConfig())
	const serial, pkg = "sim-1", "com.example.app1"
	eventually(t, "tracking", func() bool { return r.tracking(serial, pkg, 2) })

	if err := farm.Disconnect(serial); err != nil {
		t.Fatal(err)
	}
	eventually(t, "device gone and its app disconnected", func() bool {
		dv, _ := r.device(serial)
		a, _ := r.app(serial, pkg)
		return dv.State == "gone" && a.State == alloctrack.StateDisconnected && !a.Tracking
	})
	before, _ := r.app(serial, pkg)
	// The other device is not disturbed.
	other, _ := r.app("sim-2", pkg)
	eventually(t, "sim-2 still counting", func() bool { return r.tracking("sim-2", pkg, other.Windows+2) })

	if err := farm.Reconnect(serial); err != nil {
		t.Fatal(err)
	}
	eventually(t, "device back and tracked again", func() bool {
		dv, _ := r.device(serial)
		return dv.State == "device" && r.tracking(serial, pkg, before.Windows+2)
	})
	after, _ := r.app(serial, pkg)
	if after.Counts.Total.Allocations <= before.Counts.Total.Allocations {
		t.Fatalf("no new counts after reconnect: %+v -> %+v", before.Counts.Total, after.Counts.Total)
	}
}

func TestDaemonFilters(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 3, AppsPerDevice: 3})
	cfg := daemonConfig()
	var err error
	// Devices sim-1 and sim-2, but not sim-2; "sim" alone would match no
	// serial, as patterns are anchored.
	if cfg.Serials, err = supervisor.NewFilter([]string{"sim-[12]", "sim"}, []string{"sim-2"}); err != nil {
		t.Fatal(err)
	}
	// app1 and app2 but not app2; "app3" alone matches no package name.
	if cfg.Packages, err = supervisor.NewFilter([]string{`com\.example\.app[12]`, "app3"}, []string{`.*app2`}); err != nil {
		t.Fatal(err)
	}
	r := startDaemon(t, farm, cfg)
	eventually(t, "sim-1 app1 tracking", func() bool { return r.tracking("sim-1", "com.example.app1", 3) })
	// Give the excluded ones every chance to show up: every device
	// listed, and app1 counts more windows.
	first, _ := r.app("sim-1", "com.example.app1")
	eventually(t, "every device listed, app1 3 windows further", func() bool {
		_, ok2 := r.device("sim-2")
		_, ok3 := r.device("sim-3")
		return ok2 && ok3 && r.tracking("sim-1", "com.example.app1", first.Windows+3)
	})

	s := r.d.Snapshot()
	if len(s.Apps) != 1 {
		var names []string
		for _, a := range s.Apps {
			names = append(names, a.Serial+"/"+a.Package+" "+a.State)
		}
		t.Fatalf("apps %v, want only sim-1/com.example.app1", names)
	}
	for _, dev := range farm.Devices() {
		for _, vm := range dev.VMs() {
			st := vm.Stats()
			included := dev.Serial() == "sim-1" && vm.ProcessName() == "com.example.app1"
			switch {
			case dev.Serial() != "sim-1" && st.Connections != 0:
				t.Errorf("%s/%s: excluded device, yet %d JDWP connections", dev.Serial(), vm.ProcessName(), st.Connections)
			case !included && st.Enables != 0:
				t.Errorf("%s/%s: excluded, yet tracking was enabled %d times", dev.Serial(), vm.ProcessName(), st.Enables)
			case included && st.Enables == 0:
				t.Errorf("%s/%s: included, never enabled", dev.Serial(), vm.ProcessName())
			}
		}
	}
	// Excluded devices are still listed with their state.
	for _, serial := range []string{"sim-2", "sim-3"} {
		if dv, ok := r.device(serial); !ok || dv.State != "device" {
			t.Errorf("device %s: %+v, %v", serial, dv, ok)
		}
	}
}

func TestDaemonUnsupportedAPI31(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 2, AppsPerDevice: 1, APIs: []int{31, 30}})
	r := startDaemon(t, farm, daemonConfig())
	eventually(t, "the API-31 app unsupported and the API-30 app tracking", func() bool {
		a, ok := r.app("sim-1", "com.example.app1")
		return ok && a.State == alloctrack.StateUnsupported && !a.Tracking && r.tracking("sim-2", "com.example.app1", 1)
	})
	if dv, _ := r.device("sim-1"); dv.API != 31 {
		t.Errorf("sim-1 API %d, want 31", dv.API)
	}
	// It stays unsupported (re-probed only after Reprobe, 30 min by
	// default) while the API-30 app counts 5 more windows.
	other, _ := r.app("sim-2", "com.example.app1")
	eventually(t, "5 more windows of the API-30 app", func() bool { return r.tracking("sim-2", "com.example.app1", other.Windows+5) })
	a, _ := r.app("sim-1", "com.example.app1")
	if a.State != alloctrack.StateUnsupported || a.Windows != 0 {
		t.Fatalf("API-31 app: state %s, %d windows", a.State, a.Windows)
	}
	for _, vm := range farm.Device("sim-1").VMs() {
		st := vm.Stats()
		if st.Enables != 0 || st.Chunks["REAL"] != 0 {
			t.Errorf("API-31 VM was sent %d REAE 1 and %d REAL", st.Enables, st.Chunks["REAL"])
		}
		if st.Connections != 1 {
			t.Errorf("API-31 VM: %d connections, want 1 (no re-probe before Reprobe)", st.Connections)
		}
	}
}

// Stopping the daemon turns tracking off in every VM before Run returns,
// also with many apps mid-window.
func TestDaemonStopDisablesEveryVM(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 3, AppsPerDevice: 3})
	cfg := daemonConfig()
	cfg.Session.Window = 150 * time.Millisecond
	r := startDaemon(t, farm, cfg)
	eventually(t, "all nine apps tracking", func() bool {
		n := 0
		for _, a := range r.d.Snapshot().Apps {
			if a.State == alloctrack.StateTracking && a.Windows >= 1 {
				n++
			}
		}
		return n == 9
	})
	on := 0
	for _, dev := range farm.Devices() {
		for _, vm := range dev.VMs() {
			if vm.Tracking() {
				on++
			}
		}
	}
	if on == 0 {
		t.Fatal("no VM tracking before stop")
	}
	r.stop() // checks every VM
	for _, dev := range farm.Devices() {
		for _, vm := range dev.VMs() {
			if st := vm.Stats(); st.Disables == 0 {
				t.Errorf("%s pid %d: no REAE 0 received", dev.Serial(), vm.PID())
			}
		}
	}
}

func TestFilter(t *testing.T) {
	tests := []struct {
		include, exclude []string
		match            map[string]bool
	}{
		{nil, nil, map[string]bool{"": true, "anything": true}},
		{[]string{"emulator-.*"}, nil, map[string]bool{"emulator-5554": true, "my-emulator-5554": false, "emulator": false}},
		{[]string{"a|b"}, nil, map[string]bool{"a": true, "b": true, "ab": false, "xa": false}}, // alternation stays anchored
		{[]string{`com\.example\..*`}, []string{`.*\.test`}, map[string]bool{
			"com.example.app": true, "com.example.app.test": false, "com.other": false, "com.exampleXapp": false,
		}},
		{nil, []string{"R58M.*", "emulator-5556"}, map[string]bool{"R58M123": false, "emulator-5556": false, "emulator-5554": true, "xR58M": true}},
		{[]string{"x", "y"}, []string{"y"}, map[string]bool{"x": true, "y": false, "z": false}},
	}
	for i, tt := range tests {
		f, err := supervisor.NewFilter(tt.include, tt.exclude)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		for name, want := range tt.match {
			if got := f.Match(name); got != want {
				t.Errorf("%d: include %q exclude %q: Match(%q) = %v, want %v", i, tt.include, tt.exclude, name, got, want)
			}
		}
	}
	for _, bad := range []struct {
		include, exclude []string
		pattern          string
	}{
		{[]string{"ok", "("}, nil, "("},
		{nil, []string{"[z-a]"}, "[z-a]"},
	} {
		_, err := supervisor.NewFilter(bad.include, bad.exclude)
		if err == nil {
			t.Errorf("NewFilter(%q, %q) accepted a bad pattern", bad.include, bad.exclude)
			continue
		}
		if want := fmt.Sprintf("%q", bad.pattern); !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name the pattern %s", err, want)
		}
	}
}

// TestDaemonHeldBeforeFirstSeen: an app another debugger holds before the
// daemon first sees it refuses the handshake, so its VM never says its
// name. The daemon names it from the device's process list (toolbox ps
// before API 26, toybox ps -A after), shows it held under that name with
// its pid, counts no unnamed error for it, and tracks it once the debugger
// lets go. A held app the package filter excludes is left alone.
func TestDaemonHeldBeforeFirstSeen(t *testing.T) {
	apis := []int{19, 23, 26, 30}
	farm := newFarm(sim.FarmConfig{Devices: len(apis), AppsPerDevice: 2, APIs: apis})
	var held []*sim.VM
	for _, dev := range farm.Devices() {
		vm := onlyVM(t, farm, dev.Serial(), "com.example.app2")
		vm.SetFaults(sim.Faults{DebuggerAttached: true})
		held = append(held, vm)
		excl, err := farm.AddApp(dev.Serial(), sim.AppConfig{Package: "com.example.skip"})
		if err != nil {
			t.Fatal(err)
		}
		excl.SetFaults(sim.Faults{DebuggerAttached: true})
		// Held before it was even named: the process list has no name
		// for it either, so it stays an unnamed hello error.
		unnamed, err := farm.AddApp(dev.Serial(), sim.AppConfig{Package: "com.example.unnamed", NameAfter: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		unnamed.SetFaults(sim.Faults{DebuggerAttached: true})
	}
	cfg := daemonConfig()
	var err error
	if cfg.Packages, err = supervisor.NewFilter(nil, []string{`com\.example\.skip`}); err != nil {
		t.Fatal(err)
	}
	r := startDaemon(t, farm, cfg)
	for i, dev := range farm.Devices() {
		serial := dev.Serial()
		eventually(t, fmt.Sprintf("%s (API %d): app2 held, app1 tracking", serial, apis[i]), func() bool {
			a, ok := r.app(serial, "com.example.app2")
			return ok && a.State == alloctrack.StateHeld && r.tracking(serial, "com.example.app1", 1)
		})
		a, _ := r.app(serial, "com.example.app2")
		if a.PID != held[i].PID() || a.Tracking || a.Windows != 0 {
			t.Errorf("%s: held app %+v; want pid %d, not tracking", serial, a.AppStatus, held[i].PID())
		}
	}
	time.Sleep(300 * time.Millisecond) // a few retries of the held apps
	for _, dev := range farm.Devices() {
		if _, ok := r.app(dev.Serial(), "com.example.skip"); ok {
			t.Errorf("%s: the excluded held app has stats", dev.Serial())
		}
		for _, pkg := range []string{"com.example.unnamed", alloctrack.PreInitialized} {
			if _, ok := r.app(dev.Serial(), pkg); ok {
				t.Errorf("%s: the unnamed held app has stats as %s", dev.Serial(), pkg)
			}
		}
		// Only the unnamed app's attempts count: the others were named.
		// (Errors first: a refusal is counted before the error it causes.)
		// A try is a refusal (below API 28) or a connection the VM left
		// unread (API 28 to 33).
		tries := func(st sim.Stats) int { return st.Refused + st.Queued + st.Stale }
		dv, _ := r.device(dev.Serial())
		unnamed := tries(onlyVM(t, farm, dev.Serial(), "com.example.unnamed").Stats())
		if n := dv.Errors[alloctrack.StageHello]; n == 0 || n > uint64(unnamed) {
			t.Errorf("%s: %d unnamed hello errors, want between 1 and the %d tries of the unnamed app", dev.Serial(), n, unnamed)
		}
		skip := onlyVM(t, farm, dev.Serial(), "com.example.skip")
		if n := tries(skip.Stats()); n != 1 {
			t.Errorf("%s: the excluded held app was tried %d times, want once", dev.Serial(), n)
		}
		// No hello error for the named held app: it is held, not broken.
		if a, _ := r.app(dev.Serial(), "com.example.app2"); a.Errors[alloctrack.StageHello] != 0 {
			t.Errorf("%s: the held app counts %d hello errors", dev.Serial(), a.Errors[alloctrack.StageHello])
		}
	}
	// The debugger lets go.
	for _, vm := range held {
		vm.SetFaults(sim.Faults{})
	}
	for _, dev := range farm.Devices() {
		serial := dev.Serial()
		eventually(t, serial+": app2 tracking once the debugger let go", func() bool { return r.tracking(serial, "com.example.app2", 1) })
	}
}

func onlyVM(t *testing.T, farm *sim.Farm, serial, pkg string) *sim.VM {
	t.Helper()
	for _, vm := range farm.Device(serial).VMs() {
		if vm.ProcessName() == pkg {
			return vm
		}
	}
	t.Fatalf("no %s on %s", pkg, serial)
	return nil
}

// Report buffers show in the snapshot while apps report, and every one is
// back once the daemon has stopped, apps restarting and devices leaving
// meanwhile.
func TestDaemonReportBuffers(t *testing.T) {
	w := sim.DefaultWorkload()
	w.Rate = 100000 // about 10,000 entries a window: reports large enough to be lent
	farm := newFarm(sim.FarmConfig{Devices: 2, AppsPerDevice: 2, Workload: w})
	r := startDaemon(t, farm, daemonConfig())
	eventually(t, "report buffers in use or kept", func() bool {
		b := r.d.Snapshot().ReportBuffers
		return b.InUse+b.Free > 0
	})
	serial := farm.Devices()[0].Serial()
	if _, err := farm.RestartApp(serial, onlyPID(t, farm, serial, "com.example.app1")); err != nil {
		t.Fatal(err)
	}
	// The cut streams leave the second device's VMs tracking: the
	// daemon turns them off once it is back on them, so the test waits
	// for that before it stops the daemon and checks.
	cut := farm.Devices()[1].Serial()
	before := map[string]uint64{}
	for _, pkg := range []string{"com.example.app1", "com.example.app2"} {
		a, _ := r.app(cut, pkg)
		before[pkg] = a.Windows
	}
	farm.Devices()[1].Disconnect()
	eventually(t, "windows after the restart and the cut", func() bool {
		return r.tracking(serial, "com.example.app1", 2) &&
			r.tracking(cut, "com.example.app1", before["com.example.app1"]+1) && r.tracking(cut, "com.example.app2", before["com.example.app2"]+1)
	})
	r.stop()
	if b := r.d.Snapshot().ReportBuffers; b.InUse != 0 {
		t.Fatalf("%d bytes of report buffers still in use after the daemon stopped", b.InUse)
	}
}

// TestDaemonNeverCrashesDalvik: Dalvik (Android 4.4) frees its ring when
// tracking is turned off, and a REAL after that kills the app. Through
// windows, an app restart and a second daemon taking over from the first,
// no session sends a REAL that is not after its own REAE 1.
func TestDaemonNeverCrashesDalvik(t *testing.T) {
	w := sim.DefaultWorkload()
	w.Rate = 2000
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 2, APIs: []int{19}, Workload: w})
	serial := farm.Devices()[0].Serial()
	r := startDaemon(t, farm, daemonConfig())
	eventually(t, "windows of both apps", func() bool {
		return r.tracking(serial, "com.example.app1", 3) && r.tracking(serial, "com.example.app2", 3)
	})
	if _, err := farm.RestartApp(serial, onlyPID(t, farm, serial, "com.example.app1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "windows of the restarted app", func() bool { return r.tracking(serial, "com.example.app1", 6) })
	r.stop()
	// A second daemon over the same host server: its sessions find
	// tracking off (the first turned it off) and start anew.
	d2 := supervisor.NewDaemon(daemonConfig(), []supervisor.Source{source.New(r.addr)}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d2.Run(ctx) }()
	eventually(t, "the second daemon's windows", func() bool {
		for _, a := range d2.Snapshot().Apps {
			if a.Package == "com.example.app2" && a.Windows >= 3 {
				return true
			}
		}
		return false
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, vm := range farm.VMs(serial, "") {
		if vm.Stats().Crashed {
			t.Errorf("pid %d (%s) crashed: a REAL came after REAE 0 without a REAE 1", vm.PID(), vm.ProcessName())
		}
	}
}

// setTracking turns a VM's tracker on or off and leaves; left on, it is
// what a client that died leaves: no VM turns it off when its client goes.
func setTracking(t *testing.T, dev *sim.Device, vm *sim.VM, on bool) {
	t.Helper()
	c, err := dev.OpenService("jdwp:" + strconv.Itoa(vm.PID()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testwait.Context(t)
	conn, err := jdwp.Open(ctx, c, jdwp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl := ddms.NewClient(conn)
	if err := cl.SetAllocTracking(on); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.AllocTracking(ctx); err != nil || got != on {
		t.Fatalf("tracking %v %v, want %v", got, err, on)
	}
	conn.Close()
}

// TestDaemonOrphanedTrackers: an app the package filters exclude whose
// tracker an earlier, wider run left on is asked once (REAQ), counted in
// the device's OrphanedTrackers and left alone; with TurnOffOrphans its
// tracker is turned off.
func TestDaemonOrphanedTrackers(t *testing.T) {
	for _, turnOff := range []bool{false, true} {
		farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{30}})
		dev := farm.Devices()[0]
		skip, err := farm.AddApp(dev.Serial(), sim.AppConfig{Package: "com.example.skip"})
		if err != nil {
			t.Fatal(err)
		}
		setTracking(t, dev, skip, true)
		eventually(t, "the VM free again", func() bool { return skip.Stats().Connections == 1 })
		cfg := daemonConfig()
		cfg.TurnOffOrphans = turnOff
		if cfg.Packages, err = supervisor.NewFilter(nil, []string{`com\.example\.skip`}); err != nil {
			t.Fatal(err)
		}
		r := startDaemon(t, farm, cfg)
		eventually(t, "app1 tracking", func() bool { return r.tracking(dev.Serial(), "com.example.app1", 1) })
		if turnOff {
			eventually(t, "the orphaned tracker turned off", func() bool { return !skip.Tracking() })
		} else {
			eventually(t, "the orphaned tracker counted", func() bool { dv, _ := r.device(dev.Serial()); return dv.OrphanedTrackers == 1 })
			if !skip.Tracking() {
				t.Error("the orphaned tracker was turned off without TurnOffOrphans")
			}
		}
		if st := skip.Stats(); st.Chunks["REAL"] != 0 || st.Chunks["REAQ"] != 1+1+btoi(turnOff) {
			// One REAQ from leaveTrackingOn, one from the daemon, and the
			// confirming one after REAE 0.
			t.Errorf("turn off %v: the excluded app was sent %v", turnOff, st.Chunks)
		}
		if _, ok := r.app(dev.Serial(), "com.example.skip"); ok {
			t.Error("the excluded app has stats")
		}
		if !turnOff {
			// The daemon's stop checks that no app is left tracking: the
			// orphan was not its own.
			farm.KillApp(dev.Serial(), skip.PID())
		}
		r.stop()
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestDaemonRecentAllocMax: on ART 7 to 9 dalvik.vm.recentAllocMax caps a
// report below 65,535 entries; the daemon reads it, so a full report at
// that size counts as overflowed and the window shortens.
func TestDaemonRecentAllocMax(t *testing.T) {
	w := sim.DefaultWorkload()
	w.Rate = 60000 // about 6,000 allocations a 100 ms window
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{26}, Workload: w,
		Device: func(_ int, c *sim.DeviceConfig) { c.Props = map[string]string{"dalvik.vm.recentAllocMax": "2000"} }})
	serial := farm.Devices()[0].Serial()
	if vm := farm.Devices()[0].VMs()[0]; vm.Config().MaxEntries != 2000 {
		t.Fatalf("the simulated VM keeps %d records, want 2000", vm.Config().MaxEntries)
	}
	cfg := daemonConfig()
	cfg.Session.RTTFloor = 1 // windows of 100 ms are few round trips under -race
	r := startDaemon(t, farm, cfg)
	eventually(t, "overflowed windows counted", func() bool {
		a, ok := r.app(serial, "com.example.app1")
		return ok && a.Overflowed >= 2 && a.Window < cfg.Session.Window
	})
}

// TestDaemonTrackJDWPCut: adbd cuts track-jdwp updates after the first
// at 1,024 bytes, leaving out the pids that do not fit. With 180 apps
// (1,080 bytes of pids) an update misses some: the daemon reopens
// track-jdwp for a whole list, so no app looks gone and a new one is
// found.
func TestDaemonTrackJDWPCut(t *testing.T) {
	w := sim.DefaultWorkload()
	w.Rate = 0
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 180, Workload: w})
	dev := farm.Devices()[0]
	cfg := daemonConfig()
	cfg.Session.Window = 2 * time.Second
	r := startDaemon(t, farm, cfg)
	count := func(state string) int {
		n := 0
		for _, a := range r.d.Snapshot().Apps {
			if a.State == state {
				n++
			}
		}
		return n
	}
	eventually(t, "180 apps tracking", func() bool { return count(alloctrack.StateTracking) == 180 })
	if _, err := farm.AddApp(dev.Serial(), sim.AppConfig{Package: "com.example.new", Workload: w}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new app tracking", func() bool {
		a, ok := r.app(dev.Serial(), "com.example.new")
		return ok && a.State == alloctrack.StateTracking
	})
	if n := count(alloctrack.StateExited); n != 0 {
		t.Errorf("%d apps shown exited after a cut track-jdwp update", n)
	}
}

// TestDaemonWaitsOnHeldConnection: on Android 10 a VM another client
// holds leaves the daemon's handshake unread, and takes that connection
// once the holder leaves. The daemon shows the app held, keeps the one
// connection waiting, and tracks on it as soon as the holder goes: no
// second connection, none left stale.
func TestDaemonWaitsOnHeldConnection(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{29}})
	dev := farm.Devices()[0]
	vm := dev.VMs()[0]
	c, err := dev.OpenService("jdwp:" + strconv.Itoa(vm.PID()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testwait.Context(t)
	holder, err := jdwp.Open(ctx, c, jdwp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemonConfig()
	cfg.HeldRetry = time.Minute
	r := startDaemon(t, farm, cfg)
	eventually(t, "the app held", func() bool {
		a, ok := r.app(dev.Serial(), "com.example.app1")
		return ok && a.State == alloctrack.StateHeld
	})
	time.Sleep(3 * cfg.Session.RequestTimeout)
	if st := vm.Stats(); st.Queued != 1 {
		t.Errorf("%d connections of the daemon queued in the VM, want 1", st.Queued)
	}
	holder.Close()
	eventually(t, "tracking on the connection that waited", func() bool { return r.tracking(dev.Serial(), "com.example.app1", 1) })
	if st := vm.Stats(); st.Connections != 2 || st.Stale != 0 || st.Queued != 0 {
		t.Errorf("VM served %d connections, %d stale, %d queued; want the holder's and the daemon's one, none stale", st.Connections, st.Stale, st.Queued)
	}
}

// TestDaemonTrackAppWaiting: on Android 15 track-app says which processes
// wait for a debugger; with the DDM backend the daemon then does not
// connect to them at all, and shows them waiting.
func TestDaemonTrackAppWaiting(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{35}})
	dev := farm.Devices()[0]
	waits, err := farm.AddApp(dev.Serial(), sim.AppConfig{Package: "com.example.waits", WaitingForDebugger: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemonConfig()
	cfg.Backend = alloctrack.BackendDDM
	r := startDaemon(t, farm, cfg)
	eventually(t, "the waiting app shown waiting, the other probed", func() bool {
		a, ok := r.app(dev.Serial(), "com.example.waits")
		b, ok2 := r.app(dev.Serial(), "com.example.app1")
		return ok && a.State == alloctrack.StateWaiting && ok2 && b.State == alloctrack.StateUnsupported
	})
	// An app started later is probed too: the waiting one still has no
	// connection.
	if _, err := farm.AddApp(dev.Serial(), sim.AppConfig{Package: "com.example.later"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the later app probed", func() bool {
		a, ok := r.app(dev.Serial(), "com.example.later")
		return ok && a.State == alloctrack.StateUnsupported
	})
	if st := waits.Stats(); st.Connections != 0 || st.Refused+st.Queued+st.Stale != 0 {
		t.Errorf("the app waiting for a debugger was connected to: %+v", st)
	}
}
