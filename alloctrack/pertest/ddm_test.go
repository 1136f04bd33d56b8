package pertest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
)

const (
	nameA = "testA(com.example.WorkTest)"
	nameB = "testB(com.example.WorkTest)"
	nameC = "testC(com.example.WorkTest)"
)

// A two-test run in one report: each test gets exactly the app records
// between its markers (any thread), never the runner's own; the rest is
// between tests; the total is everything.
func TestDDMExactPerTest(t *testing.T) {
	startup := app(3, 24, 2, "Lcom/example/App;", "onCreate")
	bodyA := script(app(5, 100, instrThread, "Lcom/example/Big;", "a"), app(2, 7, 9, "Lcom/example/Small;", "bg"),
		[]item{{own: true, size: 32, thread: instrThread, class: "Landroid/os/Bundle;"}})
	gap := app(1, 1000, 3, "Lcom/example/Idle;", "idle")
	bodyB := app(4, 10, instrThread, "Lcom/example/Small;", "b")
	items := script(mark(mRunStarted), startup, mark(mStarted), bodyA, mark(mFinished), gap,
		mark(mStarted), bodyB, mark(mFailure), mark(mFinished), mark(mRunFinished))
	for _, api := range []int{19, 23, 29, 30} {
		t.Run("api"+strconv.Itoa(api), func(t *testing.T) {
			a := newDDM(api)
			a.Event(100, at(0), runStarted(2))
			feedTests(a, 100, 10, nameA, nameB)
			a.Event(100, at(500), runFinished(2))
			if err := a.Report(100, reportOf(t, api, items), false); err != nil {
				t.Fatal(err)
			}
			r := a.Finish()
			wantFigures(t, "A", test(t, r, nameA).Figures, 7, 514)
			wantFigures(t, "B", test(t, r, nameB).Figures, 4, 40)
			n, b := all(items)
			wantFigures(t, "total", r.Total, n, b)
			wantFigures(t, "between", r.Between, n-11, b-554)
			checkSum(t, r)
			for _, tt := range r.Tests {
				if tt.Partial || tt.Outcome != Passed || tt.BoundaryErrorSeconds != 0 {
					t.Errorf("%s: partial %v %v, outcome %s", tt.Name, tt.Partial, tt.Notes, tt.Outcome)
				}
				for _, c := range tt.TopClasses {
					if c.Class == "android.os.Bundle" || c.Class == "java.lang.StringBuilder" {
						t.Errorf("%s counts the runner's %s", tt.Name, c.Class)
					}
				}
			}
			if top := test(t, r, nameA).TopClasses; len(top) != 2 || top[0].Class != "com.example.Big" || top[0].Bytes != 500 {
				t.Errorf("A's top classes %+v", top)
			}
			if s := test(t, r, nameA).TopSites; len(s) == 0 || !strings.HasPrefix(s[0].AppFrame, "com.example.Work.a(") {
				t.Errorf("A's top sites %+v", s)
			}
			if !r.Complete || len(r.Problems) != 0 || !strings.HasPrefix(r.Boundary, "DDM") {
				t.Errorf("complete %v problems %q boundary %q", r.Complete, r.Problems, r.Boundary)
			}
		})
	}
}

// The old android.support.test runner's listener marks the same way.
func TestDDMSupportRunner(t *testing.T) {
	items := script(mark(mStarted), app(2, 8, 1, "Lx/Y;", "f"), mark(mFinished))
	for i := range items {
		if items[i].marker != "" && items[i].class != "[C" {
			items[i].class = "Ljava/lang/StringBuilder;"
		}
	}
	a := newDDM(19)
	feedTests(a, 7, 0, nameA)
	rep := reportOfSupport(t, items)
	if err := a.Report(7, rep, false); err != nil {
		t.Fatal(err)
	}
	r := a.Finish()
	wantFigures(t, "A", test(t, r, nameA).Figures, 2, 16)
	checkSum(t, r)
}

// A test open when a report ends crossed a tracker cycle: its figures add
// both reports' parts, and it is partial; the test after it, whole in
// the second report, is exact.
func TestDDMCrossedCycle(t *testing.T) {
	for _, api := range []int{19, 29} {
		a := newDDM(api)
		feedTests(a, 5, 0, nameA, nameB)
		r1 := script(mark(mRunStarted), mark(mStarted), app(3, 10, 1, "Lx/A;", "a"))
		r2 := script(app(2, 10, 1, "Lx/A;", "a"), mark(mFinished), mark(mStarted), app(1, 99, 1, "Lx/B;", "b"), mark(mFinished))
		if err := a.Report(5, reportOf(t, api, r1), false); err != nil {
			t.Fatal(err)
		}
		if err := a.Report(5, reportOf(t, api, r2), false); err != nil {
			t.Fatal(err)
		}
		r := a.Finish()
		ta, tb := test(t, r, nameA), test(t, r, nameB)
		wantFigures(t, "A", ta.Figures, 5, 50)
		wantFigures(t, "B", tb.Figures, 1, 99)
		if !ta.Partial || !hasNote(ta, "crossed a tracker cycle") || tb.Partial {
			t.Errorf("api %d: A partial %v %q; B partial %v %q", api, ta.Partial, ta.Notes, tb.Partial, tb.Notes)
		}
		checkSum(t, r)
	}
}

