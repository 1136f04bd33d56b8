package exporter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/exporter"
	"github.com/alloctrack/alloctrack/perfetto"
)

// hpStack is a heapprofd stack: ART's allocation entry point, then the
// Java frames given (innermost first).
func hpStack(unwind perfetto.Unwind, java ...string) *perfetto.Stack {
	st := &perfetto.Stack{Unwind: unwind, Key: strings.Join(java, ";")}
	st.Frames = append(st.Frames, &perfetto.Frame{Function: "art_quick_alloc_object_resolved_tlab", Mapping: "/apex/com.android.art/lib64/libart.so"})
	for _, f := range java {
		st.Frames = append(st.Frames, &perfetto.Frame{Function: f, Mapping: "/data/app/com.example/oat/arm64/base.odex"})
	}
	return st
}

// heapprofdApp is a heapprofd app whose counters (3 site series) counted
// one dump of n sites, each a different weight.
func heapprofdApp(serial, pkg string, n int) alloctrack.AppSnapshot {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopSites: 3})
	d := &perfetto.Dump{SamplingInterval: 4096, Heap: perfetto.ArtHeap}
	for i := range n {
		v := perfetto.Values{Count: uint64(10 + 7*i), Allocated: uint64((10 + 7*i) * (24 + 1000*i))}
		st := hpStack(perfetto.UnwindOK, fmt.Sprintf("%s.Site%d.alloc", pkg, i), "android.os.Looper.loop")
		d.Stacks = append(d.Stacks, perfetto.StackDelta{Stack: st, Delta: v, Total: v})
		d.Delta.Count += v.Count
		d.Delta.Allocated += v.Allocated
	}
	now := time.Unix(1000, 0)
	c.Add(heapprofd.WindowOfDump(d, now.Add(-10*time.Second), now))
	a := alloctrack.AppSnapshot{AppStatus: alloctrack.AppStatus{
		Serial: serial, Package: pkg, PID: 4242, State: alloctrack.StateTracking, Tracking: true,
		Errors: map[string]uint64{"perfetto-read": 1}, RTT: alloctrack.NewHistogram(alloctrack.RTTBuckets),
		Backend: alloctrack.BackendHeapprofd,
	}, Counts: c.Snapshot()}
	st := alloctrack.NewAppStats(serial, 4242)
	heapprofd.CountDump(st, d, 12345)
	a.Heapprofd = st.Snapshot().Heapprofd
	a.Heapprofd.Sessions = 1
	return a
}

// heapprofdSnapshot is a farm with DDM apps and heapprofd apps side by
// side (mixed), or heapprofd apps alone.
func heapprofdSnapshot(mixed bool) alloctrack.Snapshot {
	var s alloctrack.Snapshot
	if mixed {
		s = farmSnapshot(1, 2, 3, 4)
	}
	s.Devices = append(s.Devices, alloctrack.DeviceStatus{Server: "127.0.0.1:5037", Serial: "sim-31", State: "device", API: 31, Errors: map[string]uint64{}})
	s.Apps = append(s.Apps, heapprofdApp("sim-31", "com.example.hp1", 5), heapprofdApp("sim-31", "com.example.hp\"2", 2))
	// Not dumped yet: the families are there, at zero.
	s.Apps = append(s.Apps, alloctrack.AppSnapshot{AppStatus: alloctrack.AppStatus{Serial: "sim-31", Package: "com.example.starting",
		State: alloctrack.StateConnecting, Errors: map[string]uint64{}, RTT: alloctrack.NewHistogram(alloctrack.RTTBuckets), Backend: alloctrack.BackendHeapprofd}})
	return s
}

