package alloctrack_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/alloctrack/alloctrack/alloctrack"
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
		got := alloctrack.EstimateValues(c.v, c.interval)
		if !near(got.Allocations, c.want.Allocations) || !near(got.Bytes, c.want.Bytes) {
			t.Errorf("%s: %+v at %d: got %+v, want %+v", c.name, c.v, c.interval, got, c.want)
		}
	}
	// Small objects: each sample stands for about interval bytes.
	e := alloctrack.EstimateValues(perfetto.Values{Count: 1000, Allocated: 16000}, 4096)
	if r := e.Bytes / (1000 * 4096); r < 1 || r > 1.003 {
		t.Errorf("1000 samples of 16-byte objects at 4096: %.0f bytes estimated, %.4f × 1000 × 4096", e.Bytes, r)
	}
}

var (
	hpAlloc      = perfetto.Frame{RawFunction: "art_quick_alloc_object_resolved_region_tlab", Mapping: "/apex/com.android.art/lib64/libart.so", RelPC: 0x10}
	hpAllocArray = perfetto.Frame{RawFunction: "art_quick_alloc_array_resolved16_region_tlab", Mapping: "/apex/com.android.art/lib64/libart.so", RelPC: 0x30}
	hpHeap       = perfetto.Frame{RawFunction: "art::gc::Heap::AllocObjectWithAllocator", Mapping: "/apex/com.android.art/lib64/libart.so", RelPC: 0x40}
	hpBarSig     = perfetto.Frame{RawFunction: "void com.example.Foo.bar(int)", Mapping: "/data/app/com.example/oat/arm64/base.odex", RelPC: 0x100}
	hpBar        = perfetto.Frame{RawFunction: "com.example.Foo.bar", Mapping: "/data/app/com.example/oat/arm64/base.odex", RelPC: 0x104}
	hpRun        = perfetto.Frame{RawFunction: "com.example.Main.run", Mapping: "/data/app/com.example/base.apk", RelPC: 0x200}
	hpListAdd    = perfetto.Frame{RawFunction: "boolean java.util.ArrayList.add(java.lang.Object)", Mapping: "/system/framework/arm64/boot-framework.oat", RelPC: 0x300}
	hpUnnamed    = perfetto.Frame{Mapping: "/apex/com.android.art/lib64/libart.so", RelPC: 0x999}
	hpErr        = perfetto.Frame{Function: "ERROR 2", Mapping: "ERROR"}

	stackA1  = []perfetto.Frame{hpAlloc, hpHeap, hpBarSig, hpRun} // Foo.bar with a signature
	stackA2  = []perfetto.Frame{hpAlloc, hpBar, hpRun}            // the same method without
	stackC   = []perfetto.Frame{hpAllocArray, hpBar, hpRun}       // other native frames, same Java frames
	stackD   = []perfetto.Frame{hpAlloc, hpListAdd, hpRun}
	stackErr = []perfetto.Frame{hpErr}
	stackUnk = []perfetto.Frame{hpAlloc, hpUnnamed}
)

// hpTrace writes three rounds of dumps of pid 42 at interval, values
// cumulative per callstack id as heapprofd writes them: stack A vanishes
// from the second dump and comes back under a new id in the third.
// Per dump, the deltas are
//
//	dump 1: A {3, 72}  C {3, 300}  D {5, 80}  ERROR {1, 8}
//	dump 2:            C {1, 100}  D {0, 0}   unknown {2, 64}
//	dump 3: A {1, 24}  C {0, 0}    D {1, 16}
//
// so site Foo.bar←Main.run (A and C) has 8 samples of 496 bytes, site
// ArrayList.add←Main.run (D) 6 of 96, and the site without Java frames
// (ERROR, unknown) 3 of 72: 17 samples of 664 bytes.
func hpTrace(t testing.TB, interval uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, &perfetto.WriterOptions{DumpPacketBytes: 64}) // continued dumps
	v := func(n, b uint64) perfetto.Values { return perfetto.Values{Count: n, Allocated: b} }
	dump := func(ts uint64, s ...perfetto.SampleSpec) perfetto.DumpSpec {
		return perfetto.DumpSpec{PacketTimestamp: ts, PID: 42, Heap: perfetto.ArtHeap, Timestamp: ts, SamplingInterval: interval, Samples: s}
	}
	for _, d := range []perfetto.DumpSpec{
		dump(1e9, perfetto.SampleSpec{Frames: stackA1, Values: v(2, 48)}, perfetto.SampleSpec{Frames: stackA2, Values: v(1, 24)},
			perfetto.SampleSpec{Frames: stackC, Values: v(3, 300)}, perfetto.SampleSpec{Frames: stackD, Values: v(5, 80)},
			perfetto.SampleSpec{Frames: stackErr, Values: v(1, 8)}),
		dump(2e9, perfetto.SampleSpec{Frames: stackC, Values: v(4, 400)}, perfetto.SampleSpec{Frames: stackD, Values: v(5, 80)},
			perfetto.SampleSpec{Frames: stackUnk, Values: v(2, 64)}),
		dump(3e9, perfetto.SampleSpec{Frames: stackA1, Values: v(1, 24)}, perfetto.SampleSpec{Frames: stackC, Values: v(4, 400)},
			perfetto.SampleSpec{Frames: stackD, Values: v(6, 96)}),
	} {
		if err := w.WriteDumps(d); err != nil {
			t.Fatal(err)
		}
		if d.PacketTimestamp == 2e9 {
			w.Retire(stackA1)
			w.Retire(stackA2)
		}
	}
	return buf.Bytes()
}