// A cycle that falls between tests (the runner's delay_msec) leaves every
// test exact.
func TestDDMCycleBetweenTests(t *testing.T) {
	a := newDDM(29)
	feedTests(a, 5, 0, nameA, nameB)
	r1 := script(mark(mRunStarted), mark(mStarted), app(3, 10, 1, "Lx/A;", "a"), mark(mFinished))
	r2 := script(app(1, 5, 4, "Lx/G;", "gap"), mark(mStarted), app(1, 99, 1, "Lx/B;", "b"), mark(mFinished))
	_ = a.Report(5, reportOf(t, 29, r1), false)
	_ = a.Report(5, reportOf(t, 29, r2), false)
	r := a.Finish()
	for _, tt := range r.Tests {
		if tt.Partial {
			t.Errorf("%s partial: %q", tt.Name, tt.Notes)
		}
	}
	wantFigures(t, "A", test(t, r, nameA).Figures, 3, 30)
	checkSum(t, r)
}

// Tracking that began during the second of three tests: the first ran
// before it (nothing counted), the second began before it (what was seen
// counted), the third is exact. The missed count is events - markers.
func TestDDMLateTracking(t *testing.T) {
	for _, api := range []int{19, 29} {
		a := newDDM(api)
		a.Event(9, at(0), runStarted(3))
		feedTests(a, 9, 10, nameA, nameB, nameC)
		a.Event(9, at(400), runFinished(3))
		items := script(app(4, 3, 1, "Lx/B;", "b"), mark(mFinished), app(1, 1, 2, "Lx/G;", "g"),
			mark(mStarted), app(2, 50, 1, "Lx/C;", "c"), mark(mFinished), mark(mRunFinished))
		_ = a.Report(9, reportOf(t, api, items), false)
		r := a.Finish()
		// While the run goes on, lines read after the latest report are
		// not taken for missed markers.
		live := newDDM(api)
		live.Event(9, at(0), runStarted(3))
		feedTests(live, 9, 10, nameA, nameB)
		_ = live.Report(9, reportOf(t, api, items[:6]), false)
		feedTests(live, 9, 300, nameC)
		if s := live.Snapshot(); test(t, s, nameB).Allocations != 4 || test(t, s, nameC).Partial {
			t.Errorf("api %d snapshot: B %+v, C %+v", api, test(t, s, nameB), test(t, s, nameC))
		}
		ta, tb, tc := test(t, r, nameA), test(t, r, nameB), test(t, r, nameC)
		wantFigures(t, "A", ta.Figures, 0, 0)
		wantFigures(t, "B", tb.Figures, 4, 12)
		wantFigures(t, "C", tc.Figures, 2, 100)
		if !hasNote(ta, "ran before tracking") || !hasNote(tb, "began before tracking") || tc.Partial {
			t.Errorf("api %d notes: A %q, B %q, C %q", api, ta.Notes, tb.Notes, tc.Notes)
		}
		checkSum(t, r)
	}
}

// An overflowed report lost its oldest records, with the start marker of
// the test it was in: the test is partial, the ones after it align.
func TestDDMOverflowMissedStart(t *testing.T) {
	a := newDDM(29)
	feedTests(a, 3, 0, nameA, nameB, nameC)
	r1 := script(mark(mRunStarted), mark(mStarted), app(1, 1, 1, "Lx/A;", "a"), mark(mFinished))
	// Lost: B's start marker and its first records.
	r2 := script(app(3, 2, 1, "Lx/B;", "b"), mark(mFinished), mark(mStarted), app(1, 7, 1, "Lx/C;", "c"), mark(mFinished))
	_ = a.Report(3, reportOf(t, 29, r1), false)
	_ = a.Report(3, reportOf(t, 29, r2), true)
	r := a.Finish()
	ta, tb, tc := test(t, r, nameA), test(t, r, nameB), test(t, r, nameC)
	wantFigures(t, "A", ta.Figures, 1, 1)
	wantFigures(t, "B", tb.Figures, 0, 0)
	wantFigures(t, "C", tc.Figures, 1, 7)
	if ta.Partial || !hasNote(tb, "its start marker was not seen") || !hasNote(tb, "a report it spans overflowed") || !hasNote(tc, "a report it spans overflowed") {
		t.Errorf("notes: A %q, B %q, C %q", ta.Notes, tb.Notes, tc.Notes)
	}
	if !hasProblem(r, "overflowed") {
		t.Errorf("problems %q", r.Problems)
	}
	checkSum(t, r)
}

