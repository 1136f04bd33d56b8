package heapprofd_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/internal/tracetest"
	"github.com/alloctrack/alloctrack/perfetto"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestEstimateValues(t *testing.T) {
	scaled := func(count, bytes uint64, interval float64) alloctrack.Estimate {
		// The estimator written out once more, the plain way.
		avg := float64(bytes) / float64(count)
		scale := 1 / (1 - math.Exp(-avg/interval))
		return alloctrack.Estimate{Allocations: float64(count) * scale, Bytes: float64(bytes) * scale}
	}
	for _, c := range []struct {
		name     string
		v        perfetto.Values
		interval uint64
		want     alloctrack.Estimate
	}{
		{"interval 1 samples every allocation: exact", perfetto.Values{Count: 5, Allocated: 120}, 1, alloctrack.Estimate{Allocations: 5, Bytes: 120}},
		{"interval 1, one-byte objects: still exact", perfetto.Values{Count: 7, Allocated: 7}, 1, alloctrack.Estimate{Allocations: 7, Bytes: 7}},
		{"interval unknown: taken as 1", perfetto.Values{Count: 5, Allocated: 120}, 0, alloctrack.Estimate{Allocations: 5, Bytes: 120}},
		{"small objects", perfetto.Values{Count: 10, Allocated: 240}, 4096, scaled(10, 240, 4096)},
		{"objects near the interval", perfetto.Values{Count: 4, Allocated: 4 * 4096}, 4096, alloctrack.Estimate{Allocations: 4 / (1 - 1/math.E), Bytes: 4 * 4096 / (1 - 1/math.E)}},
		{"objects far above the interval: always sampled", perfetto.Values{Count: 3, Allocated: 3 << 20}, 4096, alloctrack.Estimate{Allocations: 3, Bytes: 3 << 20}},
		{"nothing", perfetto.Values{}, 4096, alloctrack.Estimate{}},
	} {
		got := heapprofd.EstimateValues(c.v, c.interval)
		if !near(got.Allocations, c.want.Allocations) || !near(got.Bytes, c.want.Bytes) {
			t.Errorf("%s: %+v at %d: got %+v, want %+v", c.name, c.v, c.interval, got, c.want)
		}
	}
	// Small objects: each sample stands for about interval bytes.
	e := heapprofd.EstimateValues(perfetto.Values{Count: 1000, Allocated: 16000}, 4096)
	if r := e.Bytes / (1000 * 4096); r < 1 || r > 1.003 {
		t.Errorf("1000 samples of 16-byte objects at 4096: %.0f bytes estimated, %.4f × 1000 × 4096", e.Bytes, r)
	}
}

// The sites of hpTrace by their Java frames.
var (
	siteBar  = alloctrack.SiteID(alloctrack.SiteHashNames("", []alloctrack.Frame{{Class: "com.example.Foo", Method: "bar", Line: -1}, {Class: "com.example.Main", Method: "run", Line: -1}}))
	siteList = alloctrack.SiteID(alloctrack.SiteHashNames("", []alloctrack.Frame{{Class: "java.util.ArrayList", Method: "add", Line: -1}, {Class: "com.example.Main", Method: "run", Line: -1}}))
	siteNone = alloctrack.SiteID(alloctrack.SiteHashNames("", nil))
)

