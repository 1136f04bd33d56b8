package offline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/instrument"
)

// procState says whether a process is the app's.
type procState int

const (
	pending procState = iota // not named yet: its runner lines are held
	ofApp
	notApp
)

// maxHeld bounds the runner lines held for one process not named yet,
// and maxProcs the processes known.
const (
	maxHeld  = 100_000
	maxProcs = 4096
)

type heldEvent struct {
	at time.Time
	ev instrument.RunnerEvent
}

// proc is one process of the device seen during the run: in the JDWP
// list (then tracked), in the runner's lines, or both.
type proc struct {
	pid     int
	state   procState
	held    []heldEvent
	dropped int // runner lines left out (not the app's)
	// A tracked process: its session's cycle trigger, stop, and context.
	cycle  chan struct{}
	stop   chan struct{}
	cancel context.CancelFunc
	live   bool // its session runs
	// Its runner logged run started / run finished.
	ranStart, ranEnd bool
	// early: its first runner line came before any process was tracked
	// (an older line of the log, such as the one -T 1 prints).
	early bool
	// target counts its heapprofd dumps (Heapprofd set).
	target *heapprofd.Target
	// Heapprofd: listed is whether it is in the latest JDWP list, left
	// that it was listed and then was not (it ended); told that the
	// attributor was told it ended.
	listed, left, told bool
}

// runState is what Record shares between its goroutines; mu guards it
// and every call of the attributor and the writer.
type runState struct {
	r       *RunRecorder
	ctx     context.Context
	mu      sync.Mutex
	procs   map[int]*proc
	old     map[int]bool // pids of the first JDWP list, left alone
	listed  bool
	tracked []int
	notes   []string
	// ended: the tests whose finished: line was read; am's status of a
	// test's end cycles the tracker only for a test not among them.
	ended    map[string]bool
	finished bool
	tracking bool // a session was started
	// aborted: Record ended the run on the device (Abort): am's account
	// of that end is not fed.
	aborted bool
	// logClosed: Record closed the logcat stream; logEnd says why it
	// ended before (read once the reader is done).
	logClosed bool
	logEnd    string
	changed   chan struct{}
	sessions  sync.WaitGroup
	// hpCancel ends the heapprofd sessions (Heapprofd set).
	hpCancel context.CancelFunc
}

func newRunState(r *RunRecorder, ctx context.Context) *runState {
	return &runState{r: r, ctx: ctx, procs: map[int]*proc{}, old: map[int]bool{}, ended: map[string]bool{}, changed: make(chan struct{}, 1)}
}

// signal says something changed to whoever waits on changed.
func (s *runState) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// proc returns pid's process, made when first seen (nil past maxProcs).
func (s *runState) proc(pid int) *proc {
	p := s.procs[pid]
	if p == nil && len(s.procs) < maxProcs {
		p = &proc{pid: pid}
		s.procs[pid] = p
	}
	return p
}

// pids takes one JDWP list: every pid not seen before (and, without
// TrackExisting, not in the first list) gets a session at once.
func (s *runState) pids(list []int, first chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.listed {
		s.listed = true
		defer close(first)
		if !s.r.TrackExisting {
			for _, pid := range list {
				s.old[pid] = true
			}
			return
		}
	}
	for _, pid := range list {
		if s.old[pid] || s.finished {
			continue
		}
		p := s.proc(pid)
		switch {
		case p == nil || p.state == notApp:
		case s.r.Heapprofd != nil:
			s.tracking = true // heapprofd profiles it by name
			p.listed = true
		case p.stop == nil:
			s.startSession(p)
		}
	}
	if s.r.Heapprofd != nil {
		s.leftList(list)
	}
}

// leftList marks the processes listed before and not in list: they ended
// (heapprofd's sessions are not ended by it, DDM's are).
func (s *runState) leftList(list []int) {
	now := make(map[int]bool, len(list))
	for _, pid := range list {
		now[pid] = true
	}
	for _, p := range s.procs {
		if p.listed && !now[p.pid] {
			p.listed, p.left = false, true
		}
	}
}

// startSession tracks p: its tracker goes on as soon as the VM answers,
// before the app names itself; the name then says whether it is the app's.
func (s *runState) startSession(p *proc) {
	sctx, cancel := context.WithCancel(s.ctx)
	p.cycle, p.stop, p.cancel, p.live = make(chan struct{}, 1), make(chan struct{}), cancel, true
	s.tracking = true
	sess := &ddm.Session{
		Serial: s.r.Serial, PID: p.pid, API: s.r.API,
		Open:        func(ctx context.Context) (io.ReadWriteCloser, error) { return s.r.Open(ctx, p.pid) },
		EnableEarly: true,
		Accept:      func(app string) bool { return s.classify(p, app) },
		Bind: func(app string) (*alloctrack.Counters, *alloctrack.AppStats) {
			return alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 1, TopSites: 1}), alloctrack.NewAppStats(s.r.Serial, p.pid)
		},
		OnWindow: func(cy *ddm.Cycle, win *alloctrack.Window) { s.window(p, cy, win) },
		Config:   s.r.Config,
		Stop:     p.stop,
		CycleNow: p.cycle,
		Log:      s.r.Log.With(zap.Int("pid", p.pid)),
	}
	s.sessions.Add(1)
	go func() {
		defer s.sessions.Done()
		defer cancel()
		s.sessionEnded(p, sess.Run(sctx))
	}()
}

// classify takes the name p's VM gave: the app's process has its held
// runner lines fed in order; another's are dropped.
func (s *runState) classify(p *proc, app string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.signal()
	return s.classifyLocked(p, app)
}

