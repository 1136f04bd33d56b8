package perfetto_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/alloctrack/alloctrack/perfetto"
)

// decodeAll reads every dump of a trace.
func decodeAll(t testing.TB, r io.Reader) ([]*perfetto.Dump, *perfetto.Decoder) {
	t.Helper()
	d := perfetto.NewDecoder(r, nil)
	var dumps []*perfetto.Dump
	for {
		dp, err := d.Next()
		if err == io.EOF {
			return dumps, d
		}
		if err != nil {
			t.Fatalf("after %d dumps: %v", len(dumps), err)
		}
		dumps = append(dumps, dp)
	}
}

// summary renders dumps, totals and stats (less the byte count, which
// differs between encodings) as text, for comparing decodes.
func summary(dumps []*perfetto.Dump, d *perfetto.Decoder) string {
	var b strings.Builder
	for _, dp := range dumps {
		fmt.Fprintf(&b, "dump seq=%d pkt=%d pid=%d heap=%q ts=%d..%d boot=%v:%d..%d si=%d flags=%v%v%v%v%v%v ce=%d stats=%+v delta=%+v broken=%+v/%d unres=%d nonmono=%d\n",
			dp.Sequence, dp.Packet, dp.PID, dp.Heap, dp.StartTimestamp, dp.Timestamp, dp.HasBootTime, dp.BootStartTimestamp, dp.BootTimestamp, dp.SamplingInterval,
			dp.FromStartup, dp.RejectedConcurrent, dp.Disconnected, dp.BufferOverran, dp.BufferCorrupted, dp.HitGuardrail,
			dp.ClientError, dp.ProcessStats, dp.Delta, dp.Broken, dp.BrokenStacks, dp.Unresolved, dp.Resets)
		for _, s := range dp.Stacks {
			fmt.Fprintf(&b, "  %q %v delta=%+v total=%+v\n", s.Stack.String(), s.Stack.Unwind, s.Delta, s.Total)
		}
	}
	for _, p := range d.Profiles() {
		fmt.Fprintf(&b, "profile pid=%d heap=%q dumps=%d total=%+v\n", p.PID, p.Heap, p.Dumps, p.Total)
		for _, s := range p.Stacks {
			fmt.Fprintf(&b, "  %q %+v\n", s.Stack.String(), s.Values)
		}
	}
	st := d.Stats()
	st.Bytes = 0
	fmt.Fprintf(&b, "stats %+v\n", st)
	return b.String()
}

// totals maps "pid/heap/stack key" to a stack's running total.
func totals(d *perfetto.Decoder) map[string]perfetto.Values {
	m := map[string]perfetto.Values{}
	for _, p := range d.Profiles() {
		for _, s := range p.Stacks {
			m[fmt.Sprintf("%d/%s/%s", p.PID, p.Heap, s.Stack.String())] = s.Values
		}
	}
	return m
}

func equalTotals(t *testing.T, got, want map[string]perfetto.Values) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("no stack %q (have %v)", k, got)
		} else if g != w {
			t.Errorf("stack %q: got %+v, want %+v", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected stack %q: %+v", k, g)
		}
	}
}

