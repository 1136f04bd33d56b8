package ddm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/jdwp"
	"github.com/alloctrack/alloctrack/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	dev      *sim.Device
	vm       *sim.VM
	counters *alloctrack.Counters
	stats    *alloctrack.AppStats
	session  *ddm.Session
}

func newFixture(t *testing.T, api int, app sim.AppConfig, cfg ddm.Config) *fixture {
	t.Helper()
	d := sim.NewDevice(sim.DeviceConfig{Serial: "s1", API: api})
	if app.PID == 0 {
		app.PID = 321
	}
	if app.Package == "" {
		app.Package = "com.example.fix"
	}
	vm := sim.NewVM(app, api)
	d.AddVM(vm)
	t.Cleanup(d.Close)
	f := &fixture{dev: d, vm: vm, counters: alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 1000, TopSites: 10000}),
		stats: alloctrack.NewAppStats("s1", app.PID)}
	f.session = &ddm.Session{
		Serial: "s1", PID: app.PID, API: api,
		Open: func(ctx context.Context) (io.ReadWriteCloser, error) {
			return d.OpenService("jdwp:" + strconv.Itoa(app.PID))
		},
		Bind: func(name string) (*alloctrack.Counters, *alloctrack.AppStats) {
			return f.counters, f.stats
		},
		Config: cfg,
	}
	return f
}

// run starts the session and returns a function that stops it and
// returns its error.
func (f *fixture) run(t *testing.T) (stop func() error, done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- f.session.Run(ctx) }()
	var once bool
	var err error
	stop = func() error {
		if !once {
			once = true
			cancel()
			select {
			case err = <-errc:
			case <-time.After(testwait.Bound):
				t.Fatalf("session did not end within %v of cancel", testwait.Bound)
			}
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return stop, errc
}

// hungAfter is the request timeout of tests whose VM leaves a request
// unanswered: a healthy reply (handshake, HELO) comes well within it on a
// loaded machine, and the hung one is waited out in a few seconds.
const hungAfter = 2 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) windows() uint64 {
	return f.stats.Snapshot().Windows
}

