package e2e

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// modernPkg is an app on Android 12 (API 31), whose VM never answers the
// allocation-tracker chunks over DDM.
const modernPkg = "com.example.modern"

// farm2x2 is two devices (API 30 and 28) with two apps each, plus an API-31
// app on the first.
func farm2x2(t *testing.T) (sim.FarmConfig, func(*sim.Farm)) {
	cfg := sim.FarmConfig{Devices: 2, AppsPerDevice: 2, APIs: []int{30, 28}, Workload: quietWorkload()}
	return cfg, func(f *sim.Farm) {
		if _, err := f.AddApp("sim-1", sim.AppConfig{Package: modernPkg, API: 31, Workload: quietWorkload()}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDaemonEndToEnd runs simulated devices → the real adb server →
// alloctrack serve → a real Prometheus, and checks through Prometheus's
// HTTP API that the counters equal the simulator's ground truth, that a
// restarted app and a returning device are picked up again, that an
// Android 12 app shows as unsupported, and that SIGTERM leaves every app
// with tracking off.
func TestDaemonEndToEnd(t *testing.T) {
	cfg, setup := farm2x2(t)
	r := newRig(t, cfg, setup)
	p := startPrometheus(t, r.d.addr)
	apps := r.trackable()
	if len(apps) != 4 {
		t.Fatalf("%d trackable apps, want 4", len(apps))
	}
	modern := r.app("sim-1", modernPkg)
	took := r.d.waitState(t, appsOf(apps), "tracking", 20*time.Second)
	r.d.waitState(t, []app{modern}, "unsupported", 20*time.Second)
	t.Logf("every app tracked %v after the daemon was ready", took.Round(time.Millisecond))

	rng := rand.New(rand.NewPCG(4, 2))
	t.Log("phase 1: allocations in every app, then the counters against the ground truth")
	maxBatch := allocate(t, r, apps, rng, 6)
	at := quiesce(t, r, p, apps)
	compareWithPrometheus(t, r, p, at, 2*maxBatch)

	// The API-31 app: shown unsupported, not tracking, exactly once.
	v := p.queryAt(t, `alloctrack_app_state{state="unsupported"} == 1`, at)
	if len(v) != 1 || v[0].Metric["serial"] != modern.serial || v[0].Metric["package"] != modern.pkg {
		t.Errorf(`alloctrack_app_state{state="unsupported"} == 1: %v, want only %v`, v, modern)
	}
	if v := p.queryAt(t, fmt.Sprintf(`alloctrack_app_tracking{serial=%q, package=%q}`, modern.serial, modern.pkg), at); len(v) != 1 || v[0].Value != 0 {
		t.Errorf("alloctrack_app_tracking of %v: %v, want 0", modern, v)
	}
	if n := r.vm(t, "sim-1", modernPkg).Stats().Chunks["REAL"]; n != 0 {
		t.Errorf("the API-31 app was sent %d REAL requests", n)
	}

	// Prometheus has been scraping for a while: its connection is up.
	goroutines := r.d.goroutines(t)
	// The heap live after a collection, which tools/measure soak follows
	// to tell memory held from the collector's headroom.
	if v, ok := r.d.metrics(t).get("go_gc_heap_live_bytes"); !ok || v <= 0 {
		t.Errorf("go_gc_heap_live_bytes: %v (exposed: %v), want the live heap", v, ok)
	}
	t.Log("phase 2: an app killed and restarted with a new pid")
	restarted := apps[0]
	old := r.vm(t, restarted.farmSerial, restarted.pkg)
	before := r.d.metrics(t).value("alloctrack_app_allocations_total", restarted.labels()...)
	nvm, err := r.farm.RestartApp(restarted.farmSerial, old.PID())
	if err != nil {
		t.Fatal(err)
	}
	took = waitFor(t, 20*time.Second, "restarted app tracked under its new pid", func() (bool, string) {
		sc := r.d.metrics(t)
		pid := sc.value("alloctrack_app_pid", restarted.labels()...)
		tracking := sc.value("alloctrack_app_state", restarted.labels("state", "tracking")...)
		return pid == float64(nvm.PID()) && tracking == 1 && nvm.Tracking(), fmt.Sprintf("pid %v tracking %v", pid, tracking)
	})
	t.Logf("%v: pid %d restarted as %d, tracked again after %s", restarted.app, old.PID(), nvm.PID(), windowsOf(took))
	nvm.Allocate(1500)
	r.d.waitWindows(t, []app{restarted.app}, 2, 20*time.Second)
	if after := r.d.metrics(t).value("alloctrack_app_allocations_total", restarted.labels()...); after <= before || after > before+1500 {
		t.Errorf("%v: %v allocations after the restart, %v before; want growth by up to 1500", restarted.app, after, before)
	}
	q := fmt.Sprintf(`alloctrack_app_pid{serial=%q, package=%q}`, restarted.serial, restarted.pkg)
	waitFor(t, 20*time.Second, "Prometheus sees the new pid", func() (bool, string) {
		v := p.query(t, q)
		return len(v) == 1 && v[0].Value == float64(nvm.PID()), fmt.Sprint(v)
	})

	t.Log("phase 3: a device disconnects and returns")
	const gone = "sim-2"
	var goneApps []app
	for _, a := range apps {
		if a.farmSerial == gone {
			goneApps = append(goneApps, a.app)
		}
	}
	serial := r.serial[gone]
	if err := r.farm.Disconnect(gone); err != nil {
		t.Fatal(err)
	}
	took = waitFor(t, 20*time.Second, "daemon sees the device leave", func() (bool, string) {
		sc := r.d.metrics(t)
		online := sc.value("alloctrack_device_state", "serial", serial, "state", "device")
		tracking := sc.sum("alloctrack_app_tracking", "serial", serial)
		return online == 0 && tracking == 0, fmt.Sprintf("online %v, apps tracking %v", online, tracking)
	})
	sc := r.d.metrics(t)
	var states []string
	for _, a := range goneApps {
		for _, s := range sc {
			if s.matches("alloctrack_app_state", a.labels()) && s.value == 1 {
				states = append(states, a.pkg+"="+s.labels["state"])
			}
		}
	}
	t.Logf("device %s: the daemon saw it leave after %v; its apps are now %v", serial, took.Round(time.Millisecond), states)
	// Two more windows of the apps still there: none of the gone apps'.
	offWindows := r.d.windows(t, goneApps)
	var stayed []app
	for _, a := range apps {
		if a.farmSerial != gone {
			stayed = append(stayed, a.app)
		}
	}
	r.d.waitWindows(t, stayed, 2, 0)
	now := r.d.windows(t, goneApps)
	for _, a := range goneApps {
		if now[a] != offWindows[a] {
			t.Errorf("%v: windows counted while its device was away: %v, then %v", a, offWindows[a], now[a])
		}
	}
	if err := r.farm.Reconnect(gone); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	// The adb server reconnects TCP devices on its own; `adb connect`
	// brings it back sooner if it has given up.
	how := "the adb server's reconnect"
	deadline := time.Now().Add(12 * time.Second)
	for {
		m, err := r.adb.Devices(t)
		if err != nil {
			t.Fatal(err)
		}
		if m[serial] == "device" {
			break
		}
		if time.Now().After(deadline) {
			how = "adb connect"
			r.adb.Connect(t, serial)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("device %s online again after %v, through %s", serial, time.Since(back).Round(time.Millisecond), how)
	took = r.d.waitState(t, goneApps, "tracking", 20*time.Second)
	r.d.waitWindows(t, goneApps, 1, 20*time.Second)
	t.Logf("its apps tracked again %v after it was back", took.Round(time.Millisecond))

	t.Log("phase 4: more allocations, then the counters against the ground truth again")
	maxBatch = max(maxBatch, 1500, allocate(t, r, r.trackable(), rng, 4))
	at = quiesce(t, r, p, apps)
	compareWithPrometheus(t, r, p, at, 2*maxBatch)

	// Prometheus never saw an alloctrack counter reset.
	names := map[string]bool{}
	for _, s := range r.d.metrics(t) {
		if strings.HasPrefix(s.name, "alloctrack_") && strings.HasSuffix(s.name, "_total") {
			names[s.name] = true
		}
	}
	for name := range names {
		if v := p.queryAt(t, fmt.Sprintf(`sum(resets(%s[10m]))`, name), at); len(v) != 1 || v[0].Value != 0 {
			t.Errorf("%s: counter resets seen by Prometheus: %v", name, v)
		}
	}
	t.Logf("Prometheus saw no reset of %d alloctrack counters", len(names))
	if v := p.queryAt(t, `count(alloctrack_device_state{state="device"} == 1)`, at); len(v) != 1 || v[0].Value != 2 {
		t.Errorf("devices online in Prometheus: %v, want 2", v)
	}

	// The sessions that the restart and the disconnection ended left no
	// goroutine behind in the daemon.
	if g := r.d.goroutines(t); g > goroutines+2 {
		t.Errorf("daemon goroutines: %v after phase 1, %v at the end", goroutines, g)
	} else {
		t.Logf("daemon goroutines: %v after phase 1, %v at the end", goroutines, g)
	}

	t.Log("phase 5: SIGTERM")
	if code := r.d.shutdown(t); code != 0 {
		t.Errorf("daemon exit status %d, want 0", code)
	}
	r.checkTrackingOff(t)
	t.Logf("/metrics fetched %d times directly; %d alloctrack counter series never went down", r.d.mono.scrapes, r.d.mono.series)
}

// TestPromtoolCheckMetrics: `promtool check metrics` finds nothing to say
// about /metrics of a daemon tracking a few apps.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	cfg, setup := farm2x2(t)
	cfg.Devices = 1
	r := newRig(t, cfg, setup)
	apps := r.trackable()
	r.d.waitState(t, appsOf(apps), "tracking", 20*time.Second)
	r.d.waitState(t, []app{r.app("sim-1", modernPkg)}, "unsupported", 20*time.Second)
	allocate(t, r, apps, rand.New(rand.NewPCG(7, 7)), 2)
	r.d.waitWindows(t, appsOf(apps), 2, 20*time.Second)

	text := r.d.metricsText(t)
	for _, name := range []string{"alloctrack_site_allocations_total", "alloctrack_site_info", "alloctrack_report_round_trip_seconds_bucket", "alloctrack_build_info"} {
		if !strings.Contains(text, name) {
			t.Errorf("/metrics has no %s", name)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	t.Logf("promtool check metrics: nothing to report on %d lines of /metrics", strings.Count(text, "\n"))
}
