package supervisor

import (
	"fmt"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
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
