package pertest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/instrument"
)

const interval = 4096

// dump is a heapprofd window with one site per count: counts[i] samples
// of interval bytes each, estimated as scale allocations per sample.
func dump(counts ...uint64) *alloctrack.Window {
	src := &frozen{}
	w := &alloctrack.Window{Sampling: &alloctrack.Sampling{Interval: interval}, Source: src}
	for i, n := range counts {
		c := alloctrack.Count{Allocations: n, Bytes: n * interval}
		e := alloctrack.Estimate{Allocations: float64(n) * 10, Bytes: float64(n * interval)}
		w.Sites = append(w.Sites, alloctrack.SiteDelta{Hash: uint64(i + 1), Count: c, Estimated: e})
		w.Total = w.Total.Plus(c)
		w.Estimated = w.Estimated.Plus(e)
		src.infos = append(src.infos, alloctrack.SiteInfo{ID: alloctrack.SiteID(uint64(i + 1)), Heapprofd: true,
			Frames: []alloctrack.Frame{{Class: "com.example.Work", Method: "f" + string(rune('a'+i)), Line: -1}}})
	}
	return w
}

func newHeapprofd() *Attributor {
	return New(Config{Package: "com.example", API: 33, Backend: alloctrack.BackendHeapprofd, DumpInterval: 250 * time.Millisecond})
}

// A dump is split among the tests it overlaps in proportion to the
// overlap; the rest is between tests; samples add up exactly and the
// total is the sum of the parts.
func TestDumpSplitByOverlap(t *testing.T) {
	a := newHeapprofd()
	if err := a.Dump(7, dump(8, 3), at(0), at(1000)); err != nil {
		t.Fatal(err)
	}
	a.Event(7, at(250), runnerEv(instrument.TestStarted, nameA))
	if s := a.Snapshot(); s.Total.SampledAllocations != 0 {
		t.Errorf("a dump was placed before the lines that bound it were read: %+v", s.Total)
	}
	a.Event(7, at(750), runnerEv(instrument.TestFinished, nameA))
	a.Event(7, at(1000), runnerEv(instrument.TestStarted, nameB))
	a.Event(7, at(1500), runnerEv(instrument.TestFinished, nameB))
	_ = a.Dump(7, dump(4), at(1000), at(2000))
	a.Gone(7)
	r := a.Finish()
	ta, tb := test(t, r, nameA), test(t, r, nameB)
	if ta.SampledAllocations != 6 || tb.SampledAllocations != 2 || r.Between.SampledAllocations != 7 {
		t.Errorf("samples A %d B %d between %d", ta.SampledAllocations, tb.SampledAllocations, r.Between.SampledAllocations)
	}
	if ta.Allocations != 55 || ta.Bytes != 5.5*interval || tb.Allocations != 20 {
		t.Errorf("A %d, %d; B %d", ta.Allocations, ta.Bytes, tb.Allocations)
	}
	if !ta.Estimated || ta.BoundaryErrorSeconds != 0.25 || r.Total.SampledAllocations != 15 || !r.Total.Estimated {
		t.Errorf("A %+v total %+v", ta, r.Total)
	}
	checkSum(t, r)
	if ta.Partial || tb.Partial || len(ta.TopSites) != 2 {
		t.Errorf("A %+v B %+v", ta, tb)
	}
}

// A test still running when a process is gone takes the rest of the dump
// and is partial when no dump covered its end.
func TestDumpOpenTestAndGone(t *testing.T) {
	a := newHeapprofd()
	a.Event(7, at(500), runnerEv(instrument.TestStarted, nameA))
	_ = a.Dump(7, dump(10), at(0), at(1000))
	a.Gone(7)
	r := a.Finish()
	ta := test(t, r, nameA)
	if ta.SampledAllocations != 5 || !hasNote(ta, "its process was stopped before a dump covered its end") {
		t.Errorf("A %+v", ta)
	}
	checkSum(t, r)
}

