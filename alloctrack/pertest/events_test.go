package pertest

import (
	"testing"

	"github.com/alloctrack/alloctrack/instrument"
)

// status builds am's status block for a test.
func status(kind instrument.Kind, outcome instrument.Outcome, name string) instrument.Event {
	class, method, _ := instrument.SplitName(name)
	return instrument.Event{Kind: kind, Outcome: outcome, Class: class, Method: method}
}

// A started: line with no finished: before it (lines lost): the run says
// so; the earlier test's figures stay exact (its markers are in the
// report) and its outcome unknown; the tests after it align.
func TestLinesLost(t *testing.T) {
	a := newDDM(29)
	a.Event(1, at(0), runnerEv(instrument.TestStarted, nameA))
	// finished: A and started: B lost; finished: B read.
	a.Event(1, at(200), runnerEv(instrument.TestFinished, nameB))
	a.Event(1, at(300), runnerEv(instrument.TestStarted, nameC))
	a.Event(1, at(400), runnerEv(instrument.TestFinished, nameC))
	items := script(mark(mRunStarted), mark(mStarted), app(2, 1, 1, "Lx/A;", "a"), mark(mFinished),
		mark(mStarted), app(3, 1, 1, "Lx/B;", "b"), mark(mFinished), mark(mStarted), app(4, 1, 1, "Lx/C;", "c"), mark(mFinished))
	_ = a.Report(1, reportOf(t, 29, items), false)
	r := a.Finish()
	wantFigures(t, "A", test(t, r, nameA).Figures, 2, 2)
	wantFigures(t, "B", test(t, r, nameB).Figures, 3, 3)
	wantFigures(t, "C", test(t, r, nameC).Figures, 4, 4)
	if o := test(t, r, nameA).Outcome; o != Unfinished {
		t.Errorf("A's outcome %s", o)
	}
	if !hasProblem(r, "no finished: line for it") || !hasProblem(r, "finished: "+nameB+" came with no started:") {
		t.Errorf("problems %q", r.Problems)
	}
	checkSum(t, r)
}

// A test started twice is kept twice, and the run says so.
func TestStartedTwice(t *testing.T) {
	a := newDDM(19)
	feedTests(a, 1, 0, nameA, nameA)
	items := script(mark(mStarted), app(1, 5, 1, "Lx/A;", "a"), mark(mFinished), mark(mStarted), app(2, 5, 1, "Lx/A;", "a"), mark(mFinished))
	_ = a.Report(1, reportOf(t, 19, items), false)
	r := a.Finish()
	if len(r.Tests) != 2 || r.Tests[0].Allocations != 1 || r.Tests[1].Allocations != 2 {
		t.Errorf("tests %+v", r.Tests)
	}
	if !hasProblem(r, "started twice") {
		t.Errorf("problems %q", r.Problems)
	}
	checkSum(t, r)
}

// Two processes (Orchestrator, or two runs): markers of each pid are
// matched with the lines of the same pid; a run started while another is
// going is a problem.
func TestTwoProcesses(t *testing.T) {
	a := newDDM(29)
	a.Event(10, at(0), runStarted(1))
	a.Event(10, at(1), runnerEv(instrument.TestStarted, nameA))
	a.Event(20, at(2), runStarted(1))
	a.Event(20, at(3), runnerEv(instrument.TestStarted, nameB))
	a.Event(20, at(4), runnerEv(instrument.TestFinished, nameB))
	a.Event(10, at(5), runnerEv(instrument.TestFinished, nameA))
	_ = a.Report(20, reportOf(t, 29, script(mark(mRunStarted), mark(mStarted), app(7, 1, 1, "Lx/B;", "b"), mark(mFinished))), false)
	_ = a.Report(10, reportOf(t, 29, script(mark(mRunStarted), mark(mStarted), app(2, 1, 1, "Lx/A;", "a"), mark(mFinished))), false)
	r := a.Finish()
	wantFigures(t, "A", test(t, r, nameA).Figures, 2, 2)
	wantFigures(t, "B", test(t, r, nameB).Figures, 7, 7)
	if test(t, r, nameB).PID != 20 || !hasProblem(r, "pid 20 started a run while pid 10's run was going") {
		t.Errorf("B pid %d, problems %q", test(t, r, nameB).PID, r.Problems)
	}
	checkSum(t, r)
}

