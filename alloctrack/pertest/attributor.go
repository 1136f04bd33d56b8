package pertest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
)

// Config is what an Attributor needs to know of the run.
type Config struct {
	Serial, Package, Instrumentation string
	// API is the device's API level: it says the entry order of a DDM
	// report (oldest first before Android 7.0, newest first from it).
	API     int
	Backend string // alloctrack.BackendDDM or alloctrack.BackendHeapprofd
	// Top is how many classes and sites each test lists (default 10).
	Top int
	// DumpInterval is heapprofd's dump interval (the boundary error's
	// main part); 0 for DDM.
	DumpInterval time.Duration
	// Lean: the caller needs of each test no more than its figures (the
	// daemon, whose Attributor lives as long as its process: thousands of
	// tests, maybe). A test's tally, once nothing more can go to it (its
	// finished marker counted; a heapprofd dump after its end placed),
	// keeps only its totals and its Top classes by bytes: Test.Tally
	// then holds only those, and TopSites is empty. A failure keeps its
	// first line, 1 KiB at most.
	Lean bool
	// Keep, in Lean mode, bounds the tests a run holds: once the caller
	// has taken them (Taken), tests that can no longer change are
	// dropped, down to the last Keep (0: none is dropped).
	Keep int
	// Orchestrator: the run is Android Test Orchestrator's (also assumed
	// when Instrumentation is androidx.test.orchestrator/...): the first
	// process to log "run started" only lists the tests (sheet 15), so its
	// lines make no tests and all it allocates counts as between tests.
	Orchestrator bool
}

// Attributor builds a Run from the runner's events and the backend's
// reports or dumps, fed as they arrive. It is not safe for concurrent use
// (the caller serialises); Snapshot may be called between feeds.
//
// Nothing fed to it makes it panic or drop what it collected: what does
// not fit (lines lost, a marker missed, a process gone) makes tests
// Partial with notes, or goes to Run.Problems.
type Attributor struct {
	cfg Config
	run Run // tests with what the runner said of them; figures are added by build
	// meta runs parallel to run.Tests.
	meta  []testMeta
	procs map[int]*proc
	order []int // pids in the order first seen
	// between and total count every record or dump: between tests, and
	// in all.
	between, total *alloctrack.Tally
	// dumped holds the heapprofd tallies of tests, by index.
	dumped map[int]*alloctrack.Tally
	// statusSeq: tests in the order am's START statuses named them.
	statusSeq  []int
	statusOpen int              // the test of the last START status not yet ended, or -1
	byName     map[string][]int // test indices by name
	listed     bool             // the orchestrator's listing process was seen
	sawEvents  bool
	sawStatus  bool
	problems   map[string]bool
	finished   bool
}

// ErrNilInput is returned for a nil report or window.
var ErrNilInput = errors.New("pertest: nil report or window")

// New returns an Attributor for one run.
func New(cfg Config) *Attributor {
	if cfg.Top <= 0 {
		cfg.Top = 10
	}
	if strings.HasPrefix(cfg.Instrumentation, "androidx.test.orchestrator/") {
		cfg.Orchestrator = true
	}
	return &Attributor{
		cfg: cfg,
		run: Run{Serial: cfg.Serial, API: cfg.API, Package: cfg.Package, Instrumentation: cfg.Instrumentation,
			Backend: cfg.Backend, Tests: []Test{}},
		procs:      map[int]*proc{},
		between:    alloctrack.NewTally(),
		total:      alloctrack.NewTally(),
		dumped:     map[int]*alloctrack.Tally{},
		byName:     map[string][]int{},
		statusOpen: -1,
		problems:   map[string]bool{},
	}
}

// Event feeds one runner line read from logcat: the process that logged
// it and the device time it carries (zero when the layout has none), in
// the order logcat printed them. Events of one process are in order;
// lines lost in between are found from the sequence (a started: with no
// finished: before it) and named in Run.Problems.
func (a *Attributor) Event(pid int, at time.Time, ev instrument.RunnerEvent) {
	if a.finished {
		return
	}
	a.event(pid, at, ev)
	if p := a.procs[pid]; p != nil {
		a.flushDumps(p, false)
	}
}

// Status feeds one status block of `am instrument -w -r` (no pid, no
// time): it gives each test its outcome and failure text, and tells a run
// that had no logcat lines which tests ran.
func (a *Attributor) Status(ev instrument.Event) {
	if !a.finished {
		a.status(ev)
	}
}