// A process gone before its test's finished marker was reported: the
// test keeps what was collected and is partial; when the finished: line
// was read, the note says to pass delay_msec.
func TestDDMProcessGone(t *testing.T) {
	for _, finished := range []bool{false, true} {
		a := newDDM(29)
		a.Event(4, at(0), runnerEv(instrument.TestStarted, nameA))
		if finished {
			a.Event(4, at(90), runnerEv(instrument.TestFinished, nameA))
		}
		_ = a.Report(4, reportOf(t, 29, script(mark(mRunStarted), mark(mStarted), app(6, 4, 1, "Lx/A;", "a"))), false)
		a.Gone(4)
		r := a.Finish()
		ta := test(t, r, nameA)
		wantFigures(t, "A", ta.Figures, 6, 24)
		want := "its process ended before it finished"
		if finished {
			want = "the process was stopped before its last report"
		}
		if !hasNote(ta, want) {
			t.Errorf("finished %v: notes %q", finished, ta.Notes)
		}
		checkSum(t, r)
	}
}

// No marker anywhere (a runner that logs differently): no per-test
// figures, said in Problems; nothing is lost.
func TestDDMNoMarkers(t *testing.T) {
	a := newDDM(23)
	feedTests(a, 2, 0, nameA, nameB)
	items := app(10, 3, 1, "Lx/A;", "a")
	_ = a.Report(2, reportOf(t, 23, items), false)
	r := a.Finish()
	if !hasProblem(r, "no per-test figures") {
		t.Errorf("problems %q", r.Problems)
	}
	wantFigures(t, "between", r.Between, 10, 30)
	if ta := test(t, r, nameA); !ta.Partial || !hasNote(ta, "no per-test figures") {
		t.Errorf("A: %+v", ta)
	}
	checkSum(t, r)
}

// reportOfSupport builds an API 19 report whose listener frames are the
// android.support.test runner's.
func reportOfSupport(t *testing.T, items []item) *allocreport.Report {
	t.Helper()
	r := reportOf(t, 19, items)
	for i, c := range r.RawClasses {
		if c == lrl {
			r.RawClasses[i] = lrlSupport
			r.Classes[i] = "android.support.test.internal.runner.listener.LogRunListener"
		}
	}
	return r
}

// A finished marker missed (a stack too shallow to show the listener for
// it): the next start marker, after the test's own records on the
// instrumentation thread, still opens the next test.
func TestDDMMissedFinishMarker(t *testing.T) {
	a := newDDM(19)
	feedTests(a, 1, 0, nameA, nameB)
	items := script(mark(mRunStarted), mark(mStarted), app(2, 1, instrThread, "Lx/A;", "a"),
		mark(mStarted), app(3, 1, instrThread, "Lx/B;", "b"), mark(mFinished))
	_ = a.Report(1, reportOf(t, 19, items), false)
	r := a.Finish()
	ta, tb := test(t, r, nameA), test(t, r, nameB)
	wantFigures(t, "A", ta.Figures, 2, 2)
	wantFigures(t, "B", tb.Figures, 3, 3)
	if !hasNote(ta, "its finished marker was not seen") || tb.Partial {
		t.Errorf("A %q, B %q", ta.Notes, tb.Notes)
	}
	checkSum(t, r)
}

// A stack depth that cuts the listener's frame off its deeper records
// (StringBuilder growing its array): the cut record does not end the
// marker group, so tests stay matched; it counts as the test's (the
// residual error docs/test-runs.md states).
func TestDDMShallowStacks(t *testing.T) {
	a := newDDM(29)
	feedTests(a, 1, 0, nameA, nameB)
	items := script(mark(mRunStarted), mark(mStarted), app(2, 1, instrThread, "Lx/A;", "a"), mark(mFinished),
		mark(mStarted), app(3, 1, instrThread, "Lx/B;", "b"), mark(mFinished))
	_ = a.Report(1, reportCut(t, 29, items, 3), false)
	r := a.Finish()
	ta, tb := test(t, r, nameA), test(t, r, nameB)
	wantFigures(t, "A", ta.Figures, 3, 58)
	wantFigures(t, "B", tb.Figures, 4, 59)
	if ta.Partial || tb.Partial || len(r.Problems) != 1 {
		t.Errorf("A %q B %q problems %q", ta.Notes, tb.Notes, r.Problems)
	}
	checkSum(t, r)
}