// A heapprofd app has the sampled and estimated families and none of the
// exact ones: no app totals, no class series, no DDM site series.
func TestHeapprofdFamilies(t *testing.T) {
	c := exporter.NewCollector(fixedSource{heapprofdSnapshot(false)})
	for name, want := range map[string]int{
		"alloctrack_app_allocations_total":                0,
		"alloctrack_allocations_total":                    0,
		"alloctrack_site_allocations_total":               0,
		"alloctrack_app_sampled_allocations_total":        3,
		"alloctrack_app_sampled_bytes_total":              3,
		"alloctrack_app_estimated_allocations_total":      3,
		"alloctrack_app_estimated_allocated_bytes_total":  3,
		"alloctrack_site_estimated_allocations_total":     4 + 3 + 1, // top 3 and other, 2 and other, other
		"alloctrack_site_estimated_allocated_bytes_total": 8,
		"alloctrack_site_info":                            3 + 2 + 1, // other too
		"alloctrack_heapprofd_sampling_interval_bytes":    3,
		"alloctrack_heapprofd_broken_stack_samples_total": 6,
		"alloctrack_heapprofd_dumps_total":                3,
		"alloctrack_heapprofd_trace_bytes_total":          3,
		// The DDM states and heapprofd's own, for heapprofd apps only.
		"alloctrack_app_state": 3 * (len(exporter.AppStates) + len(exporter.HeapprofdStates)),
	} {
		if n := testutil.CollectAndCount(c, name); n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
	// Every estimate says so first in its help.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.Contains(mf.GetName(), "estimated") != strings.HasPrefix(mf.GetHelp(), "Estimate:") {
			t.Errorf("%s: help %q: estimates, and only they, start with \"Estimate:\"", mf.GetName(), mf.GetHelp())
		}
	}
	// The values: one dump, 5 sites at interval 4096.
	a := heapprofdApp("s", "p", 5)
	var est alloctrack.Estimate
	for _, sc := range a.Counts.Sites {
		if sc.Class != "" || !sc.Heapprofd {
			t.Errorf("site %s: class %q, heapprofd %v; want class \"\" and a heapprofd site", sc.ID, sc.Class, sc.Heapprofd)
		}
		est.Allocations += sc.Estimated.Allocations
		est.Bytes += sc.Estimated.Bytes
	}
	est.Allocations += a.Counts.SiteOtherEstimated.Allocations
	est.Bytes += a.Counts.SiteOtherEstimated.Bytes
	if d := est.Allocations - a.Counts.Estimated.Allocations; d > 1e-6 || d < -1e-6 {
		t.Errorf("sites and other hold %v estimated allocations, the app %v", est.Allocations, a.Counts.Estimated.Allocations)
	}
	want := fmt.Sprintf(`
# HELP alloctrack_app_sampled_allocations_total Allocations heapprofd sampled in the app (Android 12+): the exact number of samples its traces held, not of allocations.
# TYPE alloctrack_app_sampled_allocations_total counter
alloctrack_app_sampled_allocations_total{package="p",serial="s"} %d
`, 10+17+24+31+38)
	if err := testutil.CollectAndCompare(exporter.NewCollector(fixedSource{alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{a}}}), strings.NewReader(want), "alloctrack_app_sampled_allocations_total"); err != nil {
		t.Error(err)
	}
}

func TestHeapprofdCollectorLint(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		if problems, err := testutil.CollectAndLint(exporter.NewCollector(fixedSource{heapprofdSnapshot(mixed)})); err != nil || len(problems) > 0 {
			t.Errorf("mixed %v: %v %v", mixed, err, problems)
		}
	}
}

// /debug/pprof/allocs serves heapprofd apps: samples exact (equal to the
// app's sampled counters), estimates rounded, other included, no class.
func TestHeapprofdProfile(t *testing.T) {
	a := heapprofdApp("sim-31", "com.example.hp", 5)
	h := exporter.ProfileHandler(fixedSource{alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{a}}}, time.Unix(1000, 0))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/allocs?serial=sim-31&package=com.example.hp", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	p, err := profile.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if got, want := strings.Join(types, " "), "samples/count sampled_space/bytes estimated_alloc_objects/count estimated_alloc_space/bytes"; got != want {
		t.Fatalf("sample types %s, want %s", got, want)
	}
	if p.DefaultSampleType != "estimated_alloc_space" {
		t.Errorf("default sample type %q", p.DefaultSampleType)
	}
	var sum [4]int64
	for _, s := range p.Sample {
		for i, v := range s.Value {
			sum[i] += v
		}
		if len(s.Label["class"]) > 0 {
			t.Errorf("a heapprofd sample has class label %v", s.Label["class"])
		}
	}
	ct := a.Counts
	if sum[0] != int64(ct.Sampled.Allocations) || sum[1] != int64(ct.Sampled.Bytes) {
		t.Errorf("profile holds %d samples of %d bytes, the app %v", sum[0], sum[1], ct.Sampled)
	}
	// Each of the 4 samples (3 sites and other) is rounded on its own.
	if d := float64(sum[2]) - ct.Estimated.Allocations; d > 2 || d < -2 {
		t.Errorf("profile holds %d estimated allocations, the app %.1f", sum[2], ct.Estimated.Allocations)
	}
	if d := float64(sum[3]) - ct.Estimated.Bytes; d > 2 || d < -2 {
		t.Errorf("profile holds %d estimated bytes, the app %.1f", sum[3], ct.Estimated.Bytes)
	}
	if len(p.Sample) != 4 {
		t.Errorf("%d samples, want 4 (3 sites and other)", len(p.Sample))
	}
}
