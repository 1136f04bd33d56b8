package supervisor

import (
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"go.uber.org/zap"
)

// recorder is an attributor that records what it was fed.
type recorder struct {
	cfg      pertest.Config
	events   []instrument.RunnerEvent
	reports  int
	dumps    int
	gone     bool
	finished chan struct{}
}

func (r *recorder) Event(_ int, _ time.Time, ev instrument.RunnerEvent) {
	r.events = append(r.events, ev)
}
func (r *recorder) Report(int, *allocreport.Report, bool) error { r.reports++; return nil }
func (r *recorder) Dump(int, *alloctrack.Window, time.Time, time.Time) error {
	r.dumps++
	return nil
}
func (r *recorder) Gone(int)               { r.gone = true }
func (r *recorder) Snapshot() *pertest.Run { return &pertest.Run{} }
func (r *recorder) Finish() *pertest.Run   { close(r.finished); return &pertest.Run{} }

func newFollowerForTest(t *testing.T) (*testFollower, map[string]*recorder) {
	return newFollowerOf(t, followOpts{backend: alloctrack.BackendDDM})
}

func newFollowerOf(t *testing.T, opts followOpts) (*testFollower, map[string]*recorder) {
	d := NewDaemon(DaemonConfig{Tests: TestsConfig{Grace: time.Millisecond}}, nil, nil)
	made := map[string]*recorder{}
	d.newAttributor = func(cfg pertest.Config) attributor {
		r := &recorder{cfg: cfg, finished: make(chan struct{})}
		made[cfg.Package] = r
		return r
	}
	done := make(chan struct{})
	close(done)
	return &testFollower{d: d, serial: "s", api: 30, log: zap.NewNop(), opts: opts, pids: map[int]*pidTests{}, done: done}, made
}

func started(name string) instrument.RunnerEvent {
	return instrument.RunnerEvent{Kind: instrument.TestStarted, Name: name}
}

// Runner lines of a process no session has named yet wait for its name,
// within bounds; a process that logged nothing is followed from its first
// report that holds the runner's listener, and others cost nothing.
func TestFollowerPendingAndListener(t *testing.T) {
	f, made := newFollowerForTest(t)
	f.event(10, time.Now(), started("a(x.Y)"))
	if len(made) != 0 {
		t.Fatalf("an attributor before the process was named: %v", made)
	}
	f.bound(10, "app.a", newAppTests(5))
	if r := made["app.a"]; r == nil || len(r.events) != 1 || r.events[0].Name != "a(x.Y)" || r.cfg.API != 30 || r.cfg.Backend != "ddm" {
		t.Fatalf("after the name: %+v", made["app.a"])
	}

	f.bound(11, "app.b", newAppTests(5))
	plain := &allocreport.Report{Classes: []string{"java.lang.String"}}
	f.report(11, plain, false)
	if made["app.b"] != nil {
		t.Fatal("an app that runs no test got an attributor")
	}
	for _, cls := range []string{"androidx.test.internal.runner.listener.LogRunListener", "android.support.test.internal.runner.listener.LogRunListener"} {
		f.bound(12, cls, newAppTests(5))
		f.report(12, &allocreport.Report{Classes: []string{"java.lang.String", cls}}, false)
		f.report(12, plain, false)
		if r := made[cls]; r == nil || r.reports != 2 {
			t.Errorf("a report naming %s: %+v, want an attributor fed both reports", cls, r)
		}
		f.gone(12)
		<-made[cls].finished
	}

	// Processes nobody names: bounded.
	for pid := 1000; pid < 1000+3*maxPendingPIDs; pid++ {
		for range maxPendingEvents + 10 {
			f.event(pid, time.Time{}, started("z(x.Y)"))
		}
	}
	unnamed := 0
	for _, p := range f.pids {
		if p.tests == nil {
			unnamed++
			if len(p.pending) > maxPendingEvents {
				t.Fatalf("%d pending events kept for one process", len(p.pending))
			}
		}
	}
	if unnamed > maxPendingPIDs {
		t.Errorf("%d unnamed processes kept, want at most %d", unnamed, maxPendingPIDs)
	}

	f.gone(10)
	select {
	case <-made["app.a"].finished:
	case <-time.After(testwait.Bound):
		t.Fatal("the run of a process gone was not finished")
	}
	if !made["app.a"].gone {
		t.Error("Gone not fed")
	}
	f.close()
	if f.pids[11] != nil {
		t.Error("close left a process")
	}
}

// On a heapprofd device a named process's dumps go to its run: those read
// before its first runner line are held (the last maxHeldDumps) and fed
// when it comes; the device is told a run is open, and once none has been
// for FastLinger; a process's end told sooner finishes its run sooner.
func TestFollowerHeapprofdDumps(t *testing.T) {
	var active []bool
	f, made := newFollowerOf(t, followOpts{backend: alloctrack.BackendHeapprofd, active: func(on bool) { active = append(active, on) }})
	f.d.cfg.Tests.FastLinger = time.Millisecond
	win := &alloctrack.Window{Total: alloctrack.Count{Allocations: 1, Bytes: 8}}
	f.dump(20, win, time.Unix(1, 0), time.Unix(2, 0)) // not named yet: not held
	f.bound(20, "app.c", newAppTests(5))
	for i := range maxHeldDumps + 3 {
		f.dump(20, win, time.Unix(int64(i), 0), time.Unix(int64(i+1), 0))
	}
	if len(made) != 0 || len(f.pids[20].held) != maxHeldDumps {
		t.Fatalf("before a runner line: attributors %v, %d dumps held", made, len(f.pids[20].held))
	}
	f.event(20, time.Unix(20, 0), started("a(x.Y)"))
	r := made["app.c"]
	if r == nil || r.cfg.Backend != alloctrack.BackendHeapprofd || r.cfg.DumpInterval != f.d.cfg.Tests.DumpInterval || r.dumps != maxHeldDumps {
		t.Fatalf("after the first line: %+v, want a heapprofd attributor fed the %d dumps held", r, maxHeldDumps)
	}
	f.dump(20, win, time.Unix(20, 0), time.Unix(21, 0))
	if r.dumps != maxHeldDumps+1 || len(active) != 1 || !active[0] {
		t.Fatalf("%d dumps fed, active told %v", r.dumps, active)
	}
	f.goneAfter(20, time.Hour)
	f.goneAfter(20, time.Millisecond) // heapprofd's last dump: sooner
	select {
	case <-r.finished:
	case <-time.After(testwait.Bound):
		t.Fatal("the run was not finished at the sooner end")
	}
	testwait.Until(t, time.Millisecond, "active told false", func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(active) == 2 && !active[1], "active calls so far"
	})
	f.close()
}