func TestSessionWindowOrderAndCleanExit(t *testing.T) {
	wl := sim.DefaultWorkload()
	wl.Rate = 5000
	f := newFixture(t, 30, sim.AppConfig{Workload: wl}, ddm.Config{Window: 50 * time.Millisecond})
	stop, _ := f.run(t)
	waitFor(t, "3 windows", func() bool { return f.windows() >= 3 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	tr := f.vm.Trace()
	want := []string{"HELO", "REAQ", "REAE 1"}
	if !slices.Equal(tr[:3], want) {
		t.Fatalf("trace starts %q, want %q", tr[:3], want)
	}
	body := tr[3 : len(tr)-2]
	if len(body)%3 != 0 || len(body) < 9 {
		t.Fatalf("window part of the trace: %q", body)
	}
	for i := 0; i < len(body); i += 3 {
		if !slices.Equal(body[i:i+3], []string{"REAL", "REAE 0", "REAE 1"}) {
			t.Fatalf("window %d sent %q, want REAL, REAE 0, REAE 1", i/3, body[i:i+3])
		}
	}
	if end := tr[len(tr)-2:]; !slices.Equal(end, []string{"REAE 0", "REAQ"}) {
		t.Fatalf("trace ends %q, want REAE 0 then REAQ", end)
	}
	if f.vm.Tracking() {
		t.Fatal("tracking still on after the session ended")
	}
	if n := f.vm.Stats().NonDDM; n != 0 {
		t.Fatalf("%d non-DDM JDWP commands sent", n)
	}
	// Every whole report the VM sent was counted, exactly.
	got := f.counters.Snapshot()
	want2 := f.vm.TotalReported()
	if got.Total != want2.Total || got.Total.Allocations == 0 {
		t.Fatalf("counted %+v, VM reported %+v", got.Total, want2.Total)
	}
	for _, c := range got.Classes {
		if want2.ByClass[c.Class] != c.Count {
			t.Fatalf("class %s: counted %+v, reported %+v", c.Class, c.Count, want2.ByClass[c.Class])
		}
	}
}

func TestSessionOverflowShrinksWindow(t *testing.T) {
	wl := sim.DefaultWorkload()
	wl.Rate = 0 // the test allocates, as fast as the machine lets it
	f := newFixture(t, 30, sim.AppConfig{Workload: wl},
		// A floor of one round trip: the window may shrink well below
		// 20 of them here, where a 65,535-entry round trip is long (on a
		// loaded machine with the race detector, longer than 400 ms: a
		// 4 s window leaves room to shrink).
		ddm.Config{Window: 4 * time.Second, MinWindow: 50 * time.Millisecond, RTTFloor: 1})
	f.run(t)
	// 70,000 allocations in every window: each report overflows, however
	// slowly a loaded machine runs the app.
	last := uint64(0)
	waitFor(t, "an overflowed window and a shorter window", func() bool {
		st := f.stats.Snapshot()
		if f.vm.Tracking() && (last == 0 || st.Windows > last) {
			last = max(st.Windows, 1)
			f.vm.Allocate(70000)
		}
		return st.Overflowed > 0 && st.Window < 4*time.Second
	})
	// The app calms down: windows grow back.
	waitFor(t, "window back at 4 s", func() bool { return f.stats.Snapshot().Window == 4*time.Second })
}

func TestSessionUnsupportedOnAPI31(t *testing.T) {
	f := newFixture(t, 31, sim.AppConfig{}, ddm.Config{RequestTimeout: hungAfter})
	err := f.session.Run(context.Background())
	if !errors.Is(err, alloctrack.ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
	if f.stats.Snapshot().State != alloctrack.StateUnsupported {
		t.Fatalf("state %q", f.stats.Snapshot().State)
	}
	for _, s := range f.vm.Trace() {
		if strings.HasPrefix(s, "REAE") {
			t.Fatalf("sent %s to an unsupported VM", s)
		}
	}
}

func TestSessionRestartsTrackingLeftOn(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{}, ddm.Config{Window: 50 * time.Millisecond})
	// A client that died left tracking on.
	s := f.session
	s2 := *s
	s2.Config.Window = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	unplugged := make(chan struct{})
	go func() {
		defer close(unplugged)
		waitFor(t, "tracking on", f.vm.Tracking)
		f.dev.Disconnect() // the first client's stream dies; no disable reaches the VM
		cancel()
	}()
	s2.Run(ctx)
	// s2 may see its stream end while Disconnect is still closing the
	// VM's client: a new client connected in between would be closed too.
	<-unplugged
	if !f.vm.Tracking() {
		t.Fatal("precondition: tracking should still be on")
	}
	// The VM lets the dead client go on its own time; until then it
	// refuses a new one, as ART does.
	waitFor(t, "the dead client gone from the VM", func() bool { return !f.vm.Connected() })
	n := len(f.vm.Trace())
	stop, _ := f.run(t)
	for deadline := time.Now().Add(testwait.Bound); f.windows() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			err := stop()
			t.Fatalf("no window in %v; the session ended with %v; the VM was sent %q; stats %+v", testwait.Bound, err, f.vm.Trace()[n:], f.vm.Stats())
		}
	}
	stop()
	tr := f.vm.Trace()[n:]
	if !slices.Equal(tr[:4], []string{"HELO", "REAQ", "REAE 0", "REAE 1"}) {
		t.Fatalf("trace %q, want HELO, REAQ, REAE 0, REAE 1", tr[:4])
	}
}

func TestSessionHeldByAnotherDebugger(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{}, ddm.Config{})
	f.vm.SetFaults(sim.Faults{DebuggerAttached: true})
	if err := f.session.Run(context.Background()); !errors.Is(err, alloctrack.ErrHeld) {
		t.Fatalf("err = %v, want ErrHeld", err)
	}
}

