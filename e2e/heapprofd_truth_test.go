package e2e

import (
	"bytes"
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/sim"
)

// heapprofdWorkload allocates steadily, as an app under test does.
func heapprofdWorkload() sim.Workload {
	w := sim.DefaultWorkload()
	w.Rate, w.Sites = 4000, 60
	return w
}

// heapprofdApps lists the live apps of the farm's Android 12+ devices.
func (r *rig) heapprofdApps() []tracked {
	var out []tracked
	for _, d := range r.farm.Devices() {
		if d.Config().API < sim.APIHeapprofdJava {
			continue
		}
		for _, vm := range d.VMs() {
			if vm.Alive() {
				out = append(out, tracked{r.app(d.Serial(), vm.ProcessName()), d.Serial()})
			}
		}
	}
	return out
}

// settleHeapprofd pauses every app's workload and waits until the
// daemon's sampled counters equal what each VM's dumps held, which stop
// changing once the paused apps' next dumps are written and read. What an
// app sampled before its pause reaches the truth only with its next dump,
// so equality counts only once no VM holds samples not yet dumped.
func settleHeapprofd(t *testing.T, r *rig, apps []tracked) {
	t.Helper()
	for _, a := range apps {
		r.vm(t, a.farmSerial, a.pkg).Pause(true)
	}
	waitFor(t, 30*time.Second, "the daemon's samples equal the simulator's", func() (bool, string) {
		sc := r.d.metrics(t)
		for _, a := range apps {
			vm := r.vm(t, a.farmSerial, a.pkg)
			if vm.HeapprofdPending() {
				return false, fmt.Sprintf("%v: samples not yet dumped", a.app)
			}
			tr := vm.HeapprofdTruth()
			n := sc.value("alloctrack_app_sampled_allocations_total", a.labels()...)
			b := sc.value("alloctrack_app_sampled_bytes_total", a.labels()...)
			if n != float64(tr.Sampled.Total.Allocations) || b != float64(tr.Sampled.Total.Bytes) {
				return false, fmt.Sprintf("%v: daemon %v samples %v bytes, simulator %+v", a.app, n, b, tr.Sampled.Total)
			}
		}
		return true, ""
	})
}

