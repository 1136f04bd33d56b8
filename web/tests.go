package web

import (
	"maps"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// Tests are an app's instrumentation tests on its page (JSON and HTML):
// the one running now and the last that ended, newest first.
type Tests struct {
	Current *TestRow  `json:"current,omitempty"`
	Recent  []TestRow `json:"recent"`
	// Runs is how many runs are under way (processes that ran tests
	// and have not ended: their tests' figures may still change).
	Runs int `json:"runs_under_way"`
	// Outcomes counts the tests that ended since the daemon started, by
	// outcome; Allocations and Bytes are what was counted inside tests.
	Outcomes    map[string]uint64 `json:"outcomes"`
	Allocations uint64            `json:"allocations"`
	Bytes       uint64            `json:"bytes"`
}

// TestRow is one test.
type TestRow struct {
	Name            string  `json:"name"`
	Class           string  `json:"class"`
	Method          string  `json:"method"`
	Outcome         string  `json:"outcome"`
	PID             int     `json:"pid"`
	DurationSeconds float64 `json:"duration_seconds"`
	Allocations     uint64  `json:"allocations"`
	Bytes           uint64  `json:"bytes"`
	// Estimated: heapprofd estimates; BoundaryErrorSeconds is how far a
	// boundary may be from the test's own (0 for DDM: exact).
	Estimated            bool    `json:"estimated,omitempty"`
	BoundaryErrorSeconds float64 `json:"boundary_error_seconds"`
	// Partial: the figures miss part of the test; Notes say why.
	Partial    bool        `json:"partial,omitempty"`
	Notes      []string    `json:"notes,omitempty"`
	Failure    string      `json:"failure,omitempty"`
	TopClasses []TestClass `json:"top_classes,omitempty"`
}

// TestClass is one of a test's top classes.
type TestClass struct {
	Class       string `json:"class"`
	Allocations uint64 `json:"allocations"`
	Bytes       uint64 `json:"bytes"`
}

// buildTests is an app's tests, nil for an app that never ran one.
func buildTests(ts *alloctrack.AppTests) *Tests {
	if !ts.Seen {
		return nil
	}
	out := &Tests{Recent: make([]TestRow, 0, len(ts.Recent)), Outcomes: maps.Clone(ts.Outcomes), Allocations: ts.Allocations, Bytes: ts.Bytes, Runs: ts.Runs}
	if out.Outcomes == nil {
		out.Outcomes = map[string]uint64{}
	}
	for i := len(ts.Recent) - 1; i >= 0; i-- {
		out.Recent = append(out.Recent, testRow(&ts.Recent[i]))
	}
	if ts.Current != nil {
		r := testRow(ts.Current)
		out.Current = &r
	}
	return out
}

func testRow(t *alloctrack.TestSummary) TestRow {
	r := TestRow{Name: clean(t.Name), Class: clean(t.Class), Method: clean(t.Method), Outcome: clean(t.Outcome), PID: t.PID,
		DurationSeconds: t.Duration.Seconds(), Allocations: t.Allocations, Bytes: t.Bytes, Estimated: t.Estimated,
		BoundaryErrorSeconds: t.BoundaryError.Seconds(), Partial: t.Partial, Failure: clean(t.Failure)}
	for _, n := range t.Notes {
		r.Notes = append(r.Notes, clean(n))
	}
	for _, c := range t.TopClasses {
		r.TopClasses = append(r.TopClasses, TestClass{Class: clean(c.Class), Allocations: c.Allocations, Bytes: c.Bytes})
	}
	return r
}
