package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// TestHeapprofdFarmThroughADB: an Android 12 (API 31) and an Android 13
// (API 33) device with 8 apps each, through the real adb server. That is
// more apps per device than traced's 5 sessions per uid would allow one
// session each, and one app of the first device is profiled by another
// tool's shell session, which counts toward that limit too. Sessions
// rotate every 4 s. Every other app tracks, with samples equal to the
// simulator's truth across the rotations; the app the other tool holds is
// shown held; an app idle for 20 windows is never unprofileable and
// is exact once it allocates; each device holds at most one session and
// one trace file of ours at a time; and after SIGTERM nothing of ours is
// left.
func TestHeapprofdFarmThroughADB(t *testing.T) {
	idle := sim.DefaultWorkload()
	idle.Rate, idle.Sites = 0, 20
	cfg := sim.FarmConfig{Devices: 2, AppsPerDevice: 7, APIs: []int{31, 33}, Workload: heapprofdWorkload()}
	setup := func(f *sim.Farm) {
		if _, err := f.AddApp("sim-2", sim.AppConfig{Package: "com.example.idle", Workload: idle}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.AddApp("sim-1", sim.AppConfig{Package: "com.example.held", Workload: heapprofdWorkload()}); err != nil {
			t.Fatal(err)
		}
	}
	r := attachFarm(t, cfg, setup)
	dev1 := r.farm.Device("sim-1")
	heldVM := r.vm(t, "sim-1", "com.example.held")
	foreign, err := dev1.StartForeignSession("someone-else.perfetto-trace", 4096, heldVM.PID())
	if err != nil {
		t.Fatal(err)
	}
	r.d = startDaemon(t, r.adb.Addr(), "--heapprofd.rotate", "4s")
	held := tracked{r.app("sim-1", "com.example.held"), "sim-1"}
	idleApp := tracked{r.app("sim-2", "com.example.idle"), "sim-2"}
	var busy []tracked
	for _, a := range r.heapprofdApps() {
		if a.app != held.app && a.app != idleApp.app {
			busy = append(busy, a)
		}
	}
	if len(busy) != 14 {
		t.Fatalf("%d busy apps, want 14", len(busy))
	}

	// Watch the devices: one session and one file of ours at most, and
	// the idle app's state, all along.
	stop, watched := make(chan struct{}), make(chan string)
	go func() {
		var problems []string
		for {
			select {
			case <-stop:
				watched <- strings.Join(problems, "; ")
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, d := range r.farm.Devices() {
				sessions, files := 0, 0
				for _, s := range d.PerfettoSessions() {
					if s.PID != foreign && strings.HasPrefix(s.SessionName, "alloctrack-") {
						sessions++
					}
				}
				for name := range d.TraceFiles() {
					if strings.HasPrefix(name, "alloctrack-") {
						files++
					}
				}
				if (sessions > 1 || files > 1) && len(problems) < 5 {
					problems = append(problems, fmt.Sprintf("%s: %d sessions, %d files of ours", d.Serial(), sessions, files))
				}
			}
		}
	}()

	r.d.waitState(t, appsOf(append(busy, idleApp)), "tracking", 30*time.Second)
	waitFor(t, 30*time.Second, "the app another tool holds shown held", func() (bool, string) {
		sc := r.d.metrics(t)
		st := sc.value("alloctrack_app_state", held.labels("state", "held")...)
		return st == 1, fmt.Sprintf("held %v", st)
	})
	// 20 dumps of a busy app of the idle app's device, each read after the
	// one before: the idle app lives through them without a sample.
	var neighbour tracked
	for _, a := range busy {
		if a.farmSerial == idleApp.farmSerial {
			neighbour = a
		}
	}
	dumps := func() float64 {
		return r.d.metrics(t).value("alloctrack_heapprofd_dumps_total", neighbour.labels()...)
	}
	for range 20 {
		last := dumps()
		waitFor(t, 0, "one more dump of "+neighbour.pkg, func() (bool, string) {
			n := dumps()
			return n > last, fmt.Sprintf("%v dumps", n)
		})
		sc := r.d.metrics(t)
		if v := sc.value("alloctrack_app_state", idleApp.labels("state", "unprofileable")...); v != 0 {
			t.Fatalf("the idle app is shown unprofileable")
		}
		if v := sc.value("alloctrack_app_state", idleApp.labels("state", "tracking")...); v != 1 {
			t.Errorf("the idle app is not tracking")
		}
	}
	// The idle app allocates at last; allocations that fall in the gap of
	// a rotation (one stop and one start) are not sampled, so it allocates
	// until a session has sampled some.
	idleVM := r.vm(t, "sim-2", "com.example.idle")
	waitFor(t, 30*time.Second, "the idle app's allocations sampled", func() (bool, string) {
		idleVM.Allocate(500)
		time.Sleep(window)
		n := idleVM.HeapprofdTruth().Sampled.Total.Allocations
		return n > 0, fmt.Sprintf("%d samples", n)
	})
	waitFor(t, 30*time.Second, "several rotations on each device", func() (bool, string) {
		sc := r.d.metrics(t)
		for _, a := range busy {
			if n := sc.value("alloctrack_heapprofd_sessions_total", a.labels()...); n < 4 {
				return false, fmt.Sprintf("%v: %v sessions", a.app, n)
			}
		}
		return true, ""
	})
	settleHeapprofd(t, r, append(busy, idleApp))
	sc := r.d.metrics(t)
	for _, d := range r.farm.Devices() {
		refused := 0
		for _, argv := range d.ShellLog() {
			if argv[0] == "kill" && len(argv) > 1 && (argv[1] == "-0" || argv[1] == "-9" || argv[1] == "-KILL") {
				t.Errorf("%s: the shell was asked to %q, which SELinux denies on perfetto", d.Serial(), argv)
			}
		}
		refused += d.RefusedSessions()
		if refused != 0 {
			t.Errorf("%s: the tracing service refused %d sessions", d.Serial(), refused)
		}
	}
	if v := sc.sum("alloctrack_app_errors_total", "stage", "perfetto-refused"); v != 0 {
		t.Errorf("%v perfetto-refused errors", v)
	}
	if code := r.d.shutdown(t); code != 0 {
		t.Errorf("daemon exit status %d", code)
	}
	close(stop)
	if p := <-watched; p != "" {
		t.Errorf("more than one session or file of ours on a device: %s", p)
	}
	for _, d := range r.farm.Devices() {
		for _, s := range d.PerfettoSessions() {
			if s.PID != foreign {
				t.Errorf("%s: session %v left after SIGTERM", d.Serial(), s)
			}
		}
		for name := range d.TraceFiles() {
			if strings.HasPrefix(name, "alloctrack-") {
				t.Errorf("%s: file %s left after SIGTERM", d.Serial(), name)
			}
		}
	}
}
