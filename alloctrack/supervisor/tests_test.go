package supervisor_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
	"github.com/alloctrack/alloctrack/internal/source"
	"github.com/alloctrack/alloctrack/sim"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// fakeLogcat is an adb server whose logcat streams are pipes the test
// writes lines into; it records each call's since.
type fakeLogcat struct {
	source.ADB
	mu     sync.Mutex
	since  []string
	api    []int
	stream chan *io.PipeWriter
}

func (f *fakeLogcat) Logcat(ctx context.Context, serial string, api int, since string) (io.ReadCloser, error) {
	r, w := io.Pipe()
	f.mu.Lock()
	f.since, f.api = append(f.since, since), append(f.api, api)
	f.mu.Unlock()
	context.AfterFunc(ctx, func() { w.CloseWithError(ctx.Err()) })
	f.stream <- w
	return r, nil
}

func (f *fakeLogcat) calls() ([]string, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.since), slices.Clone(f.api)
}

var _ supervisor.LogcatSource = (*fakeLogcat)(nil)

// logLine is an entry in logcat's threadtime layout at second s of a
// fixed minute.
func logLine(s float64, pid int, prio byte, msg string) string {
	return fmt.Sprintf("11-27 08:00:%06.3f %5d %5d %c TestRunner: %s\n", s, pid, pid+1, prio, msg)
}

func writeLines(t *testing.T, w io.Writer, lines ...string) {
	t.Helper()
	if _, err := io.WriteString(w, strings.Join(lines, "")); err != nil {
		t.Fatal(err)
	}
}

// fakeAttributor splits reports by the runner's events alone (the
// pertest package does it by the listener's records): each report counts
// into the test open when it is fed.
type fakeAttributor struct {
	cfg  pertest.Config
	run  pertest.Run
	open int
}

func newFakeAttributor(cfg pertest.Config) supervisor.Attributor {
	return &fakeAttributor{cfg: cfg, run: pertest.Run{Package: cfg.Package}, open: -1}
}

func (a *fakeAttributor) Event(pid int, at time.Time, ev instrument.RunnerEvent) {
	switch ev.Kind {
	case instrument.TestStarted:
		a.run.Tests = append(a.run.Tests, pertest.Test{Name: ev.Name, Class: ev.Class, Method: ev.Method, PID: pid, Start: at, Outcome: pertest.Unfinished})
		a.open = len(a.run.Tests) - 1
	case instrument.TestFailed:
		if a.open >= 0 {
			a.run.Tests[a.open].Outcome = pertest.Failed
		}
	case instrument.Exception:
		if a.open >= 0 {
			a.run.Tests[a.open].Failure = ev.Trace
		}
	case instrument.TestFinished:
		if a.open >= 0 {
			t := &a.run.Tests[a.open]
			if t.Outcome == pertest.Unfinished {
				t.Outcome = pertest.Passed
			}
			t.End, t.DurationSeconds = at, at.Sub(t.Start).Seconds()
			a.open = -1
		}
	}
}

func (a *fakeAttributor) Report(pid int, r *allocreport.Report, overflowed bool) error {
	if a.open >= 0 {
		t := &a.run.Tests[a.open]
		for _, al := range r.Allocations {
			t.Allocations++
			t.Bytes += uint64(al.Size)
		}
	}
	return nil
}

func (a *fakeAttributor) Dump(pid int, w *alloctrack.Window, from, to time.Time) error {
	return fmt.Errorf("fakeAttributor: a dump of pid %d on a DDM device", pid)
}

func (a *fakeAttributor) Gone(pid int) {
	if a.open >= 0 {
		a.run.Tests[a.open].Partial = true
		a.run.Tests[a.open].Notes = []string{"its process died"}
	}
}

func (a *fakeAttributor) Snapshot() *pertest.Run {
	r := a.run
	r.Tests = slices.Clone(r.Tests)
	return &r
}

func (a *fakeAttributor) Finish() *pertest.Run { return a.Snapshot() }

func testsOf(r *daemonRun, serial, pkg string) alloctrack.AppTests {
	a, _ := r.app(serial, pkg)
	return a.Tests
}

func names(ts []alloctrack.TestSummary) string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name+" "+t.Outcome)
	}
	return strings.Join(out, ", ")
}

