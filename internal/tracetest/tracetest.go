// Package tracetest holds a heapprofd trace for tests: three rounds of
// dumps whose every number is known.
package tracetest

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/alloctrack/alloctrack/perfetto"
)

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

// Heapprofd writes three rounds of dumps of pid 42 at interval, values
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
func Heapprofd(t testing.TB, interval uint64) []byte {
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

// Dumps decodes every dump of trace.
func Dumps(t testing.TB, trace []byte) []*perfetto.Dump {
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
