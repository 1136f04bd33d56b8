package perfetto_test

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/perfetto"
)

// benchTrace writes rounds dumps of stacks distinct call stacks, each
// depth frames deep, every stack growing in every dump.
func benchTrace(tb testing.TB, stacks, depth, rounds int, nameLen int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, nil)
	pad := strings.Repeat("x", nameLen)
	frames := make([][]perfetto.Frame, stacks)
	for i := range frames {
		for j := range depth {
			frames[i] = append(frames[i], perfetto.Frame{
				RawFunction: fmt.Sprintf("void com.example.%s.C%d.m%d(int)", pad, (i+j)%97, j),
				Mapping:     "/data/app/oat/arm64/base.odex", RelPC: uint64(i*depth + j),
			})
		}
	}
	for r := range rounds {
		samples := make([]perfetto.SampleSpec, stacks)
		for i := range samples {
			samples[i] = perfetto.SampleSpec{Frames: frames[i], Values: perfetto.Values{Allocated: uint64(64 * (r + 1) * (i + 1)), Count: uint64((r + 1) * (i%5 + 1))}}
		}
		if err := w.WriteDumps(perfetto.DumpSpec{PacketTimestamp: uint64(r), PID: 1, Heap: perfetto.ArtHeap, Timestamp: uint64(r), SamplingInterval: 4096, Samples: samples}); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

func drain(tb testing.TB, r io.Reader) *perfetto.Decoder {
	d := perfetto.NewDecoder(r, nil)
	for {
		if _, err := d.Next(); err == io.EOF {
			return d
		} else if err != nil {
			tb.Fatal(err)
		}
	}
}

// TestAllocationBoundedByInput decodes a trace with long, deep stacks and
// checks the bytes allocated stay within a fixed multiple of the input.
func TestAllocationBoundedByInput(t *testing.T) {
	in := benchTrace(t, 500, 64, 4, 200)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	drain(t, bytes.NewReader(in))
	runtime.ReadMemStats(&after)
	ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(in))
	t.Logf("input %d bytes, allocated %d bytes (%.1f per input byte)", len(in), after.TotalAlloc-before.TotalAlloc, ratio)
	if ratio > 16 {
		t.Errorf("allocated %.1f bytes per input byte", ratio)
	}
}

// BenchmarkDecode decodes a trace of 10 dumps of 2,000 stacks 32 frames
// deep.
func BenchmarkDecode(b *testing.B) {
	in := benchTrace(b, 2000, 32, 10, 0)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		drain(b, bytes.NewReader(in))
	}
}

// BenchmarkDecodeDump measures the steady state of a long session: one
// more dump of 2,000 stacks (all already interned) per iteration.
func BenchmarkDecodeDump(b *testing.B) {
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, nil)
	frames := make([][]perfetto.Frame, 2000)
	for i := range frames {
		for j := range 32 {
			frames[i] = append(frames[i], perfetto.Frame{RawFunction: fmt.Sprintf("com.example.C%d.m%d", i%97, j), Mapping: "/data/app/base.odex", RelPC: uint64(i*32 + j)})
		}
	}
	dump := func(r int) []byte {
		buf.Reset()
		samples := make([]perfetto.SampleSpec, len(frames))
		for i := range samples {
			samples[i] = perfetto.SampleSpec{Frames: frames[i], Values: perfetto.Values{Allocated: uint64(64 * (r + 1)), Count: uint64(r + 1)}}
		}
		if err := w.WriteDumps(perfetto.DumpSpec{PID: 1, Heap: perfetto.ArtHeap, Timestamp: uint64(r), SamplingInterval: 4096, Samples: samples}); err != nil {
			b.Fatal(err)
		}
		return bytes.Clone(buf.Bytes())
	}
	pr, pw := io.Pipe()
	d := perfetto.NewDecoder(pr, nil)
	first := dump(0)
	go func() { pw.Write(first) }()
	if _, err := d.Next(); err != nil {
		b.Fatal(err)
	}
	dumps := make([][]byte, 0, 64)
	for r := 1; r <= 64; r++ {
		dumps = append(dumps, dump(r))
	}
	b.SetBytes(int64(len(dumps[0])))
	b.ReportAllocs()
	b.ResetTimer()
	i, next := 0, 65
	for b.Loop() {
		if i == len(dumps) {
			b.StopTimer()
			// Values must keep growing: write the next cycle of dumps.
			for k := range dumps {
				dumps[k] = dump(next)
				next++
			}
			i = 0
			b.StartTimer()
		}
		data := dumps[i]
		i++
		go func() { pw.Write(data) }()
		if _, err := d.Next(); err != nil {
			b.Fatal(err)
		}
	}
	pw.Close()
}

// BenchmarkDumpBytes measures what one more dump of a process adds to a
// trace once its stacks are interned (a long session's steady state):
// heapprofd writes every call stack it still holds, each dump, with its
// cumulative values, whatever the process did since. It reports
// trace_bytes/dump for 200, 2,000 and 20,000 stacks; heapprofd also
// writes the zero freed values this Writer leaves out (4 bytes a stack).
func BenchmarkDumpBytes(b *testing.B) {
	for _, stacks := range []int{200, 2000, 20000} {
		b.Run(fmt.Sprintf("stacks=%d", stacks), func(b *testing.B) {
			var buf bytes.Buffer
			w := perfetto.NewWriter(&buf, nil)
			frames := make([][]perfetto.Frame, stacks)
			for i := range frames {
				for j := range 16 {
					frames[i] = append(frames[i], perfetto.Frame{RawFunction: fmt.Sprintf("com.example.C%d.m%d", i%97, j), Mapping: "/data/app/base.odex", RelPC: uint64(i*16 + j)})
				}
			}
			samples := make([]perfetto.SampleSpec, stacks)
			round := 0
			dump := func() {
				round++
				for i := range samples {
					// Some MiB and thousands of samples per stack after a while.
					samples[i] = perfetto.SampleSpec{Frames: frames[i], Values: perfetto.Values{Allocated: uint64(1<<20 + 4096*round), Count: uint64(1000 + round)}}
				}
				if err := w.WriteDumps(perfetto.DumpSpec{PacketTimestamp: uint64(round), PID: 1, Heap: perfetto.ArtHeap, Timestamp: uint64(round), SamplingInterval: 4096, Samples: samples}); err != nil {
					b.Fatal(err)
				}
			}
			dump() // interns every stack
			buf.Reset()
			n := 0
			for b.Loop() {
				dump()
				n++
			}
			b.ReportMetric(float64(buf.Len())/float64(n), "trace_bytes/dump")
		})
	}
}
