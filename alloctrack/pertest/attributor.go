package pertest

import (
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
}

// Attributor builds a Run from the runner's events and the backend's
// reports or dumps, fed as they arrive. It is not safe for concurrent use
// (the caller serialises); Snapshot may be called between feeds.
//
// THE SIGNATURES BELOW ARE THE CONTRACT OF ISSUE 34'S PARTS; the bodies
// are being written (see the branch).
type Attributor struct {
	cfg Config
	run Run
}

// New returns an Attributor for one run.
func New(cfg Config) *Attributor {
	return &Attributor{cfg: cfg, run: Run{Serial: cfg.Serial, API: cfg.API, Package: cfg.Package, Instrumentation: cfg.Instrumentation, Backend: cfg.Backend}}
}

// Event feeds one runner line read from logcat: the process that logged
// it and the device time it carries (zero when the layout has none), in
// the order logcat printed them. Events of one process are in order;
// lines lost in between are found from the sequence (a started: with no
// finished: before it) and named in Run.Problems.
func (a *Attributor) Event(pid int, at time.Time, ev instrument.RunnerEvent) {}

// Status feeds one status block of `am instrument -w -r` (no pid, no
// time): it gives each test its outcome and failure text, and tells a run
// that had no logcat lines which tests ran.
func (a *Attributor) Status(ev instrument.Event) {}

// Result feeds am's end of run (INSTRUMENTATION_RESULT/CODE): the run is
// complete, or crashed.
func (a *Attributor) Result(r instrument.Result) {}

// Report feeds one DDM window's report of process pid, in window order.
// overflowed: the report was full, so its oldest records were lost.
// Report reads r during the call and keeps nothing of it (its memory goes
// back to a pool afterwards).
func (a *Attributor) Report(pid int, r *allocreport.Report, overflowed bool) error { return nil }

// Dump feeds one heapprofd window of process pid: what was sampled from
// (device time) from to to, in the clock the Event times use.
func (a *Attributor) Dump(pid int, w *alloctrack.Window, from, to time.Time) error { return nil }

// Gone says process pid ended (crashed, or stopped by am at the end of
// its run): a test it was running keeps what was collected and is marked
// partial.
func (a *Attributor) Gone(pid int) {}

// Snapshot returns a copy of the run so far (tests still open included,
// as Unfinished).
func (a *Attributor) Snapshot() *Run { r := a.run; return &r }

// Finish ends the run and returns it; tests still open end Unfinished.
func (a *Attributor) Finish() *Run { r := a.run; return &r }