// TestPerfettoExpectations decodes traces equivalent to perfetto's own
// diff tests (test/trace_processor/diff_tests/parser/profiling/) and checks
// each call stack's total against the heap_profile_allocation rows those
// tests expect: the sum of a call site's rows is its total.
func TestPerfettoExpectations(t *testing.T) {
	tests := []struct {
		fixture    string
		want       map[string]perfetto.Values
		dumps      int
		unresolved int
	}{{
		// heap_profile_tracker_new_stack: (+1, +1) at ts 0 and again at ts 1
		// for callsite 0; frees (-1, -1) each time (heap is not ART).
		fixture: "new_stack",
		want:    map[string]perfetto.Values{"0//+0x4d2": {Allocated: 2, Count: 2, Freed: 2, FreeCount: 2}},
		dumps:   2,
	}, {
		// heap_profile_tracker_twoheaps: (+1, +1) and (-1, -1) per heap.
		fixture: "two_heaps",
		want: map[string]perfetto.Values{
			"0/libc.malloc/+0x2bc": {Allocated: 1, Count: 1, Freed: 1, FreeCount: 1},
			"0/custom/+0x2bc":      {Allocated: 1, Count: 1, Freed: 1, FreeCount: 1},
		},
		dumps: 2,
	}, {
		// heap_profile_dump_max: count 6 size 1000; count 1 size 90.
		fixture: "android10_dump_max",
		want: map[string]perfetto.Values{
			"31//readToken\nparseConfig\nnativeMain": {Allocated: 1000, Count: 6},
			"31//readToken\nnativeMain":              {Allocated: 90, Count: 1},
		},
		dumps: 1,
	}, {
		// heap_profile_dump_max_legacy: count 0 size 1000; count 0 size 90.
		fixture: "android10_dump_max_legacy",
		want: map[string]perfetto.Values{
			"31//readToken\nparseConfig\nnativeMain": {Allocated: 1000},
			"31//readToken\nnativeMain":              {Allocated: 90},
		},
		dumps: 1,
	}, {
		// heap_profile_window: size 1000 over the window 5..20 (trace
		// time; 15..30 in the trace's MONOTONIC_COARSE).
		fixture: "android10_window",
		want:    map[string]perfetto.Values{"31//growBuffer": {Allocated: 1000, Count: 4}},
		dumps:   1,
	}, {
		// stack_profile_tracker_empty_callstack: no rows.
		fixture:    "empty_callstack",
		want:       map[string]perfetto.Values{},
		dumps:      1,
		unresolved: 2,
	}}
	for _, tt := range tests {
		for _, packed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/packed=%v", tt.fixture, packed), func(t *testing.T) {
				dumps, d := decodeAll(t, bytes.NewReader(fixture(t, tt.fixture, packed)))
				if len(dumps) != tt.dumps {
					t.Fatalf("%d dumps, want %d", len(dumps), tt.dumps)
				}
				equalTotals(t, totals(d), tt.want)
				if got := d.Stats().UnresolvedSamples; got != tt.unresolved {
					t.Errorf("%d unresolved samples, want %d", got, tt.unresolved)
				}
				// The running totals are the sums of the dumps' deltas.
				sum := map[string]perfetto.Values{}
				for _, dp := range dumps {
					for _, s := range dp.Stacks {
						k := fmt.Sprintf("%d/%s/%s", dp.PID, dp.Heap, s.Stack.String())
						v := sum[k]
						sum[k] = perfetto.Values{Allocated: v.Allocated + s.Delta.Allocated, Count: v.Count + s.Delta.Count, Freed: v.Freed + s.Delta.Freed, FreeCount: v.FreeCount + s.Delta.FreeCount}
					}
				}
				equalTotals(t, sum, tt.want)
			})
		}
	}
}

func TestWindow(t *testing.T) {
	dumps, _ := decodeAll(t, bytes.NewReader(fixture(t, "android10_window", false)))
	dp := dumps[0]
	// perfetto's heap_profile_window expects the window 5..20 in trace
	// time (BOOTTIME): MONOTONIC_COARSE 15..30 moved by the clock snapshot.
	if dp.StartTimestamp != 15 || dp.Timestamp != 30 || dp.PacketTimestamp != 30 || dp.SamplingInterval != 1024 || dp.OrigSamplingInterval != 1024 {
		t.Errorf("window %d..%d packet ts %d interval %d/%d", dp.StartTimestamp, dp.Timestamp, dp.PacketTimestamp, dp.SamplingInterval, dp.OrigSamplingInterval)
	}
	if !dp.HasBootTime || dp.BootStartTimestamp != 5 || dp.BootTimestamp != 20 {
		t.Errorf("boot time window %v %d..%d, want 5..20", dp.HasBootTime, dp.BootStartTimestamp, dp.BootTimestamp)
	}
	if got := dp.Stacks[0].Stack.Frames[0]; got.Function != "growBuffer" || got.Mapping != "/growBuffer" || got.BuildID != "growBuffer" || got.RelPC != 0x880 {
		t.Errorf("frame %+v", got)
	}
}