// TestHeapprofdGroundTruthThroughADB runs Android 12 and 13 devices →
// the real adb server → alloctrack serve (--backend auto, its default) →
// a real Prometheus. Per app, the samples and sampled bytes the daemon
// took in equal the simulator's sampled ground truth exactly, in
// /metrics and in Prometheus; per site too, read from the daemon's
// /debug/pprof/allocs; the estimates of the sites whose objects have one
// size land within four standard deviations of the true allocations
// (arithmetic below); and after SIGTERM no perfetto session or trace file
// of ours is left on any device.
func TestHeapprofdGroundTruthThroughADB(t *testing.T) {
	cfg := sim.FarmConfig{Devices: 2, AppsPerDevice: 2, APIs: []int{31, 33}, Workload: heapprofdWorkload()}
	r := newRig(t, cfg, nil, "--top.sites", "1000")
	p := startPrometheus(t, r.d.addr)
	apps := r.heapprofdApps()
	if len(apps) != 4 {
		t.Fatalf("%d Android 12+ apps, want 4", len(apps))
	}
	r.d.waitState(t, appsOf(apps), "tracking", 30*time.Second)
	waitFor(t, 30*time.Second, "three dumps of every app counted", func() (bool, string) {
		sc := r.d.metrics(t)
		for _, a := range apps {
			if n := sc.value("alloctrack_heapprofd_dumps_total", a.labels()...); n < 3 {
				return false, fmt.Sprintf("%v: %v dumps", a.app, n)
			}
		}
		return true, ""
	})
	settleHeapprofd(t, r, apps)
	sc := r.d.metrics(t)

	// Through Prometheus: the same exact values, once a scrape has them.
	waitFor(t, 20*time.Second, "Prometheus has the exact sample counts", func() (bool, string) {
		v := p.query(t, `alloctrack_app_sampled_allocations_total`)
		got := map[app]float64{}
		for _, s := range v {
			got[app{s.Metric["serial"], s.Metric["package"]}] = s.Value
		}
		for _, a := range apps {
			want := float64(r.vm(t, a.farmSerial, a.pkg).HeapprofdTruth().Sampled.Total.Allocations)
			if got[a.app] != want {
				return false, fmt.Sprintf("%v: Prometheus %v, simulator %v", a.app, got[a.app], want)
			}
		}
		return true, ""
	})

	var fixedEst, fixedTrue, fixedVar float64
	for _, a := range apps {
		tr := r.vm(t, a.farmSerial, a.pkg).HeapprofdTruth()
		if tr.Interval != 4096 || sc.value("alloctrack_heapprofd_sampling_interval_bytes", a.labels()...) != 4096 {
			t.Errorf("%v: sampling interval %d, want the default 4096", a.app, tr.Interval)
		}
		// Per site, exact: /debug/pprof/allocs's samples per stack.
		prof := fetchProfile(t, r.d.addr, a)
		got := prof.sampledBySite(t)
		for id, want := range tr.Sampled.BySiteID {
			if got[id] != [2]int64{int64(want.Allocations), int64(want.Bytes)} {
				t.Errorf("%v site %s: pprof samples %v, simulator sampled %+v", a.app, id, got[id], want)
			}
		}
		if len(got) != len(tr.Sampled.BySiteID) {
			t.Errorf("%v: %d sites in the profile, %d sampled", a.app, len(got), len(tr.Sampled.BySiteID))
		}
		// Estimates. For a site whose objects all have size s, each
		// allocation is sampled with p = 1 − e^(−s/I), independently, so
		// the estimate K/p of n allocations (K ~ Binomial(n, p)) is
		// unbiased with variance n(1 − p)/p. Sites are independent: the
		// variances add. Sites of arrays (sizes vary) use the stack's
		// average sampled size for s, which is not unbiased; they are
		// measured, not held to this bound.
		for id, n := range tr.Allocated.BySiteID {
			size := tr.SiteSize[id]
			if size == 0 {
				continue
			}
			p := -math.Expm1(-float64(size) / 4096)
			fixedTrue += float64(n.Allocations)
			fixedVar += float64(n.Allocations) * (1 - p) / p
			fixedEst += sc.value("alloctrack_site_estimated_allocations_total", a.labels("site", id)...)
		}
		est := sc.value("alloctrack_app_estimated_allocations_total", a.labels()...)
		estB := sc.value("alloctrack_app_estimated_allocated_bytes_total", a.labels()...)
		t.Logf("%v: allocated %d (%d B), sampled %d (%d B), estimated %.0f (%.0f B): error %+.1f%% (%+.1f%% bytes)",
			a.app, tr.Allocated.Total.Allocations, tr.Allocated.Total.Bytes, tr.Sampled.Total.Allocations, tr.Sampled.Total.Bytes,
			est, estB, 100*(est/float64(tr.Allocated.Total.Allocations)-1), 100*(estB/float64(tr.Allocated.Total.Bytes)-1))
	}
	sd := math.Sqrt(fixedVar)
	t.Logf("sites of one object size, 4 apps: true %.0f, estimated %.0f, difference %.0f = %.2f standard deviations (sd %.0f, %.1f%%)",
		fixedTrue, fixedEst, fixedEst-fixedTrue, (fixedEst-fixedTrue)/sd, sd, 100*sd/fixedTrue)
	if fixedTrue < 1000 || math.Abs(fixedEst-fixedTrue) > 4*sd {
		t.Errorf("estimated allocations of fixed-size sites %.0f, true %.0f: off by more than 4 sd (%.0f)", fixedEst, fixedTrue, 4*sd)
	}
	if v := sc.sum("alloctrack_app_allocations_total"); v != 0 {
		t.Errorf("exact DDM totals have %v for heapprofd apps", v)
	}

	if code := r.d.shutdown(t); code != 0 {
		t.Errorf("daemon exit status %d", code)
	}
	for _, d := range r.farm.Devices() {
		if s := d.PerfettoSessions(); len(s) != 0 {
			t.Errorf("%s: perfetto sessions left after SIGTERM: %+v", d.Serial(), s)
		}
		if f := d.TraceFiles(); len(f) != 0 {
			t.Errorf("%s: trace files left after SIGTERM: %v", d.Serial(), f)
		}
	}
	// The last dump each session wrote on its way out was read too.
	for _, a := range apps {
		tr := r.vm(t, a.farmSerial, a.pkg).HeapprofdTruth()
		if tr.Sampled.Total.Allocations != uint64(sc.value("alloctrack_app_sampled_allocations_total", a.labels()...)) {
			t.Errorf("%v: the final dumps held samples the paused app did not make", a.app)
		}
	}
}

