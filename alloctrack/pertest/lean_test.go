package pertest

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/instrument"
)

const leanTop = 3

// leanBody is a test's body: classes classes and sites (the same in every
// test, as an app's code paths are), with
// different sizes so that the top ones are plain.
func leanBody(classes int) []item {
	var out []item
	for j := range classes {
		out = append(out, app(1+j%3, uint32(16*(j+1)), instrThread, fmt.Sprintf("Lcom/example/C%d;", j), fmt.Sprintf("f%d", j))...)
	}
	return out
}

// feedDDMTest feeds test k of pid as the daemon does: its lines, then the
// report the finished: line's cycle reads. A third of the tests fail with
// a long trace.
func feedDDMTest(tb testing.TB, a *Attributor, pid, k, classes int) {
	if err := a.Report(pid, reportOf(tb, 30, ddmLines(a, pid, k, classes)), false); err != nil {
		tb.Fatal(err)
	}
}

// ddmLines feeds test k's lines and returns what its report holds.
func ddmLines(a *Attributor, pid, k, classes int) []item {
	name := fmt.Sprintf("test%04d(com.example.WorkTest)", k)
	a.Event(pid, at(100*k), runnerEv(instrument.TestStarted, name))
	ends := mark(mFinished)
	if k%3 == 2 {
		a.Event(pid, at(100*k+40), runnerEv(instrument.TestFailed, name))
		a.Event(pid, at(100*k+40), instrument.RunnerEvent{Kind: instrument.Exception, Name: name,
			Trace: "java.lang.AssertionError: boom\n" + strings.Repeat("\tat com.example.WorkTest.deep(WorkTest.java:9)\n", 200)})
		ends = script(mark(mFailure), ends)
	}
	a.Event(pid, at(100*k+50), runnerEv(instrument.TestFinished, name))
	return script(mark(mStarted), leanBody(classes), ends)
}

// A Lean attributor (the daemon's) gives every test the figures and top
// classes a full one gives, but keeps of each test that can no longer
// change only its top classes (no site), and of a failure its first
// line: through DDM, each
// test's tally once its finished marker is counted; through heapprofd,
// once a dump after its end is placed.
func TestLeanKeepsFiguresNotTallies(t *testing.T) {
	const tests, classes = 12, 10
	lean, full := newDDM(30), newDDM(30)
	lean.cfg.Lean = true
	for _, a := range []*Attributor{lean, full} {
		a.Event(100, at(0), runStarted(tests))
		for k := range tests {
			feedDDMTest(t, a, 100, k, classes)
		}
	}
	checkLean(t, lean.Snapshot(), full.Snapshot(), tests)

	hLean, hFull := newHeapprofd(), newHeapprofd()
	hLean.cfg.Lean, hLean.cfg.Top, hFull.cfg.Top = true, leanTop, leanTop
	counts := make([]uint64, classes)
	for j := range counts {
		counts[j] = uint64(j + 1)
	}
	for _, a := range []*Attributor{hLean, hFull} {
		for k := range tests {
			name := fmt.Sprintf("test%04d(com.example.WorkTest)", k)
			a.Event(7, at(1000*k+100), runnerEv(instrument.TestStarted, name))
			a.Event(7, at(1000*k+900), runnerEv(instrument.TestFinished, name))
			_ = a.Dump(7, dump(counts...), at(1000*k), at(1000*k+1000))
		}
	}
	checkLean(t, hLean.Snapshot(), hFull.Snapshot(), tests)
}

// checkLean compares a lean run with the full one: the same figures; the
// tests before the last two (whose tallies may still grow) lean.
func checkLean(t *testing.T, lean, full *Run, tests int) {
	t.Helper()
	if len(lean.Tests) != tests || len(full.Tests) != tests {
		t.Fatalf("%d and %d tests, want %d", len(lean.Tests), len(full.Tests), tests)
	}
	for i := range lean.Tests {
		l, f := lean.Tests[i], full.Tests[i]
		if l.Allocations != f.Allocations || l.Bytes != f.Bytes || !reflect.DeepEqual(l.TopClasses, f.TopClasses) ||
			l.SampledBytes != f.SampledBytes || l.Outcome != f.Outcome || l.Partial != f.Partial {
			t.Errorf("test %d: lean %s %+v, full %s %+v", i, l.Outcome, l.Figures, f.Outcome, f.Figures)
		}
		if first, _, _ := strings.Cut(f.Failure, "\n"); l.Failure != first {
			t.Errorf("test %d: lean failure %q, want its first line %q", i, l.Failure, first)
		}
		if i >= tests-2 {
			continue
		}
		if n, s := len(l.Tally.Classes), l.Tally.Sites(); n > leanTop || s > 0 || len(l.TopSites) > 0 {
			t.Errorf("test %d: the lean tally keeps %d classes and %d sites, want %d classes at most, no site", i, n, s, leanTop)
		}
		if n, s := len(f.Tally.Classes), f.Tally.Sites(); max(n, s) <= leanTop {
			t.Errorf("test %d: the full tally has %d classes and %d sites: nothing to drop", i, n, s)
		}
	}
}

// BenchmarkLeanRetained reports the heap a DDM run's Attributor keeps per
// test (each test 50 classes and sites), full and Lean: go test -run '^$'
// -bench LeanRetained -benchtime 1x ./alloctrack/pertest.
func BenchmarkLeanRetained(b *testing.B) {
	for _, lean := range []bool{false, true} {
		b.Run(fmt.Sprintf("lean=%v", lean), func(b *testing.B) {
			const tests, classes = 2000, 50
			for range b.N {
				before := heapInUse()
				a := New(Config{Package: "com.example", API: 30, Backend: alloctrack.BackendDDM, Top: 5, Lean: lean})
				a.Event(100, at(0), runStarted(tests))
				for k := range tests {
					feedDDMTest(b, a, 100, k, classes)
				}
				after := heapInUse()
				runtime.KeepAlive(a)
				b.ReportMetric(float64(after-before)/tests, "retained-B/test")
			}
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