const (
	keyLoad  = "art_quick_alloc_object_resolved_region_tlab\ncom.example.app.Feed.load\ncom.example.app.MainActivity.onCreate"
	keyTitle = "art_quick_alloc_array_resolved16_region_tlab\ncom.example.app.Feed.title\ncom.example.app.MainActivity.onCreate"
	keyError = "art_quick_alloc_object_resolved_region_tlab\n/apex/com.android.art/lib64/libart.so+0x5000\nERROR 5"
	keyUnk   = "+0x77"
)

// TestArtTrace checks the hand-computed results of art_heapprofd.textproto.
func TestArtTrace(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run(fmt.Sprintf("packed=%v", packed), func(t *testing.T) {
			dumps, d := decodeAll(t, bytes.NewReader(fixture(t, "art_heapprofd", packed)))
			if len(dumps) != 4 {
				t.Fatalf("%d dumps, want 4", len(dumps))
			}
			type sv struct {
				key          string
				delta, total perfetto.Values
			}
			check := func(i int, want []sv) {
				t.Helper()
				dp := dumps[i]
				if len(dp.Stacks) != len(want) {
					t.Errorf("dump %d: %d stacks, want %d", i, len(dp.Stacks), len(want))
					return
				}
				for j, w := range want {
					s := dp.Stacks[j]
					if s.Stack.String() != w.key || s.Delta != w.delta || s.Total != w.total {
						t.Errorf("dump %d stack %d: %q delta %+v total %+v, want %q %+v %+v", i, j, s.Stack.String(), s.Delta, s.Total, w.key, w.delta, w.total)
					}
				}
			}
			v := func(a, c uint64) perfetto.Values { return perfetto.Values{Allocated: a, Count: c} }

			// Dump 0: four stacks, two of them broken. Frees ignored.
			d0 := dumps[0]
			check(0, []sv{
				{keyLoad, v(4800, 3), v(4800, 3)},
				{keyTitle, v(640, 10), v(640, 10)},
				{keyError, v(96, 2), v(96, 2)},
				{keyUnk, v(48, 1), v(48, 1)},
			})
			if d0.PID != 4242 || d0.Heap != perfetto.ArtHeap || d0.Timestamp != 5000 || d0.StartTimestamp != 0 ||
				d0.SamplingInterval != 4096 || !d0.FromStartup || d0.Packet != 5 || d0.PacketTimestamp != 2000 || d0.Sequence != 7 {
				t.Errorf("dump 0 header %+v", d0)
			}
			if d0.ProcessStats != (perfetto.ProcessStats{UnwindingErrors: 1, HeapSamples: 16, TotalUnwindingTimeUS: 500, ClientSpinlockBlockedUS: 3}) {
				t.Errorf("dump 0 stats %+v", d0.ProcessStats)
			}
			if d0.Delta != v(5584, 16) || d0.Broken != v(144, 3) || d0.BrokenStacks != 2 {
				t.Errorf("dump 0 delta %+v broken %+v/%d", d0.Delta, d0.Broken, d0.BrokenStacks)
			}
			s0 := d0.Stacks
			if s0[0].Stack.Unwind != perfetto.UnwindOK || s0[2].Stack.Unwind != perfetto.UnwindError || s0[3].Stack.Unwind != perfetto.UnwindUnknown {
				t.Errorf("unwind classes %v %v %v", s0[0].Stack.Unwind, s0[2].Stack.Unwind, s0[3].Stack.Unwind)
			}
			f := s0[0].Stack.Frames
			if f[0].Mapping != "/apex/com.android.art/lib64/libart.so" || f[0].BuildID != "9c1f" || f[0].RelPC != 0x1000 ||
				f[1].RawFunction != "void com.example.app.Feed.load(int)" || f[1].Mapping != "/data/app/oat" {
				t.Errorf("frames %+v", f)
			}
			if e := s0[2].Stack.Frames[2]; e.Mapping != "ERROR" || e.Kind() != perfetto.FrameError {
				t.Errorf("error frame %+v", e)
			}

			// Dump 1: stack 1 grows under two ids (one named with a
			// signature, one without); stack 2 returns under a new id and
			// continues from its total; the error stack is unchanged;
			// the unknown stack vanished (zero, not listed).
			check(1, []sv{
				{keyLoad, v(5800, 4), v(10600, 7)},
				{keyTitle, v(320, 5), v(960, 15)},
				{keyError, v(0, 0), v(96, 2)},
			})
			if d1 := dumps[1]; d1.StartTimestamp != 5000 || d1.Timestamp != 10000 || d1.Packet != 7 || d1.BrokenStacks != 1 || d1.Broken != v(0, 0) {
				t.Errorf("dump 1 header %+v", d1)
			}
			if d := dumps[2]; d.PID != 777 || !d.RejectedConcurrent || len(d.Stacks) != 0 || d.Packet != 7 {
				t.Errorf("dump of pid 777: %+v", d)
			}

			// Dump 2: the JIT id grew; the id going backwards (320/5 to
			// 100/1) is a new generation of that id, counting from zero.
			check(3, []sv{{keyLoad, v(1000, 1), v(11600, 8)}, {keyTitle, v(100, 1), v(1060, 16)}})
			if d3 := dumps[3]; !d3.BufferOverran || !d3.Disconnected || d3.HitGuardrail || d3.Resets != 1 || d3.Unresolved != 0 {
				t.Errorf("dump 2 header %+v", d3)
			}

			equalTotals(t, totals(d), map[string]perfetto.Values{
				"4242/com.android.art/" + keyLoad:  v(11600, 8),
				"4242/com.android.art/" + keyTitle: v(1060, 16),
				"4242/com.android.art/" + keyError: v(96, 2),
				"4242/com.android.art/" + keyUnk:   v(48, 1),
			})
			ps := d.Profiles()
			if len(ps) != 2 || ps[0].PID != 777 || ps[0].Dumps != 1 || ps[1].Dumps != 3 || ps[1].Total != v(12804, 27) {
				t.Errorf("profiles %+v", ps)
			}
			st := d.Stats()
			want := perfetto.Stats{
				Packets: 9, Bytes: st.Bytes, ProfilePackets: 6, Dumps: 4,
				ResetSamples:      1,
				ErrorStackSamples: 2, ErrorStackBytes: 96,
				UnknownStackSamples: 1, UnknownStackBytes: 48,
				RejectedConcurrent: 1, Disconnected: 1, BufferOverran: 1,
			}
			if st != want {
				t.Errorf("stats\n got %+v\nwant %+v", st, want)
			}
			if st.Bytes != int64(len(fixture(t, "art_heapprofd", packed))) {
				t.Errorf("bytes %d", st.Bytes)
			}
		})
	}
}