// A test that ended before its process is whole, though the process's
// last dump ends at its newest sample, before the test's end. A test that
// crashed takes every dump of its process from its start (no line says
// when it ended; am's result, which ends it, comes before the last
// dumps), and is partial once its process is gone.
func TestDumpGoneAfterTheTests(t *testing.T) {
	a := newHeapprofd()
	a.Event(7, at(100), runnerEv(instrument.TestStarted, nameA))
	a.Event(7, at(900), runnerEv(instrument.TestFinished, nameA))
	_ = a.Dump(7, dump(4), at(100), at(800)) // A's newest sample at 0.8 s
	a.Gone(7)
	a.Event(8, at(1000), runnerEv(instrument.TestStarted, nameB))
	a.Result(instrument.Result{Values: map[string]string{"shortMsg": "Process crashed."}, HasCode: true})
	_ = a.Dump(8, dump(5), at(1000), at(1250))
	_ = a.Dump(8, dump(3), at(1250), at(1400)) // the dump at its process's end
	a.Gone(8)
	r := a.Finish()
	ta, tb := test(t, r, nameA), test(t, r, nameB)
	if ta.Partial || ta.SampledAllocations != 4 {
		t.Errorf("A partial %v %q, %d samples, want whole with 4", ta.Partial, ta.Notes, ta.SampledAllocations)
	}
	if tb.Outcome != Crashed || tb.SampledAllocations != 8 || !hasNote(tb, noteDied) {
		t.Errorf("B %s, %d samples, notes %q; want crashed with 8, its process ended", tb.Outcome, tb.SampledAllocations, tb.Notes)
	}
	checkSum(t, r)
}

// Dumps with no timed runner line go between tests, said in Problems.
func TestDumpWithoutTimes(t *testing.T) {
	a := newHeapprofd()
	a.Status(status(instrument.Started, 0, nameA))
	_ = a.Dump(7, dump(3), at(0), at(1000))
	r := a.Finish()
	if r.Between.SampledAllocations != 3 || !hasProblem(r, "no runner line with a device time") {
		t.Errorf("between %+v problems %q", r.Between, r.Problems)
	}
	if err := newHeapprofd().Dump(1, dump(1), at(10), at(0)); err == nil {
		t.Error("a dump ending before it starts was taken")
	}
}

// apportion always gives whole numbers adding up to n.
func TestApportion(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		k := 1 + rng.IntN(5)
		fr := make([]float64, k)
		sum := 0.0
		for i := range fr {
			fr[i] = rng.Float64()
			sum += fr[i]
		}
		for i := range fr {
			fr[i] /= sum
		}
		n := rng.Uint64N(1 << 40)
		var got uint64
		for i, v := range apportion(n, fr) {
			got += v
			if d := float64(v) - float64(n)*fr[i]; d > 1 || d < -1 {
				t.Fatalf("apportion(%d, %v)[%d] = %d", n, fr, i, v)
			}
		}
		if got != n {
			t.Fatalf("apportion(%d, %v) sums to %d", n, fr, got)
		}
	}
}

// The orchestrator's listing process: its dumps count between tests, with
// no problem.
func TestDumpOrchestratorListing(t *testing.T) {
	a := New(Config{API: 33, Backend: alloctrack.BackendHeapprofd, Orchestrator: true, DumpInterval: time.Second})
	a.Event(3, at(0), runStarted(2))
	feedTests(a, 3, 10, nameA, nameB)
	_ = a.Dump(3, dump(5), at(0), at(1000))
	r := a.Finish()
	if len(r.Tests) != 0 || r.Between.SampledAllocations != 5 || hasProblem(r, "no runner line") {
		t.Errorf("tests %v between %+v problems %q", names(r), r.Between, r.Problems)
	}
}

// A span no dump covers (the process's heapprofd session replaced by
// another) makes the tests it overlaps partial, and only those.
func TestDumpGapMakesPartial(t *testing.T) {
	a := newHeapprofd()
	a.Event(7, at(100), runnerEv(instrument.TestStarted, nameA))
	a.Event(7, at(900), runnerEv(instrument.TestFinished, nameA))
	a.Event(7, at(1000), runnerEv(instrument.TestStarted, nameB))
	a.Event(7, at(1900), runnerEv(instrument.TestFinished, nameB))
	a.Event(7, at(2000), runnerEv(instrument.TestStarted, nameC))
	a.Event(7, at(2900), runnerEv(instrument.TestFinished, nameC))
	_ = a.Dump(7, dump(4), at(0), at(1000))
	_ = a.Dump(7, dump(4), at(1000), at(1200))
	_ = a.Dump(7, dump(4), at(1700), at(3000)) // not sampled from 1.2 s to 1.7 s
	r := a.Finish()
	if ta, tb, tc := test(t, r, nameA), test(t, r, nameB), test(t, r, nameC); ta.Partial || tc.Partial || !tb.Partial ||
		!hasNote(tb, "heapprofd did not sample its process for part of it (between two profiling sessions): those allocations are not counted") {
		t.Errorf("A %v %q, B %v %q, C %v %q", ta.Partial, ta.Notes, tb.Partial, tb.Notes, tc.Partial, tc.Notes)
	}
	checkSum(t, r)
}