func decodeDumps(t testing.TB, trace []byte) []*perfetto.Dump {
	t.Helper()
	dec := perfetto.NewDecoder(bytes.NewReader(trace), nil)
	var out []*perfetto.Dump
	for {
		d, err := dec.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
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
			dumps := decodeDumps(t, hpTrace(t, interval))
			if len(dumps) != 3 {
				t.Fatalf("%d dumps, want 3", len(dumps))
			}
			c := alloctrack.NewCounters(alloctrack.AggregateConfig{})
			st := alloctrack.NewAppStats("s", 42)
			t0 := time.Unix(1000, 0)
			for i, d := range dumps {
				c.Add(alloctrack.WindowOfDump(d, t0.Add(time.Duration(i)*10*time.Second), t0.Add(time.Duration(i+1)*10*time.Second)))
				st.AddDumpStats(d, 100)
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
	c.Add(alloctrack.WindowOfDump(mk(1, 50, 3, 40, 2), now, now.Add(time.Second)))
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
		c.Add(alloctrack.WindowOfDump(mk(100, 1, 100, 1, 100), now, now.Add(time.Second)))
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
	c.Add(alloctrack.WindowOfDump(native, now, now.Add(time.Second)))
	if got := c.Snapshot().Sampled; got != before {
		t.Errorf("a native heap dump counted: sampled %v → %v", before, got)
	}
	// An empty dump still counts as a window, and changes Gen.
	g := c.Snapshot().Gen
	c.Add(alloctrack.WindowOfDump(&perfetto.Dump{}, now, now.Add(time.Second)))
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
		if got := alloctrack.IsJavaFrame(&c.f); got != c.java {
			t.Errorf("%+v: java %v, want %v", c.f, got, c.java)
		}
	}
}

// A heapprofd capture: the raw trace as read, profile.pb.gz with samples
// and estimates, summary.json marked heapprofd and estimated; it reads
// back as input.
func TestCaptureHeapprofd(t *testing.T) {
	trace := hpTrace(t, 4096)
	dir := t.TempDir()
	start := time.Unix(1000, 0)
	w, err := alloctrack.NewCaptureWriter(dir, alloctrack.CaptureMeta{Serial: "s", Package: "com.example", PID: 42, API: 31}, start)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := w.Trace()
	if err != nil {
		t.Fatal(err)
	}
	// The daemon's way: copy what it reads, then decode it.
	if _, err := tw.Write(trace); err != nil {
		t.Fatal(err)
	}
	for _, d := range decodeDumps(t, trace) {
		if !alloctrack.JavaHeapDump(d) {
			continue // as the session does
		}
		if err := w.Add(alloctrack.WindowOfDump(d, time.Time{}, time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Add(&alloctrack.Window{}); err == nil {
		t.Error("a DDM window in a heapprofd capture was accepted")
	}
	if err := w.Report([]byte{1}, nil); err == nil {
		t.Error("a DDM report in a heapprofd capture was accepted")
	}
	sum, err := w.Close(start.Add(30*time.Second), false, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, alloctrack.TraceFile)); !bytes.Equal(got, trace) {
		t.Errorf("%s holds %d bytes, not the %d of the trace", alloctrack.TraceFile, len(got), len(trace))
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var js map[string]any
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	if js["backend"] != "heapprofd" || js["estimated"] != true || js["sampled_allocations"] != 17.0 || js["sampled_bytes"] != 664.0 ||
		js["sampling_interval_bytes"] != 4096.0 || js["dumps"] != 3.0 || js["error_stack_samples"] != 1.0 || js["unknown_stack_samples"] != 2.0 {
		t.Errorf("summary.json: %s", b)
	}
	if sum.Allocations < 17 || len(sum.TopClasses) != 0 || len(sum.TopSites) != 3 || !sum.TopSites[0].Estimated || sum.TopSites[0].Class != "" {
		t.Errorf("summary %+v", sum)
	}
	f, err := os.Open(filepath.Join(dir, "profile.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type)
	}
	if strings.Join(types, ",") != "samples,sampled_space,estimated_alloc_objects,estimated_alloc_space" || !strings.Contains(strings.Join(p.Comments, "\n"), "estimates") {
		t.Errorf("sample types %v, comments %q", types, p.Comments)
	}
	var smp, est int64
	for _, s := range p.Sample {
		smp += s.Value[0]
		est += s.Value[2]
	}
	if smp != 17 || math.Abs(float64(est)-float64(sum.Allocations)) > 3 {
		t.Errorf("profile: %d samples (want 17), %d estimated allocations (summary %d)", smp, est, sum.Allocations)
	}

	// Read back: the directory, and the bare trace.
	for _, path := range []string{dir, filepath.Join(dir, alloctrack.TraceFile)} {
		in, err := alloctrack.ReadInput(path)
		if err != nil {
			t.Fatal(err)
		}
		tl := alloctrack.NewTally()
		in.AddTo(tl)
		if !in.Estimated() || len(in.Dumps) != 3 || len(in.Reports) != 0 || tl.Sampled != (alloctrack.Count{Allocations: 17, Bytes: 664}) || !tl.Estimated || tl.Total.Allocations != sum.Allocations {
			t.Errorf("%s: estimated %v, %d dumps, %d reports, tally sampled %v estimated %v total %v (summary %d)", path, in.Estimated(), len(in.Dumps), len(in.Reports), tl.Sampled, tl.Estimated, tl.Total, sum.Allocations)
		}
		if (path == dir) != (in.Duration == 30*time.Second) {
			t.Errorf("%s: duration %v", path, in.Duration)
		}
	}
}

// A trace cut or corrupted is an error naming the file, the packet and
// the byte offset.
func TestReadInputBadTrace(t *testing.T) {
	trace := hpTrace(t, 4096)
	dir := t.TempDir()
	bad := append([]byte(nil), trace...)
	bad[1] = 0x7f // the first packet's length, now short: its fields overrun
	for name, b := range map[string][]byte{"cut.pftrace": trace[:len(trace)-3], "bad.pftrace": bad} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := alloctrack.ReadInput(path)
		var fe *perfetto.FormatError
		if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "packet ") || !strings.Contains(err.Error(), "byte ") {
			t.Errorf("%s: error %v, want one naming the file, packet and byte", name, err)
		}
	}
}

// Budgets and diffs of traces say their values are estimates.
func TestBudgetAndDiffOfTrace(t *testing.T) {
	tl := alloctrack.NewTally()
	for _, d := range decodeDumps(t, hpTrace(t, 4096)) {
		tl.Add(alloctrack.WindowOfDump(d, time.Time{}, time.Time{}))
	}
	bud, err := alloctrack.ParseBudget("b.yaml", []byte("total: {max_allocations: 10}\nsites: [{match: 'Foo\\.bar', max_bytes: 100}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := bud.Check(tl, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 2 {
		t.Fatalf("violations %v, want 2", v)
	}
	for _, x := range v {
		if !x.Estimated || !strings.Contains(x.String(), "estimate") {
			t.Errorf("violation %q is not marked as an estimate", x)
		}
	}
	d := alloctrack.Compare(alloctrack.NewTally(), tl, 0, 0)
	if d.BaseEstimated || !d.NewEstimated || len(d.Sites) != 3 || len(d.Classes) != 0 {
		t.Errorf("diff %+v", d)
	}
}