// TestHeapprofdRestartCleansUp: a daemon killed with SIGKILL leaves its
// perfetto session and trace file on the device; the next daemon stops
// and removes them before it starts its own (waiting on /proc, as the
// shell may not send perfetto signal 0), leaves another tool's session
// and file alone, shows the app that tool profiles as held once a
// session stops (heapprofd tells it only then), and after SIGTERM leaves
// nothing of its own behind.
func TestHeapprofdRestartCleansUp(t *testing.T) {
	cfg := sim.FarmConfig{Devices: 1, AppsPerDevice: 3, APIs: []int{32}, Workload: heapprofdWorkload()}
	r := attachFarm(t, cfg, nil)
	dev := r.farm.Device("sim-1")
	vms := dev.VMs()
	foreign, err := dev.StartForeignSession("studio-trace.perfetto-trace", 4096, vms[2].PID())
	if err != nil {
		t.Fatal(err)
	}
	held := r.app("sim-1", vms[2].ProcessName())
	ours := func() (sessions []sim.PerfettoSession, files []string) {
		for _, s := range dev.PerfettoSessions() {
			if s.PID != foreign {
				sessions = append(sessions, s)
			}
		}
		for name := range dev.TraceFiles() {
			if strings.HasPrefix(name, "alloctrack-") {
				files = append(files, name)
			}
		}
		return sessions, files
	}

	first := startDaemon(t, r.adb.Addr(), "--heapprofd.rotate", "3s")
	waitFor(t, 30*time.Second, "the first daemon's session running", func() (bool, string) {
		s, f := ours()
		return len(s) == 1 && len(f) == 1, fmt.Sprintf("sessions %v files %v", s, f)
	})
	r.d = first
	r.d.waitState(t, []app{r.app("sim-1", vms[0].ProcessName()), r.app("sim-1", vms[1].ProcessName())}, "tracking", 30*time.Second)
	waitFor(t, 30*time.Second, "the app another tool profiles shown held", func() (bool, string) {
		sc := first.metrics(t)
		st := sc.value("alloctrack_app_state", held.labels("state", "held")...)
		n := sc.value("alloctrack_app_errors_total", held.labels("stage", "rejected-concurrent")...)
		return st == 1 && n >= 1, fmt.Sprintf("held %v, errors %v", st, n)
	})
	if v := first.metrics(t).value("alloctrack_app_tracking", held.labels()...); v != 0 {
		t.Errorf("the held app is shown tracking")
	}
	waitFor(t, 30*time.Second, "a session of the first daemon running", func() (bool, string) {
		s, f := ours()
		return len(s) == 1 && len(f) == 1, fmt.Sprintf("sessions %v files %v", s, f)
	})
	before, beforeFiles := ours()
	// The apps pause across the kill and the clean-up, so that what the
	// simulator sampled before the next daemon's session is fixed: the
	// next daemon must count exactly what comes after.
	for _, vm := range vms {
		vm.Pause(true)
	}
	first.stopping = true // killed on purpose: its cleanup need not stop it
	first.proc.kill()

	// SIGKILL: nothing was stopped.
	if s, f := ours(); len(s) != 1 || len(f) != 1 {
		t.Fatalf("after SIGKILL: sessions %v files %v, want the one left running", s, f)
	}
	second := startDaemon(t, r.adb.Addr())
	r.d = second
	waitFor(t, 30*time.Second, "the earlier run's session and file gone, a new one running", func() (bool, string) {
		s, f := ours()
		for _, o := range before {
			for _, n := range s {
				if n.PID == o.PID {
					return false, fmt.Sprintf("old session %d still runs", o.PID)
				}
			}
		}
		for _, o := range beforeFiles {
			for _, n := range f {
				if n == o {
					return false, fmt.Sprintf("old file %s still there", o)
				}
			}
		}
		return len(s) == 1, fmt.Sprintf("sessions %v files %v", s, f)
	})
	if !strings.Contains(second.out.String(), "stopped perfetto sessions and removed trace files an earlier run left") {
		t.Errorf("the clean-up was not logged")
	}
	// The earlier session is gone, with its last dump: what the simulator
	// sampled up to here is the first daemon's. Then the apps allocate
	// again, and the second daemon counts exactly the rest.
	mine := []tracked{{r.app("sim-1", vms[0].ProcessName()), "sim-1"}, {r.app("sim-1", vms[1].ProcessName()), "sim-1"}}
	base := map[app]uint64{}
	for _, a := range mine {
		base[a.app] = r.vm(t, a.farmSerial, a.pkg).HeapprofdTruth().Sampled.Total.Allocations
	}
	for _, vm := range vms {
		vm.Pause(false)
	}
	waitFor(t, 0, "the apps sampled again since the clean-up", func() (bool, string) {
		for _, a := range mine {
			if n := r.vm(t, a.farmSerial, a.pkg).HeapprofdTruth().Sampled.Total.Allocations; n <= base[a.app] {
				return false, fmt.Sprintf("%v: %d samples, %d at the clean-up", a.app, n, base[a.app])
			}
		}
		return true, ""
	})
	for _, a := range mine {
		r.vm(t, a.farmSerial, a.pkg).Pause(true)
	}
	waitFor(t, 30*time.Second, "the second daemon's samples equal the simulator's since the clean-up", func() (bool, string) {
		sc := second.metrics(t)
		for _, a := range mine {
			want := r.vm(t, a.farmSerial, a.pkg).HeapprofdTruth().Sampled.Total.Allocations - base[a.app]
			if n := sc.value("alloctrack_app_sampled_allocations_total", a.labels()...); n != float64(want) || want == 0 {
				return false, fmt.Sprintf("%v: daemon %v, simulator %v since the clean-up", a.app, n, want)
			}
		}
		return true, ""
	})
	if code := second.shutdown(t); code != 0 {
		t.Errorf("daemon exit status %d", code)
	}
	if s, f := ours(); len(s) != 0 || len(f) != 0 {
		t.Errorf("after SIGTERM: sessions %v files %v of ours left", s, f)
	}
	if _, ok := dev.TraceFiles()["studio-trace.perfetto-trace"]; !ok {
		t.Error("the other tool's trace file was removed")
	}
	alive := false
	for _, s := range dev.PerfettoSessions() {
		alive = alive || s.PID == foreign
	}
	if !alive {
		t.Error("the other tool's perfetto session was stopped")
	}
	for _, argv := range dev.ShellLog() {
		if argv[0] == "kill" && len(argv) > 1 && (argv[1] == "-0" || argv[1] == "-9" || argv[1] == "-KILL") {
			t.Errorf("the shell was asked to %q, which SELinux denies on perfetto", argv)
		}
	}
}

