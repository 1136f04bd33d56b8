package offline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// fakeAttribution records every call, in order, as a line.
type fakeAttribution struct {
	mu    sync.Mutex
	calls []string
	// allocs counts the allocations of the reports of each pid.
	allocs map[int]int
}

func (f *fakeAttribution) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeAttribution) Event(pid int, at time.Time, ev instrument.RunnerEvent) {
	f.add("event %d %s %s", pid, ev.Kind, ev.Name)
}
func (f *fakeAttribution) Status(ev instrument.Event) { f.add("status %s %s", ev.Kind, ev.Method) }
func (f *fakeAttribution) Result(r instrument.Result) { f.add("result %d", r.Code) }
func (f *fakeAttribution) Report(pid int, r *allocreport.Report, overflowed bool) error {
	f.mu.Lock()
	if f.allocs == nil {
		f.allocs = map[int]int{}
	}
	f.allocs[pid] += len(r.Allocations)
	f.mu.Unlock()
	f.add("report %d", pid)
	return nil
}
func (f *fakeAttribution) Dump(pid int, w *alloctrack.Window, from, to time.Time) error {
	f.add("dump %d %d %s %s", pid, w.Total.Bytes, from.Format(time.StampMilli), to.Format(time.StampMilli))
	return nil
}
func (f *fakeAttribution) Gone(pid int)         { f.add("gone %d", pid) }
func (f *fakeAttribution) Finish() *pertest.Run { f.add("finish"); return &pertest.Run{} }

func (f *fakeAttribution) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeAttribution) has(call string) bool { return slices.Contains(f.log(), call) }

func (f *fakeAttribution) reported(pid int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.allocs[pid]
}

const testPkg = "com.example.app"

// runFixture is a simulated device and the fakes a RunRecorder reaches it
// through: the JDWP list is sent by the test, logcat and am output are
// pipes the test writes.
type runFixture struct {
	dev          *sim.Device
	lists        chan []int
	logW, amW    *io.PipeWriter
	logR, amR    *io.PipeReader
	attr         *fakeAttribution
	run          *offline.RunRecorder
	aborted      chan struct{}
	instrumented chan struct{}
}

func quiet() sim.Workload {
	w := sim.DefaultWorkload()
	w.Rate = 0
	return w
}

func newRunFixture(t *testing.T, withAm bool) *runFixture {
	d := sim.NewDevice(sim.DeviceConfig{Serial: "s1", API: 30})
	t.Cleanup(d.Close)
	f := &runFixture{dev: d, lists: make(chan []int, 16), attr: &fakeAttribution{}, aborted: make(chan struct{}), instrumented: make(chan struct{})}
	f.logR, f.logW = io.Pipe()
	f.amR, f.amW = io.Pipe()
	t.Cleanup(func() { f.logW.Close(); f.amW.Close() })
	f.run = &offline.RunRecorder{
		Serial: "s1", API: 30, Package: testPkg,
		Logcat: func(ctx context.Context) (io.ReadCloser, error) { return f.logR, nil },
		TrackJDWP: func(ctx context.Context, fn func([]int)) error {
			for {
				select {
				case l, ok := <-f.lists:
					if !ok {
						return errors.New("device offline")
					}
					fn(l)
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		},
		Open: func(ctx context.Context, pid int) (io.ReadWriteCloser, error) {
			return d.OpenService("jdwp:" + strconv.Itoa(pid))
		},
		Abort:      func(context.Context) error { close(f.aborted); return nil },
		Config:     ddm.Config{Window: time.Hour},
		Settle:     testwait.Bound,
		Attributor: f.attr,
	}
	if withAm {
		f.run.Instrument = func(ctx context.Context) (io.ReadCloser, error) { close(f.instrumented); return f.amR, nil }
	}
	return f
}

func (f *runFixture) addVM(pid int, pkg string, nameAfter time.Duration) *sim.VM {
	vm := sim.NewVM(sim.AppConfig{PID: pid, Package: pkg, NameAfter: nameAfter, Workload: quiet()}, 30)
	f.dev.AddVM(vm)
	return vm
}

// logLine writes one runner line of pid in threadtime.
func (f *runFixture) logLine(t *testing.T, pid int, prio byte, msg string) {
	t.Helper()
	line := fmt.Sprintf("%s %5d %5d %c TestRunner: %s\n", time.Now().Format("01-02 15:04:05.000"), pid, pid, prio, msg)
	if _, err := io.WriteString(f.logW, line); err != nil {
		t.Fatal(err)
	}
}

func (f *runFixture) am(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(f.amW, s); err != nil {
		t.Fatal(err)
	}
}

type recorded struct {
	res *offline.RunRecord
	err error
}

func (f *runFixture) start(stop <-chan struct{}) <-chan recorded {
	done := make(chan recorded, 1)
	go func() {
		res, err := f.run.Record(context.Background(), stop)
		done <- recorded{res, err}
	}()
	return done
}

func waitDone(t *testing.T, done <-chan recorded) recorded {
	t.Helper()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Record: %v", r.err)
		}
		return r
	case <-time.After(testwait.Bound):
		t.Fatal("Record did not end")
	}
	return recorded{}
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 5*time.Millisecond, what, func() (bool, string) { return cond(), "" })
}