// Result feeds am's end of run (INSTRUMENTATION_RESULT/CODE): the run is
// complete, or crashed.
func (a *Attributor) Result(r instrument.Result) {
	if !a.finished {
		a.result(r)
	}
}

// Report feeds one DDM window's report of process pid, in window order.
// overflowed: the report was full, so its oldest records were lost.
// Report reads r during the call and keeps nothing of it (its memory goes
// back to a pool afterwards).
func (a *Attributor) Report(pid int, r *allocreport.Report, overflowed bool) error {
	if r == nil {
		return fmt.Errorf("pertest: report of pid %d: %w", pid, ErrNilInput)
	}
	if a.finished {
		return fmt.Errorf("pertest: report of pid %d after the run was finished", pid)
	}
	a.report(a.proc(pid), r, overflowed || r.Overflowed())
	return nil
}

// Dump feeds one heapprofd window of process pid: what was sampled from
// (device time) from to to, in the clock the Event times use.
func (a *Attributor) Dump(pid int, w *alloctrack.Window, from, to time.Time) error {
	if w == nil {
		return fmt.Errorf("pertest: dump of pid %d: %w", pid, ErrNilInput)
	}
	if a.finished {
		return fmt.Errorf("pertest: dump of pid %d after the run was finished", pid)
	}
	if to.Before(from) {
		return fmt.Errorf("pertest: dump of pid %d ends (%s) before it starts (%s)", pid, to.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano))
	}
	p := a.proc(pid)
	if p.dumps > 0 && from.After(p.lastTo) && len(p.gaps) < maxGaps {
		p.gaps = append(p.gaps, span{p.lastTo, from})
	}
	if p.dumps == 0 || from.Before(p.firstFrom) {
		p.firstFrom = from
	}
	p.lastTo = maxTime(p.lastTo, to)
	p.dumps++
	p.pending = append(p.pending, pendingDump{w: freeze(w), from: from, to: to})
	a.flushDumps(p, false)
	return nil
}

// Gone says process pid ended (crashed, or stopped by am at the end of
// its run): a test it was running keeps what was collected and is marked
// partial.
func (a *Attributor) Gone(pid int) {
	if a.finished {
		return
	}
	p := a.proc(pid)
	p.gone = true
	a.flushDumps(p, true)
}

// Snapshot returns a copy of the run so far (tests still open included,
// as Unfinished). Heapprofd dumps not yet placed (the runner's lines that
// bound them not read yet) are not in it. The tallies of its tests are
// the Attributor's own: read them only between feeds.
func (a *Attributor) Snapshot() *Run { return a.build() }

// Finish ends the run and returns it; tests still open end Unfinished.
// Feeds after Finish are ignored (Report and Dump return an error).
func (a *Attributor) Finish() *Run {
	if !a.finished {
		for _, pid := range a.order {
			a.flushDumps(a.procs[pid], true)
		}
		a.finished = true
	}
	return a.build()
}

// maxLeanFailure bounds a failure's text in Lean mode.
const maxLeanFailure = 1 << 10

// failure is the text kept of a test's failure.
func (a *Attributor) failure(s string) string {
	if !a.cfg.Lean {
		return s
	}
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > maxLeanFailure {
		s = s[:maxLeanFailure]
	}
	return strings.Clone(s)
}

// leanMarkers shrinks, in Lean mode, the tallies of the marker tests a
// report closed: no record goes to a test after its finished marker.
func (a *Attributor) leanMarkers(d *ddmState, touched map[int]bool) {
	if !a.cfg.Lean {
		return
	}
	for k := range touched {
		if mt := d.tests[k]; mt.closed {
			mt.tally.Shrink(a.cfg.Top)
		}
	}
}

// leanDumps shrinks, in Lean mode, the tallies of p's tests that ended by
// from, where a dump of p just placed begins: p's later dumps come later.
func (a *Attributor) leanDumps(p *proc, from time.Time) {
	for a.cfg.Lean && p.leanNext < len(p.started) {
		i := p.started[p.leanNext]
		if a.end(i).After(from) {
			return // its end is not known yet, or after from
		}
		if t := a.dumped[i]; t != nil {
			t.Shrink(a.cfg.Top)
		}
		p.leanNext++
	}
}

// problem adds a sentence to Run.Problems, once.
func (a *Attributor) problem(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if a.problems[s] || len(a.run.Problems) >= maxProblems {
		return
	}
	a.problems[s] = true
	a.run.Problems = append(a.run.Problems, s)
}

// maxProblems bounds Run.Problems (a run of garbage must not grow it
// without end).
const maxProblems = 200