// A test whose finished: line logcat lost, ended by am's status alone,
// takes its dumps up to its process's next timed line (the next test's
// started:, run finished:) and is partial saying so, never silently low.
func TestDumpFinishedLineLost(t *testing.T) {
	a := newHeapprofd()
	_ = a.Dump(7, dump(10), at(0), at(1000))
	a.Status(status(instrument.Started, 0, nameA))
	a.Event(7, at(100), runnerEv(instrument.TestStarted, nameA))
	a.Status(status(instrument.Ended, instrument.Passed, nameA)) // finished: A lost
	a.Status(status(instrument.Started, 0, nameB))
	a.Event(7, at(1000), runnerEv(instrument.TestStarted, nameB))
	a.Event(7, at(1900), runnerEv(instrument.TestFinished, nameB))
	a.Status(status(instrument.Ended, instrument.Passed, nameB))
	_ = a.Dump(7, dump(10), at(1000), at(2000))
	a.Status(status(instrument.Started, 0, nameC))
	a.Event(7, at(2000), runnerEv(instrument.TestStarted, nameC))
	a.Status(status(instrument.Ended, instrument.Passed, nameC)) // finished: C lost
	a.Event(7, at(2600), runFinished(3))
	_ = a.Dump(7, dump(10), at(2000), at(3000))
	a.Gone(7)
	r := a.Finish()
	ta, tb, tc := test(t, r, nameA), test(t, r, nameB), test(t, r, nameC)
	if ta.SampledAllocations != 9 || tb.SampledAllocations != 9 || tc.SampledAllocations != 6 || r.Between.SampledAllocations != 6 {
		t.Errorf("samples A %d B %d C %d between %d, want 9 9 6 6", ta.SampledAllocations, tb.SampledAllocations, tc.SampledAllocations, r.Between.SampledAllocations)
	}
	if !ta.Partial || len(ta.Notes) != 1 || !slices.Contains(ta.Notes, fmt.Sprintf(noteEndBound, "its process's line started: "+nameB)) {
		t.Errorf("A partial %v notes %q", ta.Partial, ta.Notes)
	}
	if !tc.Partial || len(tc.Notes) != 1 || !slices.Contains(tc.Notes, fmt.Sprintf(noteEndBound, "its process's line run finished:")) {
		t.Errorf("C partial %v notes %q", tc.Partial, tc.Notes)
	}
	if tb.Partial || ta.Outcome != Passed || tc.Outcome != Passed {
		t.Errorf("B partial %v %q; A %s C %s", tb.Partial, tb.Notes, ta.Outcome, tc.Outcome)
	}
	checkSum(t, r)
}

// The last test's finished: line and run finished: lost: its process's
// end bounds it. A finished: line that comes after am's status (logcat
// slower than am) costs nothing.
func TestDumpLastFinishedLineLost(t *testing.T) {
	a := newHeapprofd()
	a.Status(status(instrument.Started, 0, nameA))
	a.Event(7, at(100), runnerEv(instrument.TestStarted, nameA))
	a.Status(status(instrument.Ended, instrument.Passed, nameA))
	a.Event(7, at(900), runnerEv(instrument.TestFinished, nameA))
	a.Status(status(instrument.Started, 0, nameB))
	a.Event(7, at(1000), runnerEv(instrument.TestStarted, nameB))
	a.Status(status(instrument.Ended, instrument.Passed, nameB)) // no more lines
	_ = a.Dump(7, dump(10), at(0), at(1000))
	_ = a.Dump(7, dump(10), at(1000), at(1500))
	a.Gone(7)
	r := a.Finish()
	ta, tb := test(t, r, nameA), test(t, r, nameB)
	if ta.Partial || ta.SampledAllocations != 8 {
		t.Errorf("A partial %v %q, %d samples, want whole with 8", ta.Partial, ta.Notes, ta.SampledAllocations)
	}
	if tb.SampledAllocations != 10 || len(tb.Notes) != 1 || !slices.Contains(tb.Notes, fmt.Sprintf(noteEndBound, "its process's end")) {
		t.Errorf("B %d samples, notes %q; want 10, bounded by its process's end", tb.SampledAllocations, tb.Notes)
	}
	checkSum(t, r)
}