// From a Writer's trace through the Decoder into Counters: a stack that
// vanishes gains nothing, one back under a new id continues, native
// frames and signatures do not split a site; samples are exact.
func TestAddDumpFromTrace(t *testing.T) {
	for _, interval := range []uint64{1, 4096} {
		t.Run(fmt.Sprint(interval), func(t *testing.T) {
			dumps := tracetest.Dumps(t, tracetest.Heapprofd(t, interval))
			if len(dumps) != 3 {
				t.Fatalf("%d dumps, want 3", len(dumps))
			}
			c := alloctrack.NewCounters(alloctrack.AggregateConfig{})
			st := alloctrack.NewAppStats("s", 42)
			t0 := time.Unix(1000, 0)
			for i, d := range dumps {
				c.Add(heapprofd.WindowOfDump(d, t0.Add(time.Duration(i)*10*time.Second), t0.Add(time.Duration(i+1)*10*time.Second)))
				heapprofd.CountDump(st, d, 100)
			}
			ct := c.Snapshot()
			if !ct.Heapprofd || ct.Total != (alloctrack.Count{}) || len(ct.Classes) != 0 || ct.ClassOther != (alloctrack.Count{}) {
				t.Errorf("exact counts touched: heapprofd %v, total %v, classes %v, class other %v", ct.Heapprofd, ct.Total, ct.Classes, ct.ClassOther)
			}
			if want := (alloctrack.Count{Allocations: 17, Bytes: 664}); ct.Sampled != want {
				t.Errorf("sampled %v, want %v", ct.Sampled, want)
			}
			// The estimate, per stack per dump, written out.
			est := func(n, b float64) alloctrack.Estimate {
				if interval == 1 {
					return alloctrack.Estimate{Allocations: n, Bytes: b}
				}
				s := 1 / (1 - math.Exp(-b/n/float64(interval)))
				return alloctrack.Estimate{Allocations: n * s, Bytes: b * s}
			}
			sum := func(es ...alloctrack.Estimate) alloctrack.Estimate {
				var o alloctrack.Estimate
				for _, e := range es {
					o.Allocations += e.Allocations
					o.Bytes += e.Bytes
				}
				return o
			}
			want := map[string]struct {
				smp   alloctrack.Count
				est   alloctrack.Estimate
				frame string
			}{
				siteBar:  {alloctrack.Count{Allocations: 8, Bytes: 496}, sum(est(3, 72), est(3, 300), est(1, 100), est(1, 24)), "com.example.Foo.bar"},
				siteList: {alloctrack.Count{Allocations: 6, Bytes: 96}, sum(est(5, 80), est(1, 16)), "com.example.Main.run"},
				siteNone: {alloctrack.Count{Allocations: 3, Bytes: 72}, sum(est(1, 8), est(2, 64)), ""},
			}
			if len(ct.Sites) != len(want) {
				t.Fatalf("%d sites, want %d: %+v", len(ct.Sites), len(want), ct.Sites)
			}
			var all alloctrack.Estimate
			for _, s := range ct.Sites {
				w, ok := want[s.ID]
				if !ok {
					t.Errorf("unexpected site %+v", s)
					continue
				}
				all = sum(all, w.est)
				if s.Sampled != w.smp || !near(s.Estimated.Allocations, w.est.Allocations) || !near(s.Estimated.Bytes, w.est.Bytes) {
					t.Errorf("site %s (%s): sampled %v, estimated %+v; want %v, %+v", s.ID, s.Stack, s.Sampled, s.Estimated, w.smp, w.est)
				}
				if s.Class != "" || !s.Heapprofd || s.Frame != w.frame || s.Count != (alloctrack.Count{}) {
					t.Errorf("site %s: class %q, heapprofd %v, frame %q, count %v; want class \"\", a heapprofd site, frame %q, no exact count", s.ID, s.Class, s.Heapprofd, s.Frame, s.Count, w.frame)
				}
			}
			if !near(ct.Estimated.Allocations, all.Allocations) || !near(ct.Estimated.Bytes, all.Bytes) {
				t.Errorf("estimated %+v, want %+v", ct.Estimated, all)
			}
			if interval == 1 && (ct.Estimated.Allocations != 17 || ct.Estimated.Bytes != 664) {
				t.Errorf("interval 1: estimated %+v, want the samples exactly", ct.Estimated)
			}
			if len(ct.Windows) != 3 || ct.Windows[0].Sampled != (alloctrack.Count{Allocations: 12, Bytes: 460}) {
				t.Errorf("windows %+v", ct.Windows)
			}
			// Recent over the last two windows: dumps 2 and 3.
			r := c.Recent(2)
			if r.Sampled != (alloctrack.Count{Allocations: 5, Bytes: 204}) || r.SiteOtherSampled != (alloctrack.Count{}) {
				t.Errorf("recent: sampled %v, other %v", r.Sampled, r.SiteOtherSampled)
			}
			for _, s := range r.Sites {
				if s.ID == siteBar && s.Sampled != (alloctrack.Count{Allocations: 2, Bytes: 124}) {
					t.Errorf("recent site %s: %v, want 2 samples of 124 bytes", s.ID, s.Sampled)
				}
			}
			hp := st.Snapshot().Heapprofd
			if hp.Dumps != 3 || hp.Samples != 17 || hp.SampledBytes != 664 || hp.ErrorStackSamples != 1 || hp.UnknownStackSamples != 2 ||
				hp.TraceBytes != 300 || hp.SamplingInterval != interval {
				t.Errorf("status %+v", hp)
			}
		})
	}
}