// appProfile is an app's /debug/pprof/allocs.
type appProfile struct{ p *profile.Profile }

func fetchProfile(t *testing.T, addr string, a tracked) appProfile {
	t.Helper()
	u := "http://" + addr + "/debug/pprof/allocs?" + url.Values{"serial": {a.serial}, "package": {a.pkg}}.Encode()
	code, body, err := httpGet(u)
	if err != nil || code != 200 {
		t.Fatalf("%s: %d %v %.200s", u, code, err, body)
	}
	p, err := profile.Parse(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	return appProfile{p}
}

// sampledBySite sums the exact sample types of a heapprofd app's profile
// by site id, computed from each sample's frames as the daemon keys
// heapprofd sites.
func (ap appProfile) sampledBySite(t *testing.T) map[string][2]int64 {
	t.Helper()
	idx := map[string]int{}
	for i, st := range ap.p.SampleType {
		idx[st.Type] = i
	}
	ns, okN := idx[alloctrack.SampleTypeSamples]
	nb, okB := idx[alloctrack.SampleTypeSampledSpace]
	if !okN || !okB {
		t.Fatalf("the profile's sample types %v lack the exact ones", ap.p.SampleType)
	}
	out := map[string][2]int64{}
	for _, s := range ap.p.Sample {
		if s.Value[ns] == 0 && s.Value[nb] == 0 {
			continue
		}
		var frames []alloctrack.Frame
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				name := l.Function.Name
				i := strings.LastIndexByte(name, '.')
				if i < 0 {
					t.Fatalf("profile frame %q is not Class.method", name)
				}
				frames = append(frames, alloctrack.Frame{Class: name[:i], Method: name[i+1:], Line: -1})
			}
		}
		id := alloctrack.SiteID(heapprofd.SiteHash(frames))
		v := out[id]
		out[id] = [2]int64{v[0] + s.Value[ns], v[1] + s.Value[nb]}
	}
	return out
}