func TestSessionPackageFilter(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{Package: "com.other"}, ddm.Config{})
	f.session.Accept = func(app string) bool { return app == "com.wanted" }
	if err := f.session.Run(context.Background()); !errors.Is(err, alloctrack.ErrFiltered) {
		t.Fatalf("err = %v, want ErrFiltered", err)
	}
	if tr := f.vm.Trace(); !slices.Equal(tr, []string{"HELO"}) {
		t.Fatalf("a filtered app was sent %q", tr)
	}
}

func TestSessionWaitsForAppName(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{Package: "com.late", NameAfter: 200 * time.Millisecond}, ddm.Config{Window: 50 * time.Millisecond})
	named := make(chan string, 1)
	bind := f.session.Bind
	f.session.Bind = func(app string) (*alloctrack.Counters, *alloctrack.AppStats) {
		named <- app
		return bind(app)
	}
	f.run(t)
	waitFor(t, "a window", func() bool { return f.windows() >= 1 })
	if n := <-named; n != "com.late" {
		t.Fatalf("bound to %q, want com.late (from APNM)", n)
	}
}

// TestSessionWaitingAppIsLeftFree: an app waiting for a debugger sends
// WAIT from its HELO handler; the session leaves at once (no tracking,
// nothing more sent) and the VM is free: a debugger's handshake is
// answered at once.
func TestSessionWaitingAppIsLeftFree(t *testing.T) {
	for _, api := range []int{26, 30} {
		f := newFixture(t, api, sim.AppConfig{Package: "com.wait", WaitingForDebugger: true}, ddm.Config{RequestTimeout: 2 * time.Second})
		if err := f.session.Run(context.Background()); !errors.Is(err, alloctrack.ErrWaiting) {
			t.Fatalf("API %d: err = %v, want ErrWaiting", api, err)
		}
		if tr := f.vm.Trace(); !slices.Equal(tr, []string{"HELO"}) {
			t.Errorf("API %d: the waiting app was sent %q", api, tr)
		}
		// The VM sees the session's stream close a moment later.
		var err error
		for deadline := time.Now().Add(testwait.Bound); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var c net.Conn
			if c, err = f.dev.OpenService("jdwp:321"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var conn *jdwp.Conn
			conn, err = jdwp.Open(ctx, c, jdwp.Options{})
			cancel()
			if err == nil {
				conn.Close()
				break
			}
		}
		if err != nil {
			t.Fatalf("API %d: a debugger after the session left: %v", api, err)
		}
	}
}

// TestSessionAPNMBeforeEcho: a VM of Android 5 to 11 may send an APNM
// before its handshake echo; the session still starts, and tracks.
func TestSessionAPNMBeforeEcho(t *testing.T) {
	f := newFixture(t, 29, sim.AppConfig{Package: "com.early"}, ddm.Config{Window: 50 * time.Millisecond})
	f.vm.SetFaults(sim.Faults{APNMBeforeEcho: true})
	f.run(t)
	waitFor(t, "a window", func() bool { return f.windows() >= 1 })
}

// TestSessionHeld: a VM another debugger holds closes a second client
// during the handshake up to Android 8.1, and leaves its handshake
// unanswered from Android 9; both are ErrHeld, never a hello error.
func TestSessionHeld(t *testing.T) {
	for _, api := range []int{26, 29, 0} {
		vmAPI := api
		if vmAPI == 0 {
			vmAPI = 30 // a device that did not say its API level
		}
		f := newFixture(t, vmAPI, sim.AppConfig{}, ddm.Config{RequestTimeout: hungAfter})
		f.session.API = api
		f.vm.SetFaults(sim.Faults{DebuggerAttached: true})
		if err := f.session.Run(context.Background()); !errors.Is(err, alloctrack.ErrHeld) {
			t.Errorf("API %d: err = %v, want ErrHeld", api, err)
		}
	}
	// Below Android 9 a handshake without echo is no sign of a holder.
	f := newFixture(t, 27, sim.AppConfig{}, ddm.Config{RequestTimeout: hungAfter})
	f.session.Open = func(ctx context.Context) (io.ReadWriteCloser, error) {
		a, b := net.Pipe()
		go io.Copy(io.Discard, b)
		t.Cleanup(func() { b.Close() })
		return a, nil
	}
	if err := f.session.Run(context.Background()); err == nil || errors.Is(err, alloctrack.ErrHeld) {
		t.Errorf("API 27, no echo: err = %v, want a hello error", err)
	}
}

