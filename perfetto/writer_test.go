package perfetto_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/alloctrack/alloctrack/perfetto"
)

var (
	frameAlloc = perfetto.Frame{RawFunction: "art_quick_alloc_object_resolved_region_tlab", Mapping: "/apex/com.android.art/lib64/libart.so", RelPC: 0x10}
	frameRun   = perfetto.Frame{RawFunction: "void com.example.A.run(int)", Mapping: "/data/app/base.odex", RelPC: 0x20}
	frameErr   = perfetto.Frame{Function: "ERROR 2", Mapping: "ERROR"}
	stackA     = []perfetto.Frame{frameAlloc, frameRun}
	stackB     = []perfetto.Frame{frameErr}
)

// writeSmall writes the two rounds that testdata/writer_small.textproto
// spells out.
func writeSmall(t *testing.T, opts *perfetto.WriterOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, opts)
	if err := w.WriteDumps(perfetto.DumpSpec{
		PacketTimestamp: 100, PID: 42, Heap: perfetto.ArtHeap, Timestamp: 1000, SamplingInterval: 4096,
		Samples: []perfetto.SampleSpec{{Frames: stackA, Values: perfetto.Values{Allocated: 64, Count: 2}}},
	}); err != nil {
		t.Fatal(err)
	}
	w.Retire(stackA)
	if err := w.WriteDumps(perfetto.DumpSpec{
		PacketTimestamp: 200, PID: 42, Heap: perfetto.ArtHeap, StartTimestamp: 1000, Timestamp: 2000, SamplingInterval: 4096, BufferOverran: true,
		Samples: []perfetto.SampleSpec{
			{Frames: stackA, Values: perfetto.Values{Allocated: 32, Count: 1}},
			{Frames: stackB, Values: perfetto.Values{Allocated: 8, Count: 1}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestWriterBytes checks the Writer's exact bytes against protoc's encoding
// of testdata/writer_small.textproto, unpacked and packed, then decodes them.
func TestWriterBytes(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run(fmt.Sprintf("packed=%v", packed), func(t *testing.T) {
			got := writeSmall(t, &perfetto.WriterOptions{Packed: packed})
			if want := fixture(t, "writer_small", packed); !bytes.Equal(got, want) {
				t.Fatalf("writer output differs from testdata/writer_small (packed=%v):\n got %x\nwant %x", packed, got, want)
			}
			dumps, d := decodeAll(t, bytes.NewReader(got))
			if len(dumps) != 2 || !dumps[1].BufferOverran || dumps[1].StartTimestamp != 1000 {
				t.Fatalf("dumps %+v", dumps)
			}
			keyA := "art_quick_alloc_object_resolved_region_tlab\ncom.example.A.run"
			equalTotals(t, totals(d), map[string]perfetto.Values{
				"42/com.android.art/" + keyA: {Allocated: 96, Count: 3},
				"42/com.android.art/ERROR 2": {Allocated: 8, Count: 1},
			})
			if st := d.Stats(); st.ErrorStackSamples != 1 || st.ErrorStackBytes != 8 || st.BufferOverran != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestWriterLayouts writes a longer history with every Writer option and
// expects the decoder to find the same per-stack totals in each.
func TestWriterLayouts(t *testing.T) {
	frames := func(method string, pc uint64) []perfetto.Frame {
		return []perfetto.Frame{frameAlloc, {RawFunction: method, Mapping: "/data/app/oat/arm64/base.odex", RelPC: pc}, {Function: "com.example.Main.loop", Mapping: "/data/app/oat/arm64/base.odex", RelPC: 4}}
	}
	const n = 40
	for _, opts := range []perfetto.WriterOptions{
		{},
		{Packed: true},
		{InPacket: true},
		{InPacket: true, Packed: true},
		{DumpPacketBytes: 30, Sequence: 9},
		{DumpPacketBytes: 30, InPacket: true},
	} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			var buf bytes.Buffer
			w := perfetto.NewWriter(&buf, &opts)
			want := map[string]perfetto.Values{}
			cum := make([]perfetto.Values, n)
			for round := range 6 {
				var samples []perfetto.SampleSpec
				for i := range n {
					// Every third stack skips a round and comes back under
					// a new id, counting from zero.
					if (i+round)%3 == 0 {
						w.Retire(frames(fmt.Sprintf("void com.example.M.m%d(int)", i), uint64(i)))
						cum[i] = perfetto.Values{}
						continue
					}
					step := perfetto.Values{Allocated: uint64(16 * (i + 1)), Count: uint64(i%4 + 1), Freed: 8, FreeCount: 1}
					cum[i] = perfetto.Values{Allocated: cum[i].Allocated + step.Allocated, Count: cum[i].Count + step.Count, Freed: cum[i].Freed + step.Freed, FreeCount: cum[i].FreeCount + step.FreeCount}
					k := fmt.Sprintf("7/com.android.art/art_quick_alloc_object_resolved_region_tlab\ncom.example.M.m%d\ncom.example.Main.loop", i)
					v := want[k]
					want[k] = perfetto.Values{Allocated: v.Allocated + step.Allocated, Count: v.Count + step.Count}
					samples = append(samples, perfetto.SampleSpec{Frames: frames(fmt.Sprintf("void com.example.M.m%d(int)", i), uint64(i)), Values: cum[i]})
				}
				if err := w.WriteDumps(
					perfetto.DumpSpec{PacketTimestamp: uint64(round), PID: 7, Heap: perfetto.ArtHeap, Timestamp: uint64(1000 * round), SamplingInterval: 512, Samples: samples},
					perfetto.DumpSpec{PacketTimestamp: uint64(round), PID: 8, Heap: perfetto.ArtHeap, Timestamp: uint64(1000 * round), SamplingInterval: 512, RejectedConcurrent: true},
				); err != nil {
					t.Fatal(err)
				}
			}
			dumps, d := decodeAll(t, bytes.NewReader(buf.Bytes()))
			if len(dumps) != 12 {
				t.Errorf("%d dumps, want 12", len(dumps))
			}
			equalTotals(t, totals(d), want)
			st := d.Stats()
			if st.UnresolvedSamples != 0 || st.ResetSamples != 0 || st.MissingProfilePackets != 0 || st.RejectedConcurrent != 6 {
				t.Errorf("stats %+v", st)
			}
			if opts.DumpPacketBytes == 30 && st.ProfilePackets < 6*8 {
				t.Errorf("only %d profile packets: dumps were not split", st.ProfilePackets)
			}
		})
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(b []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(b), nil
}

func TestWriterError(t *testing.T) {
	w := perfetto.NewWriter(&failWriter{n: 1}, nil)
	d := perfetto.DumpSpec{PID: 1, Samples: []perfetto.SampleSpec{{Frames: stackA, Values: perfetto.Values{Count: 1}}}}
	if err := w.WriteDumps(d); err == nil {
		t.Fatal("no error")
	}
	if err := w.WriteDumps(d); err == nil || err.Error() != "disk full" {
		t.Fatalf("second write: %v", err)
	}
}

// TestUnwindClasses classifies stacks by how far they were unwound.
func TestUnwindClasses(t *testing.T) {
	libart := "/apex/com.android.art/lib64/libart.so"
	named := func(n string) perfetto.Frame { return perfetto.Frame{Function: n, Mapping: libart, RelPC: 1} }
	unknown := perfetto.Frame{Mapping: libart, RelPC: 0x99}
	tests := []struct {
		frames []perfetto.Frame
		want   perfetto.Unwind
	}{
		{[]perfetto.Frame{named("art_quick_alloc"), named("com.example.A.run"), named("art_quick_invoke_stub")}, perfetto.UnwindOK},
		// Android 12/13: libart frames, then nothing named up to the root.
		{[]perfetto.Frame{named("art_quick_alloc"), named("artAllocObjectFromCode"), unknown}, perfetto.UnwindUnknown},
		{[]perfetto.Frame{unknown}, perfetto.UnwindUnknown},
		// An unnamed frame in the middle is not a broken stack.
		{[]perfetto.Frame{named("art_quick_alloc"), unknown, named("art_quick_invoke_stub")}, perfetto.UnwindOK},
		{[]perfetto.Frame{named("art_quick_alloc"), {Function: "ERROR 7", Mapping: "ERROR"}}, perfetto.UnwindError},
	}
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, nil)
	var samples []perfetto.SampleSpec
	for i, tt := range tests {
		samples = append(samples, perfetto.SampleSpec{Frames: tt.frames, Values: perfetto.Values{Allocated: uint64(10 * (i + 1)), Count: 1}})
	}
	if err := w.WriteDumps(perfetto.DumpSpec{PID: 3, Heap: perfetto.ArtHeap, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	dumps, d := decodeAll(t, &buf)
	if len(dumps) != 1 || len(dumps[0].Stacks) != len(tests) {
		t.Fatalf("dumps %+v", dumps)
	}
	for i, tt := range tests {
		if got := dumps[0].Stacks[i].Stack.Unwind; got != tt.want {
			t.Errorf("stack %d %q: %v, want %v", i, dumps[0].Stacks[i].Stack, got, tt.want)
		}
	}
	st := d.Stats()
	if st.UnknownStackSamples != 2 || st.UnknownStackBytes != 20+30 || st.ErrorStackSamples != 1 || st.ErrorStackBytes != 50 {
		t.Errorf("stats %+v", st)
	}
	if dp := dumps[0]; dp.BrokenStacks != 3 || dp.Broken != (perfetto.Values{Allocated: 100, Count: 3}) {
		t.Errorf("broken %+v / %d", dp.Broken, dp.BrokenStacks)
	}
}

// TestDumpHeader round-trips every header field through the Writer and
// the decoder, and counts the status flags.
func TestDumpHeader(t *testing.T) {
	spec := perfetto.DumpSpec{
		PacketTimestamp: 77, PID: 31337, Heap: perfetto.ArtHeap, Timestamp: 9000, StartTimestamp: 4000,
		SamplingInterval: 8192, OrigSamplingInterval: 4096,
		FromStartup: true, RejectedConcurrent: true, Disconnected: true, BufferOverran: true, BufferCorrupted: true, HitGuardrail: true,
		ClientError:  2,
		ProcessStats: perfetto.ProcessStats{UnwindingErrors: 1, HeapSamples: 2, MapReparses: 3, TotalUnwindingTimeUS: 4, ClientSpinlockBlockedUS: 5},
	}
	for _, opts := range []perfetto.WriterOptions{{}, {InPacket: true}} {
		var buf bytes.Buffer
		if err := perfetto.NewWriter(&buf, &opts).WriteDumps(spec); err != nil {
			t.Fatal(err)
		}
		dumps, d := decodeAll(t, &buf)
		if len(dumps) != 1 {
			t.Fatalf("%d dumps", len(dumps))
		}
		got := *dumps[0]
		want := perfetto.Dump{
			Sequence: 1, Packet: got.Packet, PacketTimestamp: 77, PID: 31337, Heap: perfetto.ArtHeap, Timestamp: 9000, StartTimestamp: 4000,
			SamplingInterval: 8192, OrigSamplingInterval: 4096,
			FromStartup: true, RejectedConcurrent: true, Disconnected: true, BufferOverran: true, BufferCorrupted: true, HitGuardrail: true,
			ClientError: 2, ProcessStats: spec.ProcessStats, Stacks: got.Stacks,
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) || len(got.Stacks) != 0 {
			t.Errorf("%+v:\n got %+v\nwant %+v", opts, got, want)
		}
		st := d.Stats()
		if st.RejectedConcurrent != 1 || st.Disconnected != 1 || st.BufferOverran != 1 || st.BufferCorrupted != 1 || st.HitGuardrail != 1 || st.ClientError != 1 {
			t.Errorf("stats %+v", st)
		}
	}
}

// TestBootTime converts dump windows with the latest clock snapshot taken
// at or before them (the first one for earlier times).
func TestBootTime(t *testing.T) {
	snapshot := func(mono, boot uint64) []byte {
		clock := func(id, ts uint64) []byte { return lenField(1, cat(varintField(1, id), varintField(2, ts))) }
		return packet(lenField(6, cat(clock(6, boot), clock(4, mono), clock(1, 999))))
	}
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, nil)
	write := func(start, end uint64) {
		// A dump needs a sample: without one heapprofd writes no
		// ProcessHeapSamples.
		one := []perfetto.SampleSpec{{Frames: []perfetto.Frame{frameAlloc}, Values: perfetto.Values{Allocated: end, Count: end}}}
		if err := w.WriteDumps(perfetto.DumpSpec{PID: 1, Heap: perfetto.ArtHeap, StartTimestamp: start, Timestamp: end, Samples: one}); err != nil {
			t.Fatal(err)
		}
	}
	write(20, 40) // before any snapshot: no boot time
	buf.Write(snapshot(30, 130))
	write(10, 40)
	buf.Write(snapshot(50, 160))
	write(45, 60)
	dumps, _ := decodeAll(t, &buf)
	if len(dumps) != 3 {
		t.Fatalf("%d dumps", len(dumps))
	}
	for i, want := range []struct {
		has         bool
		start, boot uint64
	}{{false, 0, 0}, {true, 110, 140}, {true, 145, 170}} {
		dp := dumps[i]
		if dp.HasBootTime != want.has || dp.BootStartTimestamp != want.start || dp.BootTimestamp != want.boot {
			t.Errorf("dump %d: %v %d..%d, want %v %d..%d", i, dp.HasBootTime, dp.BootStartTimestamp, dp.BootTimestamp, want.has, want.start, want.boot)
		}
	}
}

// TestWriterIdleAndRejectedAtStop: a process with no sample gets no
// ProcessHeapSamples (the round is its empty ProfilePackets only), and the
// stop-time packet listing rejected processes has no index, which is not a
// lost packet.
func TestWriterIdleAndRejectedAtStop(t *testing.T) {
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, nil)
	idle := perfetto.DumpSpec{PacketTimestamp: 1, PID: 7, Heap: perfetto.ArtHeap, Timestamp: 1000, SamplingInterval: 4096}
	for range 3 {
		if err := w.WriteDumps(idle); err != nil {
			t.Fatal(err)
		}
	}
	busy := idle
	busy.Samples = []perfetto.SampleSpec{{Frames: []perfetto.Frame{frameAlloc, {Function: "com.example.M.run", Mapping: "/data/app/base.odex", RelPC: 4}}, Values: perfetto.Values{Allocated: 64, Count: 2}}}
	if err := w.WriteDumps(busy); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRejected(2, 8, 9); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteDumps(busy); err != nil {
		t.Fatal(err)
	}
	dumps, d := decodeAll(t, bytes.NewReader(buf.Bytes()))
	if len(dumps) != 4 || dumps[0].PID != 7 || dumps[0].Delta.Count != 2 || !dumps[1].RejectedConcurrent || dumps[1].PID != 8 || dumps[2].PID != 9 || dumps[3].Delta.Count != 0 {
		for _, dp := range dumps {
			t.Logf("dump pid %d rejected %v delta %+v", dp.PID, dp.RejectedConcurrent, dp.Delta)
		}
		t.Fatalf("%d dumps, want pid 7 (2 samples), rejected 8 and 9, pid 7 (nothing new)", len(dumps))
	}
	st := d.Stats()
	if st.MissingProfilePackets != 0 || st.ProfilePackets != 8 || st.RejectedConcurrent != 2 {
		t.Errorf("stats %+v: want no missing packets, 8 profile packets (3 idle rounds, 2 for each busy round, the stop packet), 2 rejected", st)
	}
}

// TestRealTime converts dump windows and packet times to REALTIME (the
// clock of logcat's stamps) with the clock snapshots that hold it: the
// latest at or before each time, the first for earlier times, none from a
// snapshot without REALTIME; the snapshots are the Writer's.
func TestRealTime(t *testing.T) {
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, nil)
	c := func(id uint32, ts uint64) perfetto.ClockReading { return perfetto.ClockReading{ID: id, Timestamp: ts} }
	write := func(pkt, start, end uint64) {
		one := []perfetto.SampleSpec{{Frames: []perfetto.Frame{frameAlloc}, Values: perfetto.Values{Allocated: end, Count: end}}}
		if err := w.WriteDumps(perfetto.DumpSpec{PacketTimestamp: pkt, PID: 1, Heap: perfetto.ArtHeap, StartTimestamp: start, Timestamp: end, Samples: one}); err != nil {
			t.Fatal(err)
		}
	}
	// No REALTIME yet: boot time only.
	w.WriteClockSnapshot(100, c(perfetto.ClockBoottime, 100), c(perfetto.ClockMonotonicCoarse, 90))
	write(120, 95, 110)
	// Wall clock 1e12 at boot time 200 (MONOTONIC_COARSE 190).
	w.WriteClockSnapshot(200, c(perfetto.ClockBoottime, 200), c(perfetto.ClockRealtimeCoarse, 5), c(perfetto.ClockMonotonicCoarse, 190), c(perfetto.ClockRealtime, 1e12), c(perfetto.ClockMonotonic, 191))
	write(230, 150, 220)
	// The wall clock stepped 1000 ns ahead.
	w.WriteClockSnapshot(300, c(perfetto.ClockBoottime, 300), c(perfetto.ClockMonotonicCoarse, 290), c(perfetto.ClockRealtime, 1e12+1100))
	write(330, 220, 320)
	dumps, _ := decodeAll(t, &buf)
	if len(dumps) != 3 {
		t.Fatalf("%d dumps", len(dumps))
	}
	for i, want := range []struct {
		has             bool
		start, end, pkt uint64
	}{
		{false, 0, 0, 0},
		// 150 is before the REALTIME snapshot: the first one converts it.
		{true, 1e12 - 40, 1e12 + 30, 1e12 + 30},
		{true, 1e12 + 30, 1e12 + 1130, 1e12 + 1130},
	} {
		dp := dumps[i]
		if dp.HasRealTime != want.has || dp.RealStartTimestamp != want.start || dp.RealTimestamp != want.end || dp.RealPacketTimestamp != want.pkt {
			t.Errorf("dump %d: %v %d..%d packet %d, want %v %d..%d packet %d", i, dp.HasRealTime, dp.RealStartTimestamp, dp.RealTimestamp, dp.RealPacketTimestamp,
				want.has, want.start, want.end, want.pkt)
		}
		if !dp.HasBootTime {
			t.Errorf("dump %d has no boot time", i)
		}
	}
}
