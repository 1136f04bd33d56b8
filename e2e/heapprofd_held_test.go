package e2e

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// TestHeapprofdHeldThroughADB: an Android 13 app that another tool's
// heapprofd session profiles (Android Studio's, say) is rejected by
// heapprofd, which says so only when a session of ours stops (fact 14 of
// the sheet). Through the real adb server, the daemon ends its
// session once apps sent no sample for --heapprofd.silence, and its stop
// shows that app held within a minute of the daemon starting; an idle app
// of the same device is never shown held, also after one more check of
// it; a busy app counts on; the other tool's session runs on, and its
// file is never touched.
func TestHeapprofdHeldThroughADB(t *testing.T) {
	idle := sim.DefaultWorkload()
	idle.Rate = 0
	cfg := sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{33}, Workload: heapprofdWorkload()}
	r := attachFarm(t, cfg, func(f *sim.Farm) {
		if _, err := f.AddApp("sim-1", sim.AppConfig{Package: "com.example.idle", Workload: idle}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.AddApp("sim-1", sim.AppConfig{Package: "com.example.held", Workload: heapprofdWorkload()}); err != nil {
			t.Fatal(err)
		}
	})
	dev := r.farm.Device("sim-1")
	const foreignFile = "studio.perfetto-trace"
	foreign, err := dev.StartForeignSession(foreignFile, 4096, r.vm(t, "sim-1", "com.example.held").PID())
	if err != nil {
		t.Fatal(err)
	}
	held, idleApp := r.app("sim-1", "com.example.held"), r.app("sim-1", "com.example.idle")
	var busy app
	for _, vm := range dev.VMs() {
		if n := vm.ProcessName(); n != held.pkg && n != idleApp.pkg {
			busy = r.app("sim-1", n)
		}
	}

	r.d = startDaemon(t, r.adb.Addr(), "--heapprofd.silence", "5s")
	idleHeld := 0 // scrapes that showed the idle app held
	waitFor(t, time.Minute, "the app another tool profiles shown held", func() (bool, string) {
		sc := r.d.metrics(t)
		if sc.value("alloctrack_app_state", idleApp.labels("state", "held")...) == 1 {
			idleHeld++
		}
		st := sc.value("alloctrack_app_state", held.labels("state", "held")...)
		n := sc.value("alloctrack_app_errors_total", held.labels("stage", "rejected-concurrent")...)
		return st == 1 && n >= 1, fmt.Sprintf("held %v, rejections %v", st, n)
	})
	early, _ := dev.TraceFile(foreignFile)
	// One more check of the idle app: the session running when the held
	// app showed, or the next, ends for it, and the one after starts.
	sessions := func() float64 {
		sc := r.d.metrics(t)
		if sc.value("alloctrack_app_state", idleApp.labels("state", "held")...) == 1 {
			idleHeld++
		}
		return sc.value("alloctrack_heapprofd_sessions_total", idleApp.labels()...)
	}
	n := sessions()
	waitFor(t, time.Minute, "one more check of the idle app", func() (bool, string) {
		m := sessions()
		return m >= n+2, fmt.Sprintf("%v sessions, from %v", m, n)
	})
	if idleHeld > 0 {
		t.Errorf("%d scrapes showed the idle app held", idleHeld)
	}
	sc := r.d.metrics(t)
	if v := sc.value("alloctrack_app_state", idleApp.labels("state", "tracking")...); v != 1 {
		t.Errorf("the idle app is not tracking")
	}
	if v := sc.value("alloctrack_app_errors_total", idleApp.labels("stage", "rejected-concurrent")...); v != 0 {
		t.Errorf("the idle app has %v rejections", v)
	}
	if v := sc.value("alloctrack_app_state", held.labels("state", "held")...); v != 1 {
		t.Errorf("the held app is no longer shown held")
	}
	if v := sc.value("alloctrack_app_sampled_allocations_total", busy.labels()...); v == 0 {
		t.Errorf("the busy app %v counted no samples", busy)
	}

	live := false
	for _, s := range dev.PerfettoSessions() {
		live = live || s.PID == foreign
	}
	now, ok := dev.TraceFile(foreignFile)
	if !live || !ok || !bytes.HasPrefix(now, early) {
		t.Errorf("the other tool's session (running %v) or its file (there %v, %d bytes, %d before) was touched", live, ok, len(now), len(early))
	}
	for _, argv := range dev.ShellLog() {
		if slices.Contains(argv, strconv.Itoa(foreign)) || slices.Contains(argv, "/data/misc/perfetto-traces/"+foreignFile) {
			t.Errorf("the shell was asked to %q", argv)
		}
	}
}