// TestSessionSlowProbe: an unanswered REAQ means "no tracker" at once
// only on Android 12+; on Android 9 to 11, or an API level not known
// (no evidence of 12+), it is a slow VM, an error to retry, unless the
// sessions before met the same UnansweredProbeLimit-1 times in a row.
func TestSessionSlowProbe(t *testing.T) {
	for _, c := range []struct {
		api, before int
		unsupported bool
	}{{30, 0, false}, {28, 1, false}, {30, ddm.UnansweredProbeLimit - 1, true}, {31, 0, true}, {0, 0, false}, {0, ddm.UnansweredProbeLimit - 1, true}} {
		vmAPI := max(c.api, 30)
		f := newFixture(t, vmAPI, sim.AppConfig{}, ddm.Config{RequestTimeout: hungAfter})
		f.session.API, f.session.UnansweredProbes = c.api, c.before
		f.vm.SetFaults(sim.Faults{HangREAQ: 1})
		err := f.session.Run(context.Background())
		if errors.Is(err, alloctrack.ErrUnsupported) != c.unsupported || !c.unsupported && !errors.Is(err, alloctrack.ErrProbeUnanswered) {
			t.Errorf("API %d after %d: err = %v, want unsupported %v", c.api, c.before, err, c.unsupported)
		}
		if !c.unsupported && f.stats.Snapshot().State == alloctrack.StateUnsupported {
			t.Errorf("API %d: shown unsupported", c.api)
		}
	}
}

// TestSessionReportTooLargeStillDisables: a report over the packet limit
// ends the session with the error, yet the connection stays in step, so
// tracking is turned off on the way out.
func TestSessionReportTooLargeStillDisables(t *testing.T) {
	wl := sim.DefaultWorkload()
	wl.Rate = 5000
	f := newFixture(t, 30, sim.AppConfig{Workload: wl}, ddm.Config{Window: 100 * time.Millisecond, MaxPacketSize: 2000})
	err := f.session.Run(context.Background())
	var tl *jdwp.PacketTooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("err = %v, want a PacketTooLargeError", err)
	}
	if f.vm.Tracking() {
		t.Error("tracking left on after a report over the limit")
	}
	if st := f.vm.Stats(); st.Disables == 0 {
		t.Errorf("no REAE 0 sent: %+v", st.Chunks)
	}
}

// TestSessionWindowFloor: overflowing reports shorten the window, but
// never below RTTFloor report round trips (each is time the tracker is
// blind and the app partly stalled).
func TestSessionWindowFloor(t *testing.T) {
	wl := sim.DefaultWorkload()
	wl.Rate = 20000
	f := newFixture(t, 30, sim.AppConfig{Workload: wl, MaxEntries: 500}, ddm.Config{Window: time.Second, MinWindow: 10 * time.Millisecond})
	f.session.ReportCap = 500
	f.vm.SetFaults(sim.Faults{Latency: 15 * time.Millisecond}) // a round trip of at least 15 ms
	stop, _ := f.run(t)
	waitFor(t, "4 overflowed windows", func() bool { return f.stats.Snapshot().Overflowed >= 4 })
	st := f.stats.Snapshot()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if minRTT := 15 * time.Millisecond; st.Window < ddm.RTTFloor*minRTT {
		t.Errorf("window %v after %d overflows, below %d round trips of at least %v", st.Window, st.Overflowed, ddm.RTTFloor, minRTT)
	}
}

