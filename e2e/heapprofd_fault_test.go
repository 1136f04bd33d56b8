package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// TestHeapprofdFaultsThroughADB: every fault a heapprofd app can meet,
// through the real adb server, against the simulator's perfetto. A buffer
// overrun and a guardrail end a session, are counted, and a new session
// goes on; the Android 12/13 unwinding bug shows in its metric and the
// log; an app neither debuggable nor profileable is found from the
// process list and shown unprofileable on the word of the device's
// track-app, never tracking; a profileable release app, absent from
// track-jdwp, is tracked; an app restarted under a new pid is followed by
// the same session, which lists process names. Then the counts of all these apps equal the simulator's
// sampled truth exactly, old processes included. An unplugged device and
// a restarted adb server are recovered from: the device's sessions
// cleaned up and started anew, counters never decreasing.
func TestHeapprofdFaultsThroughADB(t *testing.T) {
	w := heapprofdWorkload()
	w.Rate = 1500
	cfg := sim.FarmConfig{Devices: 2, AppsPerDevice: 0, APIs: []int{31, 33}, Workload: w}
	setup := func(f *sim.Farm) {
		for _, a := range []sim.AppConfig{
			{Package: "com.example.overrun"},
			{Package: "com.example.guardrail"},
			{Package: "com.example.broken", BrokenUnwind: true},
			{Package: "com.example.release", NotDebuggable: true},
			{Package: "com.example.profileable", NotDebuggable: true, Profileable: true},
			{Package: "com.example.restart"},
		} {
			a.Workload = w
			if _, err := f.AddApp("sim-1", a); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.AddApp("sim-2", sim.AppConfig{Package: "com.example.unplug", Workload: w}); err != nil {
			t.Fatal(err)
		}
	}
	r := newRig(t, cfg, setup, "--package", `com\.example\..*`)
	a := func(serial, pkg string) tracked { return tracked{r.app(serial, pkg), serial} }
	overrun, guard, broken := a("sim-1", "com.example.overrun"), a("sim-1", "com.example.guardrail"), a("sim-1", "com.example.broken")
	release, profileable, restart := a("sim-1", "com.example.release"), a("sim-1", "com.example.profileable"), a("sim-1", "com.example.restart")
	unplug := a("sim-2", "com.example.unplug")
	healthy := []tracked{overrun, guard, broken, profileable, restart, unplug}
	r.d.waitState(t, appsOf(healthy), "tracking", 30*time.Second)
	mono := func() { r.d.mono.observe(t, r.d.metrics(t)) }
	mono()

	t.Log("buffer overrun and guardrail: counted, and a new session goes on")
	r.vm(t, overrun.farmSerial, overrun.pkg).SetFaults(sim.Faults{HeapprofdOverrun: 1})
	r.vm(t, guard.farmSerial, guard.pkg).SetFaults(sim.Faults{HeapprofdGuardrail: 1})
	for _, c := range []struct {
		tr    tracked
		stage string
	}{{overrun, "buffer-overran"}, {guard, "guardrail"}} {
		waitFor(t, 30*time.Second, fmt.Sprintf("%v: %s counted and a second session tracking", c.tr.app, c.stage), func() (bool, string) {
			sc := r.d.metrics(t)
			n := sc.value("alloctrack_app_errors_total", c.tr.labels("stage", c.stage)...)
			s := sc.value("alloctrack_heapprofd_sessions_total", c.tr.labels()...)
			st := sc.value("alloctrack_app_state", c.tr.labels("state", "tracking")...)
			return n == 1 && s >= 2 && st == 1, fmt.Sprintf("errors %v sessions %v tracking %v", n, s, st)
		})
	}
	mono()

	t.Log("the unwinding bug: its metric and a log line")
	waitFor(t, 20*time.Second, "broken-stack samples counted", func() (bool, string) {
		n := r.d.metrics(t).value("alloctrack_heapprofd_broken_stack_samples_total", broken.labels("unwind", "unknown")...)
		return n > 0, fmt.Sprintf("%v", n)
	})
	if !strings.Contains(r.d.out.String(), "Android 12/13 ART unwinding bug") {
		t.Error("the unwinding bug was not logged")
	}

	t.Log("a release app: found from ps, shown unprofileable on the word of track-app; a profileable one tracked")
	waitFor(t, 30*time.Second, "the release app unprofileable", func() (bool, string) {
		sc := r.d.metrics(t)
		st := sc.value("alloctrack_app_state", release.labels("state", "unprofileable")...)
		n := sc.value("alloctrack_app_errors_total", release.labels("stage", "unprofileable")...)
		return st == 1 && n >= 1, fmt.Sprintf("state %v errors %v", st, n)
	})
	if v := r.d.metrics(t).value("alloctrack_app_tracking", release.labels()...); v != 0 {
		t.Errorf("the release app is shown tracking")
	}
	if !strings.Contains(r.d.out.String(), "neither debuggable nor profileable") {
		t.Error("the log does not say why the release app gives nothing")
	}

	t.Log("an app restarted under a new pid")
	old := r.vm(t, restart.farmSerial, restart.pkg)
	nvm, err := r.farm.RestartApp(restart.farmSerial, old.PID())
	if err != nil {
		t.Fatal(err)
	}
	sessionsBefore := r.farm.Device("sim-1").PerfettoSessions()
	waitFor(t, 30*time.Second, "the restarted app tracked under its new pid by the same session", func() (bool, string) {
		sc := r.d.metrics(t)
		pid := sc.value("alloctrack_app_pid", restart.labels()...)
		profiled := false
		for _, s := range r.farm.Device("sim-1").PerfettoSessions() {
			for _, p := range s.Targets {
				profiled = profiled || p == nvm.PID()
			}
		}
		st := sc.value("alloctrack_app_state", restart.labels("state", "tracking")...)
		return pid == float64(nvm.PID()) && st == 1 && profiled,
			fmt.Sprintf("pid %v tracking %v new pid profiled %v", pid, st, profiled)
	})
	// The session lists process names: a process that restarts under its
	// name needs no new session.
	if after := r.farm.Device("sim-1").PerfettoSessions(); len(sessionsBefore) != 1 || len(after) != 1 || after[0].PID != sessionsBefore[0].PID {
		t.Errorf("the restart changed the device's session: %v then %v", sessionsBefore, after)
	}
	mono()

	t.Log("exact counts after these faults")
	exact := []tracked{overrun, guard, broken, profileable, restart}
	for _, x := range exact {
		for _, vm := range r.farm.VMs(x.farmSerial, x.pkg) {
			vm.Pause(true)
		}
	}
	waitFor(t, 30*time.Second, "samples equal the simulator's, old processes included", func() (bool, string) {
		sc := r.d.metrics(t)
		for _, x := range exact {
			var want uint64
			for _, vm := range r.farm.VMs(x.farmSerial, x.pkg) {
				want += vm.HeapprofdTruth().Sampled.Total.Allocations
			}
			if n := sc.value("alloctrack_app_sampled_allocations_total", x.labels()...); n != float64(want) || want == 0 {
				return false, fmt.Sprintf("%v: daemon %v, simulator %v", x.app, n, want)
			}
		}
		return true, ""
	})
	for _, x := range exact {
		for _, vm := range r.farm.VMs(x.farmSerial, x.pkg) {
			vm.Pause(false)
		}
	}

	t.Log("an unplugged device: its sessions cleaned up and started anew on its return")
	dev2 := r.farm.Device("sim-2")
	before := dev2.PerfettoSessions()
	if len(before) != 1 {
		t.Fatalf("sim-2 sessions %+v, want 1", before)
	}
	if err := r.farm.Disconnect("sim-2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the unplugged app shown disconnected", func() (bool, string) {
		st := r.d.metrics(t).value("alloctrack_app_state", unplug.labels("state", "disconnected")...)
		return st == 1, fmt.Sprintf("%v", st)
	})
	if err := r.farm.Reconnect("sim-2"); err != nil {
		t.Fatal(err)
	}
	r.adb.Connect(t, r.serial["sim-2"])
	waitFor(t, 30*time.Second, "the returning device's old session stopped, a new one tracking", func() (bool, string) {
		s := dev2.PerfettoSessions()
		st := r.d.metrics(t).value("alloctrack_app_state", unplug.labels("state", "tracking")...)
		return len(s) == 1 && s[0].PID != before[0].PID && len(dev2.TraceFiles()) == 1 && st == 1,
			fmt.Sprintf("sessions %+v files %v tracking %v", s, dev2.TraceFiles(), st)
	})
	mono()

	t.Log("the adb server killed and restarted")
	killADB(t, r.adb)
	time.Sleep(500 * time.Millisecond)
	ns := startADBOnPort(t, r.adb.Port(), r.adb.Home())
	for _, s := range r.serial {
		ns.connect(t, s)
	}
	waitFor(t, 40*time.Second, "every healthy app counting dumps again", func() (bool, string) {
		sc0 := r.d.metrics(t)
		time.Sleep(2500 * time.Millisecond)
		sc := r.d.metrics(t)
		for _, x := range healthy {
			if sc.value("alloctrack_heapprofd_dumps_total", x.labels()...) <= sc0.value("alloctrack_heapprofd_dumps_total", x.labels()...) ||
				sc.value("alloctrack_app_state", x.labels("state", "tracking")...) != 1 {
				return false, fmt.Sprintf("%v not counting", x.app)
			}
		}
		return true, ""
	})
	mono()
	if code := r.d.shutdown(t); code != 0 {
		t.Errorf("daemon exit status %d", code)
	}
	for _, d := range r.farm.Devices() {
		for _, s := range d.PerfettoSessions() {
			t.Errorf("%s: session left after SIGTERM: %+v", d.Serial(), s)
		}
		for f := range d.TraceFiles() {
			t.Errorf("%s: trace file left after SIGTERM: %s", d.Serial(), f)
		}
	}
}