// classifyLocked is classify with mu held.
func (s *runState) classifyLocked(p *proc, app string) bool {
	if app != s.r.Package {
		p.state, p.dropped, p.held = notApp, p.dropped+len(p.held), nil
		return false
	}
	p.state = ofApp
	s.tracked = append(s.tracked, p.pid)
	for _, h := range p.held {
		s.feed(p, h.at, h.ev)
	}
	p.held = nil
	return true
}

// sessionEnded: p's process is gone (or its session failed): a test it
// was running keeps what was collected. A session Record stopped (nil) is
// no end of the process.
func (s *runState) sessionEnded(p *proc, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.signal()
	p.live = false
	if p.state != ofApp {
		if err != nil && !errors.Is(err, alloctrack.ErrFiltered) {
			s.r.Log.Debug("a process that never named itself the app's was left", zap.Int("pid", p.pid), zap.Error(err))
		}
		return
	}
	if !s.finished && err != nil { // nil: stopped by Record, the process lives on
		s.r.Attributor.Gone(p.pid)
	}
	if err != nil && !errors.Is(err, alloctrack.ErrStreamEnded) && len(s.notes) < maxNotes {
		s.notes = append(s.notes, fmt.Sprintf("pid %d: tracking ended: %v", p.pid, err))
	}
}

// window takes one report of p.
func (s *runState) window(p *proc, cy *ddm.Cycle, win *alloctrack.Window) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.r.Writer; w != nil {
		err := w.Report(cy.Raw, cy.Report)
		if err == nil && win != nil {
			err = w.Add(win)
		}
		if err != nil && len(s.notes) < maxNotes {
			s.notes = append(s.notes, err.Error())
		}
	}
	if cy.Report == nil || s.finished {
		return
	}
	if err := s.r.Attributor.Report(p.pid, cy.Report, cy.Report.Overflowed()); err != nil && len(s.notes) < maxNotes {
		s.notes = append(s.notes, fmt.Sprintf("pid %d: a report: %v", p.pid, err))
	}
}

// event takes one runner line of pid.
func (s *runState) event(pid int, at time.Time, ev instrument.RunnerEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, known := s.procs[pid]
	p := s.proc(pid)
	if p == nil || s.finished {
		return
	}
	if !known && !s.tracking {
		p.early = true
	}
	switch ev.Kind {
	case instrument.TestFinished:
		s.ended[ev.Name] = true
		if p.cycle != nil {
			select {
			case p.cycle <- struct{}{}: // the tracker cycles between tests
			default:
			}
		}
	case instrument.RunStarted:
		p.ranStart = true
	case instrument.RunFinished:
		p.ranEnd = true
		defer s.signal()
	}
	switch {
	case p.state == ofApp:
		s.feed(p, at, ev)
	case p.state == notApp || len(p.held) >= maxHeld:
		p.dropped++
	default:
		p.held = append(p.held, heldEvent{at, ev})
	}
}

func (s *runState) feed(p *proc, at time.Time, ev instrument.RunnerEvent) {
	s.r.Attributor.Event(p.pid, at, ev)
}

// settled tells whether the run's processes are done: none of them is
// tracked any more and each that logged run started logged run finished.
func (s *runState) settled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if (p.live && p.state != notApp) || (p.state == ofApp && p.ranStart && !p.ranEnd) {
			return false
		}
	}
	return true
}

// runOver tells, without am's output, whether a run finished and no
// process of the app is left.
func (s *runState) runOver() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	over := false
	for _, p := range s.procs {
		if p.live && p.state != notApp {
			return false
		}
		over = over || (p.state == ofApp && p.ranEnd)
	}
	return over
}

// stopSessions ends every session: a tracked app's reads its last report
// and turns tracking off; one not named yet leaves at once. Sessions
// still running after the report timeout are cancelled.
func (s *runState) stopSessions() {
	s.mu.Lock()
	if s.hpCancel != nil {
		s.hpCancel() // perfetto's last dump is read, then its file removed
	}
	for _, p := range s.procs {
		switch {
		case p.live && p.state == ofApp:
			close(p.stop)
		case p.live:
			p.cancel()
		}
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.sessions.Wait(); close(done) }()
	cfg := s.r.Config
	cfg.Fill()
	select {
	case <-done:
		return
	case <-time.After(cfg.ReportTimeout + cfg.DisableTimeout):
	}
	s.mu.Lock()
	for _, p := range s.procs {
		if p.cancel != nil {
			p.cancel()
		}
	}
	s.mu.Unlock()
	<-done
}

// dropped says which runner lines were left out, "" when none were: lines
// of processes that are not the app's (another app, another run) or that
// were never tracked. The caller holds mu.
func (s *runState) dropped() string {
	var other, untracked []string
	var nOther, nUntracked int
	for _, pid := range slices.Sorted(maps.Keys(s.procs)) {
		p := s.procs[pid]
		switch {
		case p.dropped > 0:
			other, nOther = append(other, strconv.Itoa(pid)), nOther+p.dropped
		case len(p.held) > 0 && p.early && p.stop == nil:
			// Lines older than the run: nothing to say.
		case len(p.held) > 0:
			untracked, nUntracked = append(untracked, strconv.Itoa(pid)), nUntracked+len(p.held)
		}
	}
	var parts []string
	if nOther > 0 {
		parts = append(parts, fmt.Sprintf("%d of pids %s, not %s (another app or run)", nOther, strings.Join(other, ", "), s.r.Package))
	}
	if nUntracked > 0 {
		parts = append(parts, fmt.Sprintf("%d of pids %s, processes never tracked (not debuggable, older than the run, or gone before they could be asked their name)",
			nUntracked, strings.Join(untracked, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return "runner lines were left out: " + strings.Join(parts, "; ")
}