// TestSessionDalvikFullRing: Dalvik keeps 65,536 records, and a full
// report's u16 entry count wraps to 0; the session counts all 65,536 as
// the VM reported them, as an overflowed window.
func TestSessionDalvikFullRing(t *testing.T) {
	wl := sim.DefaultWorkload()
	wl.Rate = 0
	f := newFixture(t, 19, sim.AppConfig{Workload: wl}, ddm.Config{Window: 300 * time.Millisecond, MinWindow: 300 * time.Millisecond})
	var declared []int
	f.session.OnWindow = func(w *ddm.Cycle, _ *alloctrack.Window) {
		if w.Report != nil {
			declared = append(declared, w.Report.DeclaredCount)
		}
	}
	stop, _ := f.run(t)
	waitFor(t, "tracking", f.vm.Tracking)
	f.vm.Allocate(70000)
	waitFor(t, "an overflowed window", func() bool { return f.stats.Snapshot().Overflowed >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := f.stats.Snapshot()
	if got, want := f.counters.Snapshot().Total, f.vm.TotalReported().Total; got != want || got.Allocations < sim.DalvikRecords {
		t.Errorf("counted %+v, the VM reported %+v", got, want)
	}
	if !slices.Contains(declared, 0) {
		t.Errorf("no report declared a wrapped count of 0: %v (last report %d entries)", declared, st.LastReportEntries)
	}
}

// TestSessionAnswerTime: a window records the time to its report's first
// byte, which holds the VM's build of the report (the app's stall), apart
// from the whole round trip.
func TestSessionAnswerTime(t *testing.T) {
	wl := sim.DefaultWorkload()
	wl.Rate = 0
	f := newFixture(t, 30, sim.AppConfig{Workload: wl}, ddm.Config{Window: 200 * time.Millisecond, RTTFloor: 1})
	stop, _ := f.run(t)
	waitFor(t, "tracking", f.vm.Tracking)
	f.vm.Allocate(allocreport.MaxEntries)
	waitFor(t, "a full window", func() bool { return f.stats.Snapshot().Overflowed >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := f.stats.Snapshot()
	build := time.Duration(allocreport.MaxEntries*16) * sim.ReportBuildPerFrame
	if st.Answer.Count != st.RTT.Count || st.Answer.Sum < build.Seconds() || st.Answer.Sum > st.RTT.Sum {
		t.Errorf("answer %d windows %.3fs, round trips %d windows %.3fs; the full report took %v to build", st.Answer.Count, st.Answer.Sum, st.RTT.Count, st.RTT.Sum, build)
	}
}

func TestSessionCorruptReportIsCountedAndSkipped(t *testing.T) {
	wl := sim.DefaultWorkload()
	wl.Rate = 2000
	f := newFixture(t, 30, sim.AppConfig{Workload: wl}, ddm.Config{Window: 50 * time.Millisecond})
	f.vm.SetFaults(sim.Faults{CorruptREAL: 1, TruncateREAL: 1})
	stop, _ := f.run(t)
	waitFor(t, "4 windows", func() bool { return f.windows() >= 4 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := f.stats.Snapshot().Errors[alloctrack.StageParse]; n != 2 {
		t.Fatalf("%d parse errors counted, want 2", n)
	}
	if got, want := f.counters.Snapshot().Total, f.vm.TotalReported().Total; got != want {
		t.Fatalf("counted %+v, VM reported %+v", got, want)
	}
}

func TestSessionHungReportEndsSessionAndDisables(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{}, ddm.Config{Window: 20 * time.Millisecond, ReportTimeout: hungAfter})
	f.vm.SetFaults(sim.Faults{HangREAL: 1})
	err := f.session.Run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), alloctrack.StageReport) {
		t.Fatalf("err = %v, want a report-stage error", err)
	}
	if f.stats.Snapshot().Errors[alloctrack.StageReport] != 1 {
		t.Fatal("report error not counted")
	}
	if f.vm.Tracking() {
		t.Fatal("tracking left on after a failed session")
	}
}

// A session stopped while a report is on its way (its process left the
// device's JDWP list, the device left, the daemon is stopping) still waits
// for that report and counts it: the VM has sent it, and the REAQ that
// confirms tracking is off tells the VM it arrived.
func TestSessionStoppedMidReportCountsIt(t *testing.T) {
	wl := sim.DefaultWorkload()
	wl.Rate = 5000
	f := newFixture(t, 30, sim.AppConfig{Workload: wl}, ddm.Config{Window: 50 * time.Millisecond})
	// Every request is handled 300 ms after it arrives: a window's REAL is
	// on its way from 50 ms to at least 350 ms after the window before it
	// was counted.
	f.vm.SetFaults(sim.Faults{Latency: 300 * time.Millisecond})
	stop, _ := f.run(t)
	waitFor(t, "a window", func() bool { return f.windows() >= 1 })
	time.Sleep(150 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	got, want := f.counters.Snapshot().Total, f.vm.TotalReported().Total
	if got != want || got.Allocations == 0 {
		t.Fatalf("counted %+v, VM reported %+v (%d windows counted; VM trace %q)", got, want, f.windows(), f.vm.Trace())
	}
	if f.vm.Tracking() {
		t.Fatal("tracking left on")
	}
}

func TestSessionDroppedConnection(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{}, ddm.Config{Window: 20 * time.Millisecond})
	f.vm.SetFaults(sim.Faults{DropREAL: 1})
	err := f.session.Run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), alloctrack.StageReport) {
		t.Fatalf("err = %v, want a report-stage error", err)
	}
}

// Sessions whose reports are read one at a time (jdwp.Buffers) all make
// progress, and give the turn back whichever way they end.
func TestSessionsShareReportReads(t *testing.T) {
	bufs := jdwp.NewBuffers(1, 1)
	var fs []*fixture
	var stops []func() error
	for range 3 {
		f := newFixture(t, 30, sim.AppConfig{}, ddm.Config{Window: 20 * time.Millisecond})
		f.session.Buffers = bufs
		fs = append(fs, f)
	}
	for _, f := range fs {
		stop, _ := f.run(t)
		stops = append(stops, stop)
	}
	for i, f := range fs {
		waitFor(t, fmt.Sprintf("3 windows of session %d", i), func() bool { return f.windows() >= 3 })
	}
	for _, stop := range stops {
		stop()
	}
	if n := bufs.Reading(); n != 0 {
		t.Fatalf("%d reads still under way after every session ended", n)
	}
	if n := bufs.Lent(); n != 0 {
		t.Fatalf("%d report buffers still lent after every session ended", n)
	}
}

// Every report buffer lent goes back, whatever becomes of its report:
// counted, unparsable, cut short, or cut off with the connection.
func TestSessionGivesBackEveryReportBuffer(t *testing.T) {
	for name, faults := range map[string]sim.Faults{
		"counted":   {},
		"corrupt":   {CorruptREAL: 2},
		"truncated": {TruncateREAL: 2},
		"dropped":   {DropREAL: 1},
	} {
		t.Run(name, func(t *testing.T) {
			bufs := jdwp.NewBuffers(2, 2)
			wl := sim.DefaultWorkload()
			wl.Rate = 100000 // about 5,000 entries a window: reports large enough to be lent
			f := newFixture(t, 30, sim.AppConfig{Workload: wl}, ddm.Config{Window: 50 * time.Millisecond})
			f.session.Buffers = bufs
			f.vm.SetFaults(faults)
			stop, done := f.run(t)
			waitFor(t, "3 windows, or the session's end", func() bool {
				if name == "dropped" {
					return len(done) > 0
				}
				return f.windows() >= 3 && f.stats.Snapshot().Errors[alloctrack.StageParse] >= uint64(faults.CorruptREAL+faults.TruncateREAL)
			})
			stop()
			if n := bufs.Lent(); n != 0 {
				t.Fatalf("%d report buffers lent and not given back", n)
			}
			if bufs.Len() == 0 && name != "dropped" {
				t.Fatal("no buffer kept: were the reports too small to be lent?")
			}
		})
	}
}

// TestSessionErrorStage: a session's error carries its stage as a value
// (ErrorStage), with the stage still leading its text.
func TestSessionErrorStage(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{}, ddm.Config{})
	f.session.Open = func(context.Context) (io.ReadWriteCloser, error) { return nil, errors.New("no such device") }
	err := f.session.Run(context.Background())
	if alloctrack.ErrorStage(err) != alloctrack.StageConnect || !strings.HasPrefix(err.Error(), alloctrack.StageConnect+": ") {
		t.Fatalf("err = %v (stage %q), want stage %q", err, alloctrack.ErrorStage(err), alloctrack.StageConnect)
	}
	if alloctrack.ErrorStage(errors.New("connect: plain text")) != "" {
		t.Fatal("a stage read from an error's text")
	}
}

