package supervisor

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
	"go.uber.org/zap"
)

// testReport is the report the daemon reads when test k's finished: line
// cycles the tracker (API 30: newest first): LogRunListener's started:
// string, the test's body (classes classes, each from its own site), its
// finished: string.
func testReport(t *testing.T, classes int) *allocreport.Report {
	t.Helper()
	b := allocreport.NewBuilder()
	marker := func(method string) {
		b.Add(40, 1, "Ljava/lang/String;", []allocreport.FrameName{
			{Class: "Landroidx/test/internal/runner/listener/LogRunListener;", Method: method, File: "LogRunListener.java", Line: 51},
			{Class: "Lorg/junit/runner/notification/RunNotifier$3;", Method: "notifyListener", File: "RunNotifier.java", Line: 121}})
	}
	marker("testFinished")
	for j := classes - 1; j >= 0; j-- {
		b.Add(uint32(16*(j+1)), 1, fmt.Sprintf("Lcom/example/C%d;", j), []allocreport.FrameName{
			{Class: "Lcom/example/Work;", Method: fmt.Sprintf("f%d", j), File: "Work.java", Line: 7},
			{Class: "Lcom/example/WorkTest;", Method: "test", File: "WorkTest.java", Line: 20}})
	}
	marker("testStarted")
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The daemon's attributor is lean: fed a run of many tests, it keeps of
// each finished test only its top classes (no site), so that what a
// process's run costs the daemon does not grow with its tests' sites.
func TestDaemonAttributorIsLean(t *testing.T) {
	const tests, classes, top = 40, 30, 5
	a := newAttributor(pertest.Config{Serial: "s", Package: "com.example", API: 30, Backend: alloctrack.BackendDDM, Top: top})
	a.Event(7, time.Time{}, instrument.RunnerEvent{Kind: instrument.RunStarted, Tests: tests})
	for k := range tests {
		name := fmt.Sprintf("test%02d(com.example.WorkTest)", k)
		a.Event(7, time.Time{}, instrument.RunnerEvent{Kind: instrument.TestStarted, Name: name, Class: "com.example.WorkTest", Method: fmt.Sprintf("test%02d", k)})
		a.Event(7, time.Time{}, instrument.RunnerEvent{Kind: instrument.TestFinished, Name: name, Class: "com.example.WorkTest", Method: fmt.Sprintf("test%02d", k)})
		if err := a.Report(7, testReport(t, classes), false); err != nil {
			t.Fatal(err)
		}
	}
	run := a.Snapshot()
	if len(run.Tests) != tests {
		t.Fatalf("%d tests, want %d", len(run.Tests), tests)
	}
	for _, tt := range run.Tests {
		if tt.Allocations != classes || len(tt.TopClasses) != top || tt.TopClasses[0].Class != fmt.Sprintf("com.example.C%d", classes-1) {
			t.Fatalf("%s: %d allocations, top classes %+v; want %d, C%d first", tt.Name, tt.Allocations, tt.TopClasses, classes, classes-1)
		}
		if n, s := len(tt.Tally.Classes), tt.Tally.Sites(); n > top || s > 0 {
			t.Fatalf("%s: its tally keeps %d classes and %d sites, want at most %d classes, no site", tt.Name, n, s, top)
		}
	}
}

// runStartedReport is the first report of a run tracked from its start:
// LogRunListener's run started: string.
func runStartedReport(t *testing.T) *allocreport.Report {
	t.Helper()
	b := allocreport.NewBuilder()
	b.Add(40, 1, "Ljava/lang/String;", []allocreport.FrameName{
		{Class: "Landroidx/test/internal/runner/listener/LogRunListener;", Method: "testRunStarted", File: "LogRunListener.java", Line: 45},
		{Class: "Lorg/junit/runner/notification/RunNotifier$1;", Method: "notifyListener", File: "RunNotifier.java", Line: 70}})
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A long run of one process costs the daemon a bounded number of tests:
// its attributor drops the tests the app has taken, yet the app's page
// shows the last --tests.recent tests with the figures a full attributor
// gives them, and its counters count every test.
func TestDaemonLongRunBounded(t *testing.T) {
	const tests, recent, pid = 3000, 20, 7
	followerOf := func(newAtt func(pertest.Config) attributor) (*testFollower, *appTests) {
		d := NewDaemon(DaemonConfig{Tests: TestsConfig{Recent: recent, Grace: time.Millisecond}}, nil, nil)
		if newAtt != nil {
			d.newAttributor = newAtt
		}
		done := make(chan struct{})
		close(done)
		f := &testFollower{d: d, serial: "s", api: 30, log: zap.NewNop(), opts: followOpts{backend: alloctrack.BackendDDM}, pids: map[int]*pidTests{}, done: done}
		at := newAppTests(recent)
		f.bound(pid, "com.example", at)
		return f, at
	}
	lean, leanApp := followerOf(nil)
	full, fullApp := followerOf(func(cfg pertest.Config) attributor { return pertest.New(cfg) })
	most := 0
	for _, f := range []*testFollower{lean, full} {
		f.event(pid, time.Time{}, instrument.RunnerEvent{Kind: instrument.RunStarted, Tests: tests})
		f.report(pid, runStartedReport(t), false)
	}
	for k := range tests {
		name := fmt.Sprintf("test%04d(com.example.WorkTest)", k)
		for _, f := range []*testFollower{lean, full} {
			f.event(pid, time.Time{}, instrument.RunnerEvent{Kind: instrument.TestStarted, Name: name})
			if k%4 == 3 {
				f.event(pid, time.Time{}, instrument.RunnerEvent{Kind: instrument.TestFailed, Name: name})
			}
			f.event(pid, time.Time{}, instrument.RunnerEvent{Kind: instrument.TestFinished, Name: name})
			f.report(pid, testReport(t, 1+k%7), false)
		}
		// The daemon refreshes every second, after one test or many; the
		// full path's run is built from all its tests, so less often.
		if k%3 == 0 {
			lean.refresh()
		}
		if k%100 == 0 {
			full.refresh()
		}
		lean.mu.Lock()
		most = max(most, len(lean.pids[pid].att.Snapshot().Tests))
		lean.mu.Unlock()
	}
	if most > 2*recent+3 {
		t.Errorf("the daemon's attributor held up to %d tests, want at most %d", most, 2*recent+3)
	}
	for _, f := range []*testFollower{lean, full} {
		f.event(pid, time.Time{}, instrument.RunnerEvent{Kind: instrument.RunFinished, Tests: tests})
		f.mu.Lock()
		f.finishLocked(pid, f.pids[pid])
		f.mu.Unlock()
	}
	l, w := leanApp.snapshot(), fullApp.snapshot()
	if len(l.Recent) != recent || !reflect.DeepEqual(l.Recent, w.Recent) {
		t.Errorf("the page shows %d tests:\n%+v\nwant the full path's %d:\n%+v", len(l.Recent), l.Recent, len(w.Recent), w.Recent)
	}
	if l.Outcomes["passed"]+l.Outcomes["failed"] != tests || !reflect.DeepEqual(l.Outcomes, w.Outcomes) {
		t.Errorf("outcomes %v, want %v (%d tests)", l.Outcomes, w.Outcomes, tests)
	}
	if l.Allocations != w.Allocations || l.Bytes != w.Bytes || l.Allocations == 0 {
		t.Errorf("the app's tests allocated %d, %d B; the full path %d, %d B", l.Allocations, l.Bytes, w.Allocations, w.Bytes)
	}
}