// Lines of a process never tracked: its tests are partial, named so.
func TestUntrackedProcess(t *testing.T) {
	a := newDDM(29)
	feedTests(a, 10, 0, nameA)
	feedTests(a, 11, 500, nameB)
	_ = a.Report(10, reportOf(t, 29, script(mark(mStarted), app(1, 1, 1, "Lx/A;", "a"), mark(mFinished))), false)
	r := a.Finish()
	if tb := test(t, r, nameB); !hasNote(tb, "its process sent no allocation data") {
		t.Errorf("B %+v", tb)
	}
	if ta := test(t, r, nameA); ta.Partial {
		t.Errorf("A %+v", ta)
	}
	if !hasProblem(r, "pid 11 logged 1 tests but sent no allocation data") {
		t.Errorf("problems %q", r.Problems)
	}
}

// Without logcat, am's statuses list the tests and their outcomes; the
// markers are matched to the START statuses in order; ignored tests have
// no markers.
func TestStatusesOnly(t *testing.T) {
	a := newDDM(29)
	a.Status(status(instrument.Started, 0, nameA))
	a.Status(status(instrument.Ended, instrument.Passed, nameA))
	a.Status(status(instrument.Started, 0, nameB))
	a.Status(status(instrument.Ended, instrument.Ignored, nameB))
	a.Status(status(instrument.Started, 0, nameC))
	fail := status(instrument.Ended, instrument.Failed, nameC)
	fail.Stack = "java.lang.AssertionError\n\tat x\n"
	a.Status(fail)
	a.Result(instrument.Result{HasCode: true, Code: -1})
	items := script(mark(mRunStarted), mark(mStarted), app(2, 1, 1, "Lx/A;", "a"), mark(mFinished),
		mark("testIgnored"), mark(mStarted), app(5, 1, 1, "Lx/C;", "c"), mark(mFailure), mark(mFinished))
	_ = a.Report(1, reportOf(t, 29, items), false)
	r := a.Finish()
	wantFigures(t, "A", test(t, r, nameA).Figures, 2, 2)
	wantFigures(t, "B", test(t, r, nameB).Figures, 0, 0)
	tc := test(t, r, nameC)
	wantFigures(t, "C", tc.Figures, 5, 5)
	if test(t, r, nameB).Outcome != Ignored || tc.Outcome != Failed || tc.Failure != fail.Stack || !r.Complete {
		t.Errorf("outcomes B %s C %s %q, complete %v", test(t, r, nameB).Outcome, tc.Outcome, tc.Failure, r.Complete)
	}
	checkSum(t, r)
}

// Statuses and lines of the same tests make one test each, in either
// order; am's outcome wins.
func TestStatusesAndLines(t *testing.T) {
	a := newDDM(29)
	a.Status(status(instrument.Started, 0, nameA)) // read before the line
	a.Event(1, at(0), runnerEv(instrument.TestStarted, nameA))
	a.Event(1, at(10), runnerEv(instrument.TestFailed, nameA))
	a.Event(1, at(20), runnerEv(instrument.TestFinished, nameA))
	a.Status(status(instrument.Ended, instrument.Errored, nameA))
	a.Event(1, at(30), runnerEv(instrument.TestIgnored, nameB))
	a.Status(status(instrument.Started, 0, nameB))
	a.Status(status(instrument.Ended, instrument.Ignored, nameB))
	r := a.Finish()
	if len(r.Tests) != 2 || r.Tests[0].Outcome != Errored || r.Tests[1].Outcome != Ignored || r.Tests[0].DurationSeconds != 0.02 {
		t.Errorf("tests %+v", r.Tests)
	}
	if len(r.Problems) != 2 || !hasProblem(r, "the run did not finish") {
		t.Errorf("problems %q", r.Problems)
	}
}

// A crash: the running test is Crashed with the runner's text, keeps
// what was collected, and the run says the process crashed.
func TestCrash(t *testing.T) {
	a := newDDM(29)
	a.Event(1, at(0), runnerEv(instrument.TestStarted, nameA))
	a.Status(status(instrument.Started, 0, nameA))
	_ = a.Report(1, reportOf(t, 29, script(mark(mRunStarted), mark(mStarted), app(3, 2, 1, "Lx/A;", "a"))), false)
	crash := status(instrument.Ended, instrument.Failed, nameA)
	crash.Crashed = true
	crash.Values = map[string]string{"stream": "Process crashed while executing " + nameA}
	a.Status(crash)
	a.Gone(1)
	a.Result(instrument.Result{HasCode: true, Values: map[string]string{"shortMsg": "Process crashed."}})
	r := a.Finish()
	ta := test(t, r, nameA)
	wantFigures(t, "A", ta.Figures, 3, 6)
	if ta.Outcome != Crashed || ta.Failure == "" || !hasNote(ta, "its process ended before it finished") || !hasProblem(r, "crashed") {
		t.Errorf("A %+v, problems %q", ta, r.Problems)
	}
	checkSum(t, r)
}