// TestSessionCycleNow: a receive on CycleNow ends the window under way at
// once, long before its timer.
func TestSessionCycleNow(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{Workload: quietWorkload()}, ddm.Config{Window: time.Hour})
	cycle := make(chan struct{}, 1)
	f.session.CycleNow = cycle
	f.run(t)
	waitFor(t, "tracking on", f.vm.Tracking)
	for i := 1; i <= 2; i++ {
		f.vm.Allocate(7)
		cycle <- struct{}{}
		waitFor(t, fmt.Sprintf("window %d", i), func() bool { return f.windows() >= uint64(i) })
	}
	if got := f.counters.Snapshot().Total.Allocations; got != 14 {
		t.Fatalf("counted %d allocations in two cycled windows, want 14", got)
	}
}

func quietWorkload() sim.Workload {
	w := sim.DefaultWorkload()
	w.Rate = 0
	return w
}

// TestSessionEnableEarly: with EnableEarly a VM still "<pre-initialized>"
// has its tracker on before it names itself, and what it allocates then
// is counted once it is named.
func TestSessionEnableEarly(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{Package: "com.late", NameAfter: time.Hour, Workload: quietWorkload()},
		ddm.Config{Window: time.Hour, NameTimeout: 2 * testwait.Bound})
	f.session.EnableEarly = true
	bound := make(chan string, 1)
	bind := f.session.Bind
	f.session.Bind = func(app string) (*alloctrack.Counters, *alloctrack.AppStats) {
		bound <- app
		return bind(app)
	}
	f.run(t)
	waitFor(t, "tracking on before the app is named", f.vm.Tracking)
	select {
	case app := <-bound:
		t.Fatalf("bound to %q before the app was named", app)
	default:
	}
	if f.vm.AppName() == "com.late" {
		t.Fatal("the VM is named already: the test shows nothing")
	}
}

// TestSessionEnableEarlyTurnedAway: an app tracked before it was named
// that Accept turns away has its tracker turned off again.
func TestSessionEnableEarlyTurnedAway(t *testing.T) {
	f := newFixture(t, 30, sim.AppConfig{Package: "com.other", NameAfter: 300 * time.Millisecond, Workload: quietWorkload()},
		ddm.Config{Window: time.Hour})
	f.session.EnableEarly = true
	f.session.Accept = func(app string) bool { return app == "com.wanted" }
	err := f.session.Run(testwait.Context(t))
	fe, ok := errors.AsType[*ddm.FilteredError](err)
	if !ok || !fe.Stopped || fe.App != "com.other" {
		t.Fatalf("err %v, want a FilteredError for com.other with tracking stopped", err)
	}
	if f.vm.Tracking() {
		t.Fatal("tracking left on")
	}
	if tr := f.vm.Trace(); !slices.Contains(tr, "REAE 1") {
		t.Fatalf("trace %q: tracking was never turned on early", tr)
	}
}