// startTestDaemon runs a daemon following tests over farm, its logcat
// streams given by the test.
func startTestDaemon(t *testing.T, farm *sim.Farm, recent int) (*daemonRun, *fakeLogcat) {
	t.Helper()
	t.Cleanup(func() { farm.Close() })
	a, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeLogcat{ADB: source.New(a.String()), stream: make(chan *io.PipeWriter, 4)}
	cfg := daemonConfig()
	cfg.Tests = supervisor.TestsConfig{Follow: true, Recent: recent, Grace: 50 * time.Millisecond, Refresh: 20 * time.Millisecond}
	d := supervisor.NewDaemon(cfg, []supervisor.Source{src}, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	d.SetNewAttributor(newFakeAttributor)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &daemonRun{farm: farm, d: d, addr: a.String()}, src
}

// The daemon follows the runner's lines of a tracked process, feeds its
// reports to the run's attributor, keeps the last finished tests and the
// running one, starts logcat again after the last entry it read when the
// stream ends, and ends the run of a process that died.
func TestDaemonFollowsTests(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{30}})
	r, src := startTestDaemon(t, farm, 3)
	const serial, pkg = "sim-1", "com.example.app1"
	eventually(t, "tracking", func() bool { return r.tracking(serial, pkg, 1) })
	pid := onlyPID(t, farm, serial, pkg)
	w := <-src.stream
	writeLines(t, w, logLine(1, pid, 'I', "run started: 5 tests"), logLine(1.5, 77777, 'I', "started: other(x.Y)"),
		logLine(2, pid, 'I', "started: a(com.example.T)"))
	eventually(t, "test a running with allocations", func() bool {
		c := testsOf(r, serial, pkg).Current
		return c != nil && c.Name == "a(com.example.T)" && c.Allocations > 0
	})
	writeLines(t, w, logLine(3, pid, 'I', "finished: a(com.example.T)"), logLine(3.1, pid, 'I', "started: b(com.example.T)"),
		logLine(3.2, pid, 'E', "failed: b(com.example.T)"), logLine(3.3, pid, 'E', "----- begin exception -----"),
		logLine(3.3, pid, 'E', "java.lang.AssertionError: boom"), logLine(3.3, pid, 'E', "\tat com.example.T.b(T.java:9)"),
		logLine(3.4, pid, 'E', "----- end exception -----"), logLine(3.5, pid, 'I', "finished: b(com.example.T)"),
		logLine(4, pid, 'I', "started: c(com.example.T)"))
	eventually(t, "a passed, b failed, c running", func() bool {
		ts := testsOf(r, serial, pkg)
		return names(ts.Recent) == "a(com.example.T) passed, b(com.example.T) failed" && ts.Current != nil && ts.Current.Name == "c(com.example.T)"
	})
	ts := testsOf(r, serial, pkg)
	if a := ts.Recent[0]; a.Duration != time.Second || a.Allocations == 0 || a.PID != pid {
		t.Errorf("test a: %+v, want 1 s with allocations, pid %d", a, pid)
	}
	if b := ts.Recent[1]; b.Failure != "java.lang.AssertionError: boom" {
		t.Errorf("test b's failure %q, want the first line of its trace", b.Failure)
	}
	if ts.Allocations < ts.Recent[0].Allocations || ts.Outcomes["passed"] != 1 || ts.Outcomes["failed"] != 1 || !ts.Seen || ts.Runs != 1 {
		t.Errorf("app tests %+v", ts)
	}

	// logcat ends: it is started again after the last entry read, and
	// an entry printed again is not read twice.
	w.Close()
	w = <-src.stream
	since, apis := src.calls()
	if len(since) != 2 || since[0] != "" || since[1] != "11-27 08:00:04.000" || apis[0] != 30 {
		t.Fatalf("logcat started with since %q at API %v, want \"\" then the last entry's stamp at 30", since, apis)
	}
	writeLines(t, w, logLine(4, pid, 'I', "started: c(com.example.T)"), logLine(5, pid, 'I', "finished: c(com.example.T)"),
		logLine(6, pid, 'I', "started: d(com.example.T)"))
	eventually(t, "c passed, d running", func() bool {
		ts := testsOf(r, serial, pkg)
		return names(ts.Recent) == "a(com.example.T) passed, b(com.example.T) failed, c(com.example.T) passed" && ts.Current != nil && ts.Current.Name == "d(com.example.T)"
	})
	if err := farm.KillApp(serial, pid); err != nil {
		t.Fatal(err)
	}
	eventually(t, "d unfinished once its process died, and only the last 3 tests kept", func() bool {
		ts := testsOf(r, serial, pkg)
		return names(ts.Recent) == "b(com.example.T) failed, c(com.example.T) passed, d(com.example.T) unfinished" && ts.Current == nil
	})
	ts = testsOf(r, serial, pkg)
	if d := ts.Recent[2]; !d.Partial || len(d.Notes) != 1 || ts.Outcomes["unfinished"] != 1 || ts.Outcomes["passed"] != 2 || ts.Runs != 0 {
		t.Errorf("after the process died: %+v", ts)
	}
	dv, _ := r.device(serial)
	if dv.Errors[alloctrack.StageLogcat] != 1 {
		t.Errorf("device errors %v, want logcat 1", dv.Errors)
	}
}

