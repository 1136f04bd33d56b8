package pertest

import (
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// Outcome is how a test ended.
type Outcome string

// Outcomes. Unfinished: the test started and nothing ended it (the run
// was cut, the device went away, lines were lost).
const (
	Passed           Outcome = "passed"
	Failed           Outcome = "failed"
	Errored          Outcome = "error"
	Ignored          Outcome = "ignored"
	AssumptionFailed Outcome = "assumption_failed"
	Crashed          Outcome = "crashed"
	Unfinished       Outcome = "unfinished"
)

// BetweenTests is the name of the share of a run outside every test: the
// process's start, the runner's own allocations, the time between tests.
const BetweenTests = "(between tests)"

// Figures are what one test (or the time between tests) allocated.
type Figures struct {
	Allocations uint64 `json:"allocations"`
	Bytes       uint64 `json:"bytes"`
	// Estimated: the figures are heapprofd estimates (Sampled holds what
	// the dumps had).
	Estimated          bool   `json:"estimated,omitempty"`
	SampledAllocations uint64 `json:"sampled_allocations,omitempty"`
	SampledBytes       uint64 `json:"sampled_bytes,omitempty"`
	// TopClasses and TopSites by bytes (at most Config.Top each).
	TopClasses []Class `json:"top_classes,omitempty"`
	TopSites   []Site  `json:"top_sites,omitempty"`
}

// Class is one class's share of a test.
type Class struct {
	Class       string `json:"class"`
	Allocations uint64 `json:"allocations"`
	Bytes       uint64 `json:"bytes"`
}

// Site is one allocation site's share of a test.
type Site struct {
	ID          string   `json:"site"`
	Class       string   `json:"class"`
	AppFrame    string   `json:"app_frame"`
	Frames      []string `json:"frames"`
	Allocations uint64   `json:"allocations"`
	Bytes       uint64   `json:"bytes"`
}

// Test is one test of a run, named as the runner names it.
type Test struct {
	Name    string  `json:"name"` // method(fully.qualified.Class)
	Class   string  `json:"class"`
	Method  string  `json:"method"`
	Outcome Outcome `json:"outcome"`
	PID     int     `json:"pid,omitempty"`
	// Start and End are device times (started: and its end), zero when
	// not known; DurationSeconds is End-Start.
	Start           time.Time `json:"start,omitzero"`
	End             time.Time `json:"end,omitzero"`
	DurationSeconds float64   `json:"duration_seconds"`
	Figures
	// Partial: the figures miss part of the test; Notes say what and why
	// (began before tracking was on, its process died, a report
	// overflowed, it crossed a tracker cycle, lines were lost).
	Partial bool     `json:"partial,omitempty"`
	Notes   []string `json:"notes,omitempty"`
	// BoundaryErrorSeconds is how far either boundary may be from the
	// test's own (0 for DDM's exact boundaries).
	BoundaryErrorSeconds float64 `json:"boundary_error_seconds"`
	// Failure is the stack or message of a failed, crashed or
	// assumption-failed test.
	Failure string `json:"failure,omitempty"`

	// Tally holds every class and site of the test (for pprof, budgets);
	// not written.
	Tally *alloctrack.Tally `json:"-"`
}

// Run is one instrumentation run as alloctrack saw it: its tests, in the
// order they started, and what fell between them. Total equals the sum of
// the tests' figures and Between, exactly (DDM) or as the same estimate
// (heapprofd).
type Run struct {
	Serial  string `json:"serial,omitempty"`
	API     int    `json:"api,omitempty"`
	Package string `json:"package"` // the app under test
	// Instrumentation is PKG/RUNNER when alloctrack started the run.
	Instrumentation string `json:"instrumentation,omitempty"`
	Backend         string `json:"backend"` // alloctrack.BackendDDM or BackendHeapprofd
	// Boundary says how boundaries were placed and their residual error,
	// in words, for every per-test output.
	Boundary string  `json:"boundary"`
	Tests    []Test  `json:"tests"`
	Between  Figures `json:"between_tests"`
	Total    Figures `json:"total"`
	// Expected is the runner's "run started: N tests" count (0: not
	// seen); Complete: the run reached its end (run finished, or am's
	// INSTRUMENTATION_CODE).
	Expected int  `json:"expected_tests,omitempty"`
	Complete bool `json:"complete"`
	// Problems lists what went wrong with the run as a whole (lines lost,
	// the device gone, a test started twice, events from a process we did
	// not track), each in a sentence.
	Problems []string `json:"problems,omitempty"`
	// Dropped is how many leading tests a Lean run no longer holds
	// (Attributor.Taken): Tests[0] is the run's test Dropped.
	// DroppedSum adds up their figures (no top class), DroppedOutcomes
	// counts their outcomes.
	Dropped         int             `json:"dropped_tests,omitempty"`
	DroppedSum      Figures         `json:"-"`
	DroppedOutcomes map[Outcome]int `json:"-"`

	BetweenTally *alloctrack.Tally `json:"-"`
}