// Heapprofd sites get the same bounded series as DDM sites: the heaviest
// by estimated allocations take the free series, the rest count into
// other, and sites plus other always sum to the app's totals.
func TestAddDumpTopSites(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopSites: 2, Candidates: 2})
	mk := func(weights ...uint64) *perfetto.Dump {
		d := &perfetto.Dump{SamplingInterval: 4096, Heap: perfetto.ArtHeap}
		for i, n := range weights {
			st := &perfetto.Stack{Key: fmt.Sprint(i), Frames: []*perfetto.Frame{
				{Function: "art_quick_alloc_object_resolved_tlab", Mapping: "/apex/com.android.art/lib64/libart.so"},
				{Function: fmt.Sprintf("com.example.S%d.m", i), Mapping: "/data/app/base.odex"},
			}}
			v := perfetto.Values{Count: n, Allocated: n * 32}
			d.Stacks = append(d.Stacks, perfetto.StackDelta{Stack: st, Delta: v, Total: v})
		}
		return d
	}
	now := time.Unix(1000, 0)
	c.Add(heapprofd.WindowOfDump(mk(1, 50, 3, 40, 2), now, now.Add(time.Second)))
	ct := c.Snapshot()
	var frames []string
	for _, s := range ct.Sites {
		frames = append(frames, s.Frame)
	}
	if strings.Join(frames, ",") != "com.example.S1.m,com.example.S3.m" && strings.Join(frames, ",") != "com.example.S3.m,com.example.S1.m" {
		t.Errorf("admitted %v, want the two heaviest, S1 and S3", frames)
	}
	check := func() {
		t.Helper()
		ct := c.Snapshot()
		smp, est := ct.SiteOtherSampled, ct.SiteOtherEstimated
		for _, s := range ct.Sites {
			smp.Allocations += s.Sampled.Allocations
			smp.Bytes += s.Sampled.Bytes
			est.Allocations += s.Estimated.Allocations
			est.Bytes += s.Estimated.Bytes
		}
		if smp != ct.Sampled || !near(est.Allocations, ct.Estimated.Allocations) || !near(est.Bytes, ct.Estimated.Bytes) {
			t.Errorf("sites and other: %v %+v; app: %v %+v", smp, est, ct.Sampled, ct.Estimated)
		}
	}
	check()
	if ct.SiteOtherSampled.Allocations != 6 {
		t.Errorf("other holds %d samples, want 6", ct.SiteOtherSampled.Allocations)
	}
	// Later dumps: admitted sites keep counting, the rest go to other.
	for range 3 {
		now = now.Add(time.Second)
		c.Add(heapprofd.WindowOfDump(mk(100, 1, 100, 1, 100), now, now.Add(time.Second)))
		check()
	}
	if n := len(c.Snapshot().Sites); n != 2 {
		t.Errorf("%d site series, want 2", n)
	}
	// A dump of the native heap is not counted (its values are scaled
	// already): an empty window.
	native := mk(1000)
	native.Heap = "libc.malloc"
	before := c.Snapshot().Sampled
	c.Add(heapprofd.WindowOfDump(native, now, now.Add(time.Second)))
	if got := c.Snapshot().Sampled; got != before {
		t.Errorf("a native heap dump counted: sampled %v → %v", before, got)
	}
	// An empty dump still counts as a window, and changes Gen.
	g := c.Snapshot().Gen
	c.Add(heapprofd.WindowOfDump(&perfetto.Dump{}, now, now.Add(time.Second)))
	if ct := c.Snapshot(); ct.Gen == g || len(ct.Windows) != 6 {
		t.Errorf("empty dump: gen %d → %d, %d windows", g, ct.Gen, len(ct.Windows))
	}
}

func TestIsJavaFrame(t *testing.T) {
	for _, c := range []struct {
		f    perfetto.Frame
		java bool
	}{
		{perfetto.Frame{Function: "com.example.Foo.bar", Mapping: "/data/app/x/oat/arm64/base.odex"}, true},
		{perfetto.Frame{Function: "com.example.Foo.bar", Mapping: "/memfd:jit-cache (deleted)"}, true},
		{perfetto.Frame{Function: "com.example.managed.frame", Mapping: "example.vdex"}, true},
		{perfetto.Frame{Function: "art_quick_alloc_object_resolved_tlab", Mapping: "/apex/com.android.art/lib64/libart.so"}, false},
		{perfetto.Frame{Function: "art::gc::Heap::AllocObject", Mapping: "/apex/com.android.art/lib64/libart.so"}, false},
		{perfetto.Frame{Function: "ExecuteSwitchImplAsm", Mapping: "/apex/com.android.art/lib64/libart.so"}, false},
		{perfetto.Frame{Function: "__libc_malloc.part.1", Mapping: "/apex/com.android.runtime/lib64/bionic/libc.so"}, false},
		{perfetto.Frame{Mapping: "/data/app/x/base.odex", RelPC: 4}, false},
		{perfetto.Frame{Function: "ERROR 2", Mapping: "ERROR"}, false},
	} {
		if got := heapprofd.IsJavaFrame(&c.f); got != c.java {
			t.Errorf("%+v: java %v, want %v", c.f, got, c.java)
		}
	}
}
