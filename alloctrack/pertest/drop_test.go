package pertest

import (
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack"

	"github.com/alloctrack/alloctrack/instrument"
)

const dropKeep = 50

// take does what the daemon does after each feed: it reads the run and
// tells the attributor which leading tests it has taken (those ended).
func take(a *Attributor) {
	r := a.Snapshot()
	n := 0
	for n < len(r.Tests) && r.Tests[n].Outcome != Unfinished {
		n++
	}
	a.Taken(r.Dropped + n)
}

// outcomes counts a run's outcomes, those dropped included.
func outcomes(r *Run) map[Outcome]int {
	out := maps.Clone(r.DroppedOutcomes)
	if out == nil {
		out = map[Outcome]int{}
	}
	for _, t := range r.Tests {
		out[t.Outcome]++
	}
	return out
}

// A Lean attributor with Keep drops the tests the caller has taken once
// nothing can change them: fed 5,000 tests whose reports come two tests
// late, each test spanning two reports, it holds a bound number of tests (Keep, or a few more when Keep is
// small), and its run's totals, its outcome counts and its last tests'
// figures are a full attributor's.
func TestLeanDropsTakenTests(t *testing.T) {
	for _, keep := range []int{1, dropKeep} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) { leanDrops(t, keep, 5000) })
	}
}

func leanDrops(t *testing.T, keep, tests int) {
	const lag = 2
	lean, full := newDDM(30), newDDM(30)
	lean.cfg.Lean, lean.cfg.Keep = true, keep
	both := []*Attributor{lean, full}
	for _, a := range both {
		a.Event(100, at(0), runStarted(tests))
		if err := a.Report(100, reportOf(t, 30, mark(mRunStarted)), false); err != nil {
			t.Fatal(err)
		}
	}
	var reports [][]item
	most := 0
	for k := range tests + lag {
		if k < tests {
			if k%10 == 9 {
				for _, a := range both {
					a.Event(100, at(100*k), runnerEv(instrument.TestIgnored, fmt.Sprintf("skip%04d(com.example.WorkTest)", k)))
				}
			}
			reports = append(reports, ddmLines(lean, 100, k, 3))
			ddmLines(full, 100, k, 3)
		} else if k == tests {
			for _, a := range both {
				a.Event(100, at(100*k), runFinished(tests))
			}
		}
		// A report holds the end of test k-lag and the start of the
		// next: a test's marker stays open across two reports.
		var items []item
		if k >= lag {
			r := reports[k-lag]
			items = r[len(r)/2:]
		}
		if k+1 >= lag && k+1-lag < tests {
			r := reports[k+1-lag]
			items = script(items, r[:len(r)/2])
		}
		for _, a := range both {
			if err := a.Report(100, reportOf(t, 30, items), false); err != nil {
				t.Fatal(err)
			}
		}
		take(lean)
		most = max(most, len(lean.run.Tests))
	}
	if bound := max(2*keep, lag+2) + 1; most > bound {
		t.Errorf("the lean attributor held up to %d tests, want at most %d", most, bound)
	}
	compareDropped(t, lean.Finish(), full.Finish())
}

// compareDropped checks a lean run that dropped tests against the full
// one: the same totals and outcome counts, the same figures of the tests
// it holds.
func compareDropped(t *testing.T, lean, full *Run) {
	t.Helper()
	checkSum(t, lean)
	if lean.Dropped == 0 || lean.Dropped+len(lean.Tests) != len(full.Tests) {
		t.Fatalf("lean: %d dropped + %d held, full %d", lean.Dropped, len(lean.Tests), len(full.Tests))
	}
	if lean.Total.Allocations != full.Total.Allocations || lean.Total.Bytes != full.Total.Bytes ||
		!reflect.DeepEqual(lean.Between, full.Between) {
		t.Errorf("lean total %+v between %+v; full %+v, %+v", lean.Total, lean.Between, full.Total, full.Between)
	}
	if l, f := outcomes(lean), outcomes(full); !reflect.DeepEqual(l, f) {
		t.Errorf("outcomes: lean %v, full %v", l, f)
	}
	for i, l := range lean.Tests {
		f := full.Tests[lean.Dropped+i]
		if l.Name != f.Name || l.Allocations != f.Allocations || l.Bytes != f.Bytes || l.SampledBytes != f.SampledBytes ||
			l.Outcome != f.Outcome || l.Partial != f.Partial || !reflect.DeepEqual(l.TopClasses, f.TopClasses) {
			t.Errorf("test %d: lean %s %s %+v, full %s %s %+v", lean.Dropped+i, l.Name, l.Outcome, l.Figures, f.Name, f.Outcome, f.Figures)
		}
	}
}

// Through heapprofd, a test goes once a dump after its end is placed:
// here each dump spans the end of a test and two more, and waits for the
// lines of the last.
func TestLeanDropsTakenTestsHeapprofd(t *testing.T) {
	for _, keep := range []int{1, dropKeep} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) { leanDropsHeapprofd(t, keep, 2000) })
	}
}

func leanDropsHeapprofd(t *testing.T, keep, tests int) {
	lean, full := newHeapprofd(), newHeapprofd()
	lean.cfg.Lean, lean.cfg.Keep = true, keep
	most := 0
	for k := range tests {
		for _, a := range []*Attributor{lean, full} {
			name := fmt.Sprintf("test%04d(com.example.WorkTest)", k)
			a.Event(7, at(1000*k+100), runnerEv(instrument.TestStarted, name))
			a.Event(7, at(1000*k+900), runnerEv(instrument.TestFinished, name))
			if k%2 == 1 {
				continue
			}
			// Placed once test k+1's lines are read: it holds the
			// end of test k-1.
			if err := a.Dump(7, dump(uint64(k%5+1), 3, 1), at(1000*k-500), at(1000*k+1500)); err != nil {
				t.Fatal(err)
			}
		}
		take(lean)
		most = max(most, len(lean.run.Tests))
	}
	if bound := max(2*keep, 3) + 1; most > bound {
		t.Errorf("the lean attributor held up to %d tests, want at most %d", most, bound)
	}
	compareDropped(t, lean.Finish(), full.Finish())
	if n := len(lean.dumped); n > len(lean.run.Tests) {
		t.Errorf("%d heapprofd tallies kept for %d tests", n, len(lean.run.Tests))
	}
}

// BenchmarkLeanBounded reports the heap a DDM run's Lean attributor keeps
// with Keep 50 (the daemon's default), taken as the daemon takes tests,
// after 1,000 and 10,000 tests of 50 classes and sites each: flat in the
// number of tests. go test -run '^$' -bench LeanBounded -benchtime 1x
// ./alloctrack/pertest
func BenchmarkLeanBounded(b *testing.B) {
	for _, tests := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("tests=%d", tests), func(b *testing.B) {
			for range b.N {
				before := heapInUse()
				a := New(Config{Package: "com.example", API: 30, Backend: alloctrack.BackendDDM, Top: 5, Lean: true, Keep: dropKeep})
				a.Event(100, at(0), runStarted(tests))
				if err := a.Report(100, reportOf(b, 30, mark(mRunStarted)), false); err != nil {
					b.Fatal(err)
				}
				for k := range tests {
					feedDDMTest(b, a, 100, k, 50)
					take(a)
				}
				after := heapInUse()
				runtime.KeepAlive(a)
				b.ReportMetric(float64(after-before)/1024, "retained-KiB")
				b.ReportMetric(float64(len(a.run.Tests)), "tests-held")
			}
		})
	}
}