// am's end of a crashed run ends the test that was running as Crashed,
// even with no crash status read.
func TestCrashResultOnly(t *testing.T) {
	a := newDDM(29)
	a.Status(status(instrument.Started, 0, nameA))
	a.Result(instrument.Result{HasCode: true, Values: map[string]string{"shortMsg": "Process crashed."}})
	r := a.Finish()
	if ta := test(t, r, nameA); ta.Outcome != Crashed || !r.Complete {
		t.Errorf("A %+v complete %v", ta, r.Complete)
	}
}

// Names with any characters are split at their last "(".
func TestOddNames(t *testing.T) {
	a := newDDM(19)
	odd := "test[0: f(1) ü \"x\"](pkg.Cls$Inner)"
	feedTests(a, 1, 0, odd, "initializationError(pkg.Bad)")
	a.Event(1, at(900), runnerEv(instrument.TestFailed, "pkg.Other"))
	a.Event(1, at(901), instrument.RunnerEvent{Kind: instrument.Exception, Name: "pkg.Other", Trace: "java.lang.RuntimeException: boom"})
	r := a.Finish()
	to := test(t, r, odd)
	if to.Class != "pkg.Cls$Inner" || to.Method != "test[0: f(1) ü \"x\"]" {
		t.Errorf("split %q %q", to.Class, to.Method)
	}
	if tc := test(t, r, "pkg.Other"); tc.Class != "pkg.Other" || tc.Outcome != Failed || tc.Failure != "java.lang.RuntimeException: boom" {
		t.Errorf("class-level failure %+v", tc)
	}
}

// A snapshot shows open tests as Unfinished and does not end the run.
func TestSnapshot(t *testing.T) {
	a := newDDM(29)
	a.Event(1, at(0), runnerEv(instrument.TestStarted, nameA))
	_ = a.Report(1, reportOf(t, 29, script(mark(mStarted), app(3, 2, 1, "Lx/A;", "a"))), false)
	s := a.Snapshot()
	if ta := test(t, s, nameA); ta.Outcome != Unfinished || ta.Allocations != 3 || ta.Partial {
		t.Errorf("snapshot A %+v", ta)
	}
	a.Event(1, at(50), runnerEv(instrument.TestFinished, nameA))
	_ = a.Report(1, reportOf(t, 29, script(app(1, 2, 1, "Lx/A;", "a"), mark(mFinished))), false)
	r := a.Finish()
	if ta := test(t, r, nameA); ta.Outcome != Passed || ta.Allocations != 4 || test(t, s, nameA).Allocations != 3 {
		t.Errorf("finished A %+v", ta)
	}
	if err := a.Report(1, reportOf(t, 29, nil), false); err == nil {
		t.Error("a report after Finish was taken")
	}
	if err := New(Config{}).Report(1, nil, false); err == nil {
		t.Error("a nil report was taken")
	}
}