// Entries that share a millisecond are all read (the runner logs a
// failed test's failed:, exception and finished: lines in one: its
// finished: line was dropped, and with it the test's end and the cycle it
// asks for), and once logcat starts again only the entries read already
// are skipped, those at the last stamp read by their count.
func TestDaemonFollowsSameMillisecond(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{30}})
	r, src := startTestDaemon(t, farm, 10)
	const serial, pkg = "sim-1", "com.example.app1"
	eventually(t, "tracking", func() bool { return r.tracking(serial, pkg, 1) })
	pid := onlyPID(t, farm, serial, pkg)
	first := []string{logLine(1, pid, 'I', "run started: 3 tests"), logLine(1, pid, 'I', "started: a(com.example.T)"),
		logLine(2, pid, 'E', "failed: a(com.example.T)"), logLine(2, pid, 'E', "----- begin exception -----"),
		logLine(2, pid, 'E', "java.lang.AssertionError: boom"), logLine(2, pid, 'E', "----- end exception -----"),
		logLine(2, pid, 'I', "finished: a(com.example.T)"), logLine(2, pid, 'I', "started: b(com.example.T)")}
	w := <-src.stream
	writeLines(t, w, first...)
	eventually(t, "a failed, b running", func() bool {
		ts := testsOf(r, serial, pkg)
		return names(ts.Recent) == "a(com.example.T) failed" && ts.Current != nil && ts.Current.Name == "b(com.example.T)"
	})
	if f := testsOf(r, serial, pkg).Recent[0].Failure; f != "java.lang.AssertionError: boom" {
		t.Errorf("test a's failure %q", f)
	}
	// Started again, logcat prints what was read (as 4.4 does, its whole
	// buffer), then an entry of the same millisecond not read yet.
	w.Close()
	w = <-src.stream
	writeLines(t, w, append(first, logLine(2, pid, 'I', "finished: b(com.example.T)"), logLine(3, pid, 'I', "started: c(com.example.T)"))...)
	eventually(t, "a failed, b passed, c running, none read twice", func() bool {
		ts := testsOf(r, serial, pkg)
		return names(ts.Recent) == "a(com.example.T) failed, b(com.example.T) passed" && ts.Current != nil && ts.Current.Name == "c(com.example.T)"
	})
}

// A device that goes away mid-test ends its runs at once: the running
// test is kept, unfinished, and none is running any more.
func TestDaemonTestsDeviceGone(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{23}})
	r, src := startTestDaemon(t, farm, 50)
	const serial, pkg = "sim-1", "com.example.app1"
	eventually(t, "tracking", func() bool { return r.tracking(serial, pkg, 1) })
	pid := onlyPID(t, farm, serial, pkg)
	w := <-src.stream
	if _, apis := src.calls(); apis[0] != 23 {
		t.Errorf("logcat started for API %d, want 23", apis[0])
	}
	writeLines(t, w, logLine(1, pid, 'I', "run started: 1 tests"), logLine(2, pid, 'I', "started: long(com.example.T)"))
	eventually(t, "test running", func() bool { return testsOf(r, serial, pkg).Current != nil })
	if err := farm.Disconnect(serial); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the test unfinished once the device left", func() bool {
		ts := testsOf(r, serial, pkg)
		return ts.Current == nil && names(ts.Recent) == "long(com.example.T) unfinished" && ts.Outcomes["unfinished"] == 1
	})
}