func TestLostState(t *testing.T) {
	dumps, d := decodeAll(t, bytes.NewReader(fixture(t, "lost_state", false)))
	if len(dumps) != 3 {
		t.Fatalf("%d dumps", len(dumps))
	}
	if dumps[0].Unresolved != 1 || len(dumps[0].Stacks) != 0 {
		t.Errorf("dump 0: %+v", dumps[0])
	}
	if len(dumps[2].Stacks) != 1 || dumps[2].Stacks[0].Delta != (perfetto.Values{Allocated: 3, Count: 1}) {
		t.Errorf("dump 2: %+v", dumps[2].Stacks)
	}
	equalTotals(t, totals(d), map[string]perfetto.Values{"9/com.android.art/com.example.Cache.put": {Allocated: 8, Count: 2}})
	st := d.Stats()
	if st.UnresolvedSamples != 1 || st.SkippedInternedData != 2 || st.SkippedPackets != 1 || st.MissingProfilePackets != 1 || st.Packets != 7 {
		t.Errorf("stats %+v", st)
	}
}

// TestEncodingsAgree decodes every fixture packed, unpacked and one byte
// (or half a buffer) per read, and expects the same results.
func TestEncodingsAgree(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			raw := fixture(t, name, false)
			want := summary(decodeAll(t, bytes.NewReader(raw)))
			if got := summary(decodeAll(t, bytes.NewReader(fixture(t, name, true)))); got != want {
				t.Errorf("packed:\n%s\nunpacked:\n%s", got, want)
			}
			if got := summary(decodeAll(t, iotest.OneByteReader(bytes.NewReader(raw)))); got != want {
				t.Errorf("one byte at a time:\n%s\nwant:\n%s", got, want)
			}
			if got := summary(decodeAll(t, iotest.HalfReader(bytes.NewReader(raw)))); got != want {
				t.Errorf("half reads:\n%s\nwant:\n%s", got, want)
			}
		})
	}
	// Packing must actually have happened where there were lists.
	if bytes.Equal(fixture(t, "art_heapprofd", false), fixture(t, "art_heapprofd", true)) {
		t.Error("packed and unpacked encodings of art_heapprofd are identical")
	}
}