// Android Test Orchestrator: one process lists the tests (logged and
// marked, not run), then one process per test. The listing makes no
// tests; each test is its own process's, exact.
func TestOrchestrator(t *testing.T) {
	for _, reportFirst := range []bool{false, true} {
		a := New(Config{Package: "com.example", API: 29, Backend: "ddm",
			Instrumentation: "androidx.test.orchestrator/androidx.test.orchestrator.AndroidTestOrchestrator"})
		list := script(mark(mRunStarted), mark(mStarted), app(1, 1, 1, "Lx/L;", "l"), mark(mFinished),
			mark(mStarted), mark(mFinished), mark(mRunFinished))
		if reportFirst {
			_ = a.Report(50, reportOf(t, 29, list), false)
		}
		a.Event(50, at(0), runStarted(2))
		feedTests(a, 50, 1, nameA, nameB)
		a.Event(50, at(300), runFinished(2))
		if !reportFirst {
			_ = a.Report(50, reportOf(t, 29, list), false)
		}
		a.Gone(50)
		for k, name := range []string{nameA, nameB} {
			pid := 51 + k
			a.Event(pid, at(1000*(k+1)), runStarted(1))
			feedTests(a, pid, 1000*(k+1)+10, name)
			a.Event(pid, at(1000*(k+1)+500), runFinished(1))
			a.Status(status(instrument.Started, 0, name))
			a.Status(status(instrument.Ended, instrument.Passed, name))
			_ = a.Report(pid, reportOf(t, 29, script(mark(mRunStarted), mark(mStarted), app(3+k, 2, 1, "Lx/T;", "t"), mark(mFinished), mark(mRunFinished))), false)
			a.Gone(pid)
		}
		a.Result(instrument.Result{HasCode: true, Code: -1})
		r := a.Finish()
		if len(r.Tests) != 2 || len(r.Problems) != 0 {
			t.Fatalf("report first %v: tests %v, problems %q", reportFirst, names(r), r.Problems)
		}
		wantFigures(t, "A", test(t, r, nameA).Figures, 3, 6)
		wantFigures(t, "B", test(t, r, nameB).Figures, 4, 8)
		if ta := test(t, r, nameA); ta.PID != 51 || ta.Partial || ta.Outcome != Passed {
			t.Errorf("A %+v", ta)
		}
		checkSum(t, r)
	}
}

// Orchestrator without logcat: the listing process is told by its many
// tests, and the statuses go to the processes that ran them.
func TestOrchestratorStatusesOnly(t *testing.T) {
	a := New(Config{Package: "com.example", API: 29, Backend: "ddm", Orchestrator: true})
	_ = a.Report(50, reportOf(t, 29, script(mark(mRunStarted), mark(mStarted), mark(mFinished), mark(mStarted), mark(mFinished), mark(mRunFinished))), false)
	for k, name := range []string{nameA, nameB} {
		a.Status(status(instrument.Started, 0, name))
		a.Status(status(instrument.Ended, instrument.Passed, name))
		_ = a.Report(51+k, reportOf(t, 29, script(mark(mRunStarted), mark(mStarted), app(3+k, 2, 1, "Lx/T;", "t"), mark(mFinished))), false)
	}
	a.Result(instrument.Result{HasCode: true, Code: -1})
	r := a.Finish()
	wantFigures(t, "A", test(t, r, nameA).Figures, 3, 6)
	wantFigures(t, "B", test(t, r, nameB).Figures, 4, 8)
	if len(r.Tests) != 2 {
		t.Errorf("tests %v problems %q", names(r), r.Problems)
	}
	checkSum(t, r)
}

// Both lines of a test lost from logcat (a full buffer), am's statuses
// read: the markers of the run's one process are matched to am's START
// statuses, which lose nothing, so the tests after the gap stay exact
// and the lost test gets its own figures and its pid.
func TestLinesLostStatusesName(t *testing.T) {
	a := newDDM(29)
	a.Event(1, at(0), runStarted(3))
	for _, n := range []string{nameA, nameB, nameC} {
		a.Status(status(instrument.Started, 0, n))
		if n != nameB { // started: B and finished: B lost
			a.Event(1, at(0), runnerEv(instrument.TestStarted, n))
			a.Event(1, at(0), runnerEv(instrument.TestFinished, n))
		}
		a.Status(status(instrument.Ended, instrument.Passed, n))
	}
	a.Result(instrument.Result{HasCode: true, Code: -1})
	items := script(mark(mRunStarted), mark(mStarted), app(2, 1, 1, "Lx/A;", "a"), mark(mFinished),
		mark(mStarted), app(3, 1, 1, "Lx/B;", "b"), mark(mFinished), mark(mStarted), app(4, 1, 1, "Lx/C;", "c"), mark(mFinished))
	_ = a.Report(1, reportOf(t, 29, items), false)
	r := a.Finish()
	if len(r.Tests) != 3 {
		t.Fatalf("tests %v, problems %q", names(r), r.Problems)
	}
	wantFigures(t, "A", test(t, r, nameA).Figures, 2, 2)
	wantFigures(t, "B", test(t, r, nameB).Figures, 3, 3)
	wantFigures(t, "C", test(t, r, nameC).Figures, 4, 4)
	if b := test(t, r, nameB); b.PID != 1 || b.Partial || b.Outcome != Passed {
		t.Errorf("B: pid %d, partial %v %q, %s", b.PID, b.Partial, b.Notes, b.Outcome)
	}
	checkSum(t, r)
}