// A test whose started: line logcat lost takes its dumps from its
// process's line before (the last test's finished:), not from its
// failed: line; one of which no line was read at all is partial saying
// its allocations count between tests.
func TestDumpStartedLineLost(t *testing.T) {
	a := newHeapprofd()
	a.Status(status(instrument.Started, 0, nameA))
	a.Event(7, at(100), runnerEv(instrument.TestStarted, nameA))
	a.Event(7, at(900), runnerEv(instrument.TestFinished, nameA))
	a.Status(status(instrument.Ended, instrument.Passed, nameA))
	a.Status(status(instrument.Started, 0, nameB)) // started: B lost
	a.Event(7, at(1500), runnerEv(instrument.TestFailed, nameB))
	a.Event(7, at(1900), runnerEv(instrument.TestFinished, nameB))
	a.Status(status(instrument.Ended, instrument.Failed, nameB))
	a.Status(status(instrument.Started, 0, nameC)) // both lines of C lost
	a.Status(status(instrument.Ended, instrument.Passed, nameC))
	_ = a.Dump(7, dump(10), at(0), at(1000))
	_ = a.Dump(7, dump(10), at(1000), at(2000))
	a.Event(7, at(2100), runFinished(3))
	a.Gone(7)
	r := a.Finish()
	ta, tb, tc := test(t, r, nameA), test(t, r, nameB), test(t, r, nameC)
	if ta.SampledAllocations != 8 || tb.SampledAllocations != 10 || r.Between.SampledAllocations != 2 {
		t.Errorf("samples A %d B %d between %d, want 8 10 2", ta.SampledAllocations, tb.SampledAllocations, r.Between.SampledAllocations)
	}
	if !tb.Partial || !slices.Contains(tb.Notes, fmt.Sprintf(noteStartBound, "its process's line finished: "+nameA)) || tb.Outcome != Failed {
		t.Errorf("B %s partial %v notes %q", tb.Outcome, tb.Partial, tb.Notes)
	}
	if !tc.Partial || !slices.Contains(tc.Notes, noteNoLines) || ta.Partial {
		t.Errorf("C partial %v notes %q; A partial %v", tc.Partial, tc.Notes, ta.Partial)
	}
	checkSum(t, r)
}

// With no am status (the daemon), a test of which only the failed: line
// was read (its started: and finished: lost) is partial saying so; a
// class-level failure (a class name alone) is not.
func TestDumpOnlyFailedLineRead(t *testing.T) {
	a := newHeapprofd()
	a.Event(7, at(100), runnerEv(instrument.TestStarted, nameA))
	a.Event(7, at(900), runnerEv(instrument.TestFinished, nameA))
	a.Event(7, at(1500), runnerEv(instrument.TestFailed, nameB))
	a.Event(7, at(2000), runnerEv(instrument.TestStarted, nameC))
	a.Event(7, at(2900), runnerEv(instrument.TestFinished, nameC))
	a.Event(7, at(3000), runnerEv(instrument.TestFailed, "com.example.OtherTest"))
	_ = a.Dump(7, dump(30), at(0), at(3000))
	a.Gone(7)
	r := a.Finish()
	if tb := test(t, r, nameB); !tb.Partial || !slices.Contains(tb.Notes, noteFailedOnly) || tb.Outcome != Failed {
		t.Errorf("B %s partial %v notes %q", tb.Outcome, tb.Partial, tb.Notes)
	}
	if tc := test(t, r, "com.example.OtherTest"); tc.Partial {
		t.Errorf("the class-level failure is partial: %q", tc.Notes)
	}
	checkSum(t, r)
}