func TestNormalizeFunction(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"com.example.Foo.bar", "com.example.Foo.bar"},
		{"void com.example.Foo.bar(int)", "com.example.Foo.bar"},
		{"java.lang.String[] com.example.Foo.bar(int, java.lang.String)", "com.example.Foo.bar"},
		{"void com.example.Foo.<init>()", "com.example.Foo.<init>"},
		{"com.example.Foo$Inner.lambda$run$0", "com.example.Foo$Inner.lambda$run$0"},
		{"int com.example.Foo$1.run() [DEDUPED]", "com.example.Foo$1.run"},
		{"com.example.Foo.bar [DEDUPED]", "com.example.Foo.bar"},
		{"[DEDUPED] void com.example.Foo.bar(long)", "com.example.Foo.bar"},
		{"  com.example.Foo.bar  ", "com.example.Foo.bar"},
		{"art_quick_alloc_object_resolved_region_tlab", "art_quick_alloc_object_resolved_region_tlab"},
		{"void art::interpreter::ExecuteSwitchImplCpp<false>(art::interpreter::SwitchImplContext*)", "void art::interpreter::ExecuteSwitchImplCpp<false>(art::interpreter::SwitchImplContext*)"},
		{"ERROR 5", "ERROR 5"},
		{"", ""},
		{"(", "("},
		{"f()", "f"},
	} {
		if got := perfetto.NormalizeFunction(tt.in); got != tt.want {
			t.Errorf("NormalizeFunction(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFrameKind(t *testing.T) {
	for _, tt := range []struct {
		f    perfetto.Frame
		want perfetto.FrameKind
	}{
		{perfetto.Frame{Function: "a.B.c"}, perfetto.FrameNamed},
		{perfetto.Frame{Mapping: "/x.so", RelPC: 4}, perfetto.FrameUnknown},
		{perfetto.Frame{Function: "ERROR 3", Mapping: "ERROR"}, perfetto.FrameError},
		{perfetto.Frame{Mapping: "ERROR"}, perfetto.FrameError},
		{perfetto.Frame{Function: "ERRORS.b"}, perfetto.FrameNamed},
	} {
		if got := tt.f.Kind(); got != tt.want {
			t.Errorf("%+v: %v, want %v", tt.f, got, tt.want)
		}
	}
}