func status(code int, method string) string {
	return "INSTRUMENTATION_STATUS: class=com.example.T\nINSTRUMENTATION_STATUS: test=" + method +
		"\nINSTRUMENTATION_STATUS_CODE: " + strconv.Itoa(code) + "\n"
}

// TestRunRecorderFollowsTheRun: a run's fresh process is tracked as soon as
// it is listed (an older process of the app is left alone); its runner
// lines, held until it names itself, are fed in order (another app's
// fresh process is tracked too until it names itself, then left); each finished:
// cycles its tracker at once, so the test's report comes before the next
// test; another process's lines are left out and said so; am's statuses
// and result are fed; the process's end is told; nothing is left on.
func TestRunRecorderFollowsTheRun(t *testing.T) {
	f := newRunFixture(t, true)
	old := f.addVM(100, testPkg, 0)
	f.lists <- []int{100}
	done := f.start(nil)
	<-f.instrumented
	vm := f.addVM(200, testPkg, 300*time.Millisecond)
	other := f.addVM(250, "com.example.other", 300*time.Millisecond)
	f.lists <- []int{100, 200, 250}
	until(t, "the fresh process tracked", vm.Tracking)
	f.logLine(t, 250, 'I', "started: y(other.App)")
	f.logLine(t, 200, 'I', "run started: 2 tests")
	f.logLine(t, 999, 'I', "started: x(other.App)")
	f.logLine(t, 200, 'I', "started: a(com.example.T)")
	f.am(t, status(1, "a"))
	until(t, "the app named and its lines fed", func() bool { return f.attr.has("event 200 started a(com.example.T)") })
	vm.Allocate(5)
	f.logLine(t, 200, 'I', "finished: a(com.example.T)")
	until(t, "the report of test a", func() bool { return f.attr.reported(200) >= 5 })
	f.am(t, status(0, "a"))
	f.logLine(t, 200, 'I', "run finished: 1 tests, 0 failed, 0 ignored")
	f.am(t, "INSTRUMENTATION_RESULT: stream=OK\nINSTRUMENTATION_CODE: -1\n")
	f.amW.Close()
	until(t, "run finished read", func() bool { return f.attr.has("event 200 run finished ") })
	vm.Kill() // am force-stops the process
	f.dev.RemoveVM(200)
	r := waitDone(t, done)

	want := []string{"event 200 run started ", "event 200 started a(com.example.T)", "event 200 finished a(com.example.T)",
		"report 200", "event 200 run finished ", "gone 200", "finish"}
	var got []string
	for _, c := range f.attr.log() {
		if !strings.HasPrefix(c, "status") && !strings.HasPrefix(c, "result") {
			got = append(got, c)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("fed\n %q\nwant\n %q", got, want)
	}
	for _, c := range []string{"status started a", "status ended a", "result -1"} {
		if !f.attr.has(c) {
			t.Errorf("%q not fed: %q", c, f.attr.log())
		}
	}
	if !slices.Equal(r.res.Tracked, []int{200}) || r.res.AmErr != nil || r.res.Stopped || r.res.Gone != nil {
		t.Errorf("result %+v", r.res)
	}
	if other.Tracking() || !slices.Contains(other.Trace(), "REAE 1") {
		t.Errorf("another app's fresh process: tracking %v, trace %q; want it tracked early, then turned off", other.Tracking(), other.Trace())
	}
	if p := strings.Join(r.res.Run.Problems, "; "); !strings.Contains(p, "runner lines were left out: 1 of pids 250, not com.example.app (another app or run); 1 of pids 999, processes never tracked") {
		t.Errorf("problems %q: the other process's line is not named", p)
	}
	if len(old.Trace()) != 0 {
		t.Errorf("the older process was sent %q", old.Trace())
	}
}

// TestRunRecorderStopped: a run that never finishes is stopped: the process's
// last report is read, tracking is turned off, then the run is ended on
// the device; neither that stop nor what am says of that end (a crash) is
// the process's end.
func TestRunRecorderStopped(t *testing.T) {
	f := newRunFixture(t, true)
	f.lists <- []int{}
	stop := make(chan struct{})
	done := f.start(stop)
	<-f.instrumented
	vm := f.addVM(300, testPkg, 0)
	f.lists <- []int{300}
	until(t, "tracking on", vm.Tracking)
	f.logLine(t, 300, 'I', "started: hangs(com.example.T)")
	until(t, "the line fed", func() bool { return f.attr.has("event 300 started hangs(com.example.T)") })
	vm.Allocate(3)
	f.run.Abort = func(context.Context) error {
		// am force-stop: am reports the process crashed, as for any death.
		close(f.aborted)
		f.am(t, status(-2, "hangs")+"INSTRUMENTATION_RESULT: shortMsg=Process crashed.\nINSTRUMENTATION_CODE: 0\n")
		f.amW.Close()
		return nil
	}
	close(stop)
	r := waitDone(t, done)
	if f.attr.has("status ended hangs") || f.attr.has("result 0") || f.attr.has("gone 300") {
		t.Errorf("the end we made was fed as the process's: %q", f.attr.log())
	}
	select {
	case <-f.aborted:
	default:
		t.Error("the run was not ended on the device")
	}
	if !r.res.Stopped || f.attr.reported(300) != 3 || vm.Tracking() {
		t.Errorf("stopped %v, reported %d allocations (want 3), tracking %v", r.res.Stopped, f.attr.reported(300), vm.Tracking())
	}
}

// TestRunRecorderDeviceGone: the device's JDWP list breaks mid-run: the run
// ends at once with what was collected, and says why.
func TestRunRecorderDeviceGone(t *testing.T) {
	f := newRunFixture(t, true)
	f.lists <- []int{}
	done := f.start(nil)
	<-f.instrumented
	vm := f.addVM(400, testPkg, 0)
	f.lists <- []int{400}
	until(t, "tracking on", vm.Tracking)
	f.logLine(t, 400, 'I', "started: a(com.example.T)")
	until(t, "the line fed", func() bool { return f.attr.has("event 400 started a(com.example.T)") })
	vm.Kill()
	close(f.lists)
	f.amW.CloseWithError(io.ErrUnexpectedEOF)
	r := waitDone(t, done)
	if r.res.Gone == nil || !strings.Contains(r.res.Gone.Error(), "device offline") {
		t.Errorf("gone %v, want the list's error", r.res.Gone)
	}
	if !f.attr.has("gone 400") || !f.attr.has("finish") {
		t.Errorf("fed %q", f.attr.log())
	}
}

// TestRunRecorderCapture: without am (capture --tests) a process of the app
// already running is tracked, and the recording ends once a run finished
// and no process of the app is left.
func TestRunRecorderCapture(t *testing.T) {
	f := newRunFixture(t, false)
	f.run.TrackExisting = true
	f.run.Settle = 100 * time.Millisecond // how long the end waits for another process; not a test bound
	vm := f.addVM(500, testPkg, 0)
	f.lists <- []int{500}
	done := f.start(nil)
	until(t, "the running process tracked", vm.Tracking)
	f.logLine(t, 500, 'I', "started: a(com.example.T)")
	f.logLine(t, 500, 'I', "finished: a(com.example.T)")
	f.logLine(t, 500, 'I', "run finished: 1 tests, 0 failed, 0 ignored")
	until(t, "run finished fed", func() bool { return f.attr.has("event 500 run finished ") })
	vm.Kill()
	f.dev.RemoveVM(500)
	f.lists <- []int{}
	r := waitDone(t, done)
	if r.res.Stopped || r.res.Gone != nil || !slices.Equal(r.res.Tracked, []int{500}) || !f.attr.has("gone 500") {
		t.Errorf("result %+v, fed %q", r.res, f.attr.log())
	}
}

func TestStampTime(t *testing.T) {
	now := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	berlin := time.FixedZone("CET", 3600)
	for _, tt := range []struct {
		st   instrument.Stamp
		loc  *time.Location
		want time.Time
	}{
		{instrument.Stamp{Text: "01-02 09:59:58.123", Month: 1, Day: 2, Hour: 9, Min: 59, Sec: 58, Nanos: 123e6}, nil,
			time.Date(2026, 1, 2, 9, 59, 58, 123e6, time.UTC)},
		{instrument.Stamp{Text: "12-31 23:59:59.000", Month: 12, Day: 31, Hour: 23, Min: 59, Sec: 59}, berlin,
			time.Date(2025, 12, 31, 23, 59, 59, 0, berlin)},
		{instrument.Stamp{Text: "x", Year: 2024, Month: 3, Day: 1, Hour: 1, Zone: "-0130"}, berlin,
			time.Date(2024, 3, 1, 2, 30, 0, 0, time.UTC)},
		{instrument.Stamp{Text: "1767348000.5", Seconds: true, Sec: 1767348000, Nanos: 5e8}, berlin, time.Unix(1767348000, 5e8)},
		{instrument.Stamp{}, berlin, time.Time{}},
	} {
		if got := offline.StampTime(tt.st, tt.loc, now); !got.Equal(tt.want) {
			t.Errorf("%+v: %v, want %v", tt.st, got, tt.want)
		}
	}
}

// TestRunRecorderLogcatEnds: a logcat that stops before the run does (an
// option the device refused) is said, with what it wrote on stderr.
func TestRunRecorderLogcatEnds(t *testing.T) {
	f := newRunFixture(t, true)
	eof := make(chan struct{})
	f.run.Logcat = func(ctx context.Context) (io.ReadCloser, error) {
		return stderrStream{f.logR, "logcat: Unknown option '-x'.", eof}, nil
	}
	f.lists <- []int{}
	done := f.start(nil)
	<-f.instrumented
	f.logW.Close()
	<-eof // logcat ended before the run did
	f.am(t, "INSTRUMENTATION_RESULT: stream=OK\nINSTRUMENTATION_CODE: -1\n")
	f.amW.Close()
	r := waitDone(t, done)
	if n := strings.Join(r.res.Notes, "; "); !strings.Contains(n, "logcat stopped before the run ended") || !strings.Contains(n, "Unknown option '-x'") {
		t.Errorf("notes %q", n)
	}
}

type stderrStream struct {
	io.ReadCloser
	stderr string
	eof    chan struct{} // closed when a read met the end of the stream
}

func (s stderrStream) Read(b []byte) (int, error) {
	n, err := s.ReadCloser.Read(b)
	if err == io.EOF {
		close(s.eof)
	}
	return n, err
}

func (s stderrStream) Stderr() []byte { return []byte(s.stderr) }

// TestRunRecorderOldLines: runner lines read before any process of the
// run was tracked (what -T 1 or Android 4.4's whole buffer print of
// earlier runs) are no problem of this run.
func TestRunRecorderOldLines(t *testing.T) {
	f := newRunFixture(t, true)
	eof := make(chan struct{})
	f.run.Logcat = func(ctx context.Context) (io.ReadCloser, error) { return stderrStream{f.logR, "", eof}, nil }
	f.lists <- []int{}
	done := f.start(nil)
	<-f.instrumented
	f.logLine(t, 77, 'I', "run finished: 3 tests, 0 failed, 0 ignored")
	f.logW.Close()
	<-eof
	f.am(t, "INSTRUMENTATION_RESULT: stream=OK\nINSTRUMENTATION_CODE: -1\n")
	f.amW.Close()
	r := waitDone(t, done)
	if len(r.res.Run.Problems) > 0 {
		t.Errorf("problems %q", r.res.Run.Problems)
	}
}

// TestRunRecorderCyclesOnAmStatus: when logcat lost a test's finished:
// line (a full buffer), am's status of the test's end still cycles the
// tracker, so the test's report is read before the next test (and, for
// the last test, before am stops the process).
func TestRunRecorderCyclesOnAmStatus(t *testing.T) {
	f := newRunFixture(t, true)
	f.lists <- []int{}
	done := f.start(nil)
	<-f.instrumented
	vm := f.addVM(200, testPkg, 300*time.Millisecond)
	f.lists <- []int{200}
	until(t, "the fresh process tracked", vm.Tracking)
	f.logLine(t, 200, 'I', "run started: 1 tests")
	f.logLine(t, 200, 'I', "started: a(com.example.T)")
	f.am(t, status(1, "a"))
	until(t, "the app named and its lines fed", func() bool { return f.attr.has("event 200 started a(com.example.T)") })
	vm.Allocate(5)
	// finished: a(com.example.T) is lost; am still says the test ended.
	f.am(t, status(0, "a"))
	until(t, "the report of test a, asked for by am's status", func() bool { return f.attr.reported(200) >= 5 })
	f.logLine(t, 200, 'I', "run finished: 1 tests, 0 failed, 0 ignored")
	f.am(t, "INSTRUMENTATION_RESULT: stream=OK\nINSTRUMENTATION_CODE: -1\n")
	f.amW.Close()
	vm.Kill()
	f.dev.RemoveVM(200)
	waitDone(t, done)
}
