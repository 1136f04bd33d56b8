package offline

import (
	"context"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
)

// RunHeapprofd is how a RunRecorder reaches heapprofd (Android 12+).
type RunHeapprofd struct {
	// Exec runs a command on the device (shell protocol v2).
	Exec heapprofd.ExecFunc
	// Window is how often the trace file is read (test runs: 1 s).
	Window time.Duration
	// Config is the sessions'; its DumpInterval (test runs: 250 ms) is
	// the boundary error's main part (docs/test-runs.md).
	Config heapprofd.Config
}

// startHeapprofd starts, when Heapprofd is set, the perfetto session that
// profiles every process named as the app (one that starts later is
// profiled from its start), one session after another until stopSessions.
func (s *runState) startHeapprofd() {
	h := s.r.Heapprofd
	if h == nil {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.mu.Lock()
	s.hpCancel = cancel
	var raw io.Writer
	if w := s.r.Writer; w != nil {
		var err error
		if raw, err = w.Trace(); err != nil {
			s.notes = append(s.notes, err.Error())
		}
	}
	s.mu.Unlock()
	s.sessions.Add(1)
	go func() {
		defer s.sessions.Done()
		defer cancel()
		for ctx.Err() == nil {
			sess := &heapprofd.Session{
				Serial: s.r.Serial, API: s.r.API, Exec: h.Exec, Window: h.Window, Config: h.Config,
				Processes: []string{s.r.Package},
				Resolve:   s.resolveDump,
				OnDump:    s.dump,
				OnGone:    s.hpGone,
				Raw:       raw,
				Log:       s.r.Log,
			}
			if err := sess.Run(ctx); err != nil {
				s.note("heapprofd: %v", err)
				return
			}
		}
	}()
}

// resolveDump takes the first dump of pid in a session: a process of the
// app that was not running when the run began (TrackExisting aside) is
// the run's; its held runner lines are fed, then its dumps.
func (s *runState) resolveDump(_ context.Context, pid int) *heapprofd.Target {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.signal()
	if s.old[pid] || s.finished {
		return nil
	}
	p := s.proc(pid)
	if p == nil || p.state == notApp {
		return nil
	}
	if p.target == nil {
		p.target = &heapprofd.Target{
			Counters: alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 1, TopSites: 1}),
			Stats:    alloctrack.NewAppStats(s.r.Serial, pid),
			Window:   s.hpWindow,
		}
		s.tracking = true
		s.classifyLocked(p, s.r.Package) // heapprofd profiles it by its name
	}
	return p.target
}

// hpWindow writes one dump's window into the capture.
func (s *runState) hpWindow(win *alloctrack.Window) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.r.Writer; w != nil {
		if err := w.Add(win); err != nil && len(s.notes) < maxNotes {
			s.notes = append(s.notes, err.Error())
		}
	}
}

// dump feeds one dump of pid, with the device time it covers.
func (s *runState) dump(pid int, win *alloctrack.Window, from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	if err := s.r.Attributor.Dump(pid, win, from, to); err != nil {
		s.r.Log.Debug("a heapprofd dump was not taken", zap.Int("pid", pid), zap.Error(err))
	}
}

// hpGone: heapprofd's last dump of pid says its process ended (it
// crashed, or am stopped it after its run): a test it was running keeps
// what was collected and is marked partial, as a DDM session's end does.
func (s *runState) hpGone(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.signal()
	if p := s.procs[pid]; p != nil && p.state == ofApp && !s.finished {
		p.told = true
		s.r.Attributor.Gone(pid)
	}
}

// goneUntold tells the attributor of the app's processes that left the
// JDWP list during the run without heapprofd saying so (their last dump
// had no sample, so it is not in the trace). The caller holds mu; the
// run's last dumps were read.
func (s *runState) goneUntold() {
	for _, pid := range s.tracked {
		if p := s.procs[pid]; p != nil && p.left && !p.told {
			p.told = true
			s.r.Attributor.Gone(pid)
		}
	}
}
