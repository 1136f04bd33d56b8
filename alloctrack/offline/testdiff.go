package offline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// Test statuses in a TestDiff.
const (
	TestAdded     = "added"     // in the new run only
	TestRemoved   = "removed"   // in the base run only
	TestChanged   = "changed"   // in both, its figures or outcome differ
	TestUnchanged = "unchanged" // in both, the same
)

// TestSide is one test in one run of a TestDiff.
type TestSide struct {
	Outcome         pertest.Outcome `json:"outcome"`
	Allocations     uint64          `json:"allocations"`
	Bytes           uint64          `json:"bytes"`
	DurationSeconds float64         `json:"duration_seconds"`
	Estimated       bool            `json:"estimated,omitempty"`
	Partial         bool            `json:"partial,omitempty"`
}

// TestChange is how a test's figures moved: new minus base.
type TestChange struct {
	Allocations     int64   `json:"allocations"`
	Bytes           int64   `json:"bytes"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// TestDiffRow compares one test of two runs. A name that a run holds
// more than once (a test started again) is told apart by its occurrence:
// the k-th of one run is compared with the k-th of the other, and named
// "NAME #k" from the second on.
type TestDiffRow struct {
	Name   string     `json:"name"`
	Status string     `json:"status"`
	Base   *TestSide  `json:"base,omitempty"`
	New    *TestSide  `json:"new,omitempty"`
	Change TestChange `json:"change"`
}

// TestDiff compares two test runs test by test.
type TestDiff struct {
	Base      string `json:"base"`
	New       string `json:"new"`
	Added     int    `json:"added"`
	Removed   int    `json:"removed"`
	Changed   int    `json:"changed"`
	Unchanged int    `json:"unchanged"`
	// Tests are sorted by regression: the largest increase in bytes
	// first, then in allocations, then by name.
	Tests []TestDiffRow `json:"tests"`
}

// CompareTests compares two test runs test by test. Counts are per test
// (a test is a unit of work: its own duration is in the row).
func CompareTests(base, nw *TestRun) *TestDiff {
	d := &TestDiff{Base: base.Name, New: nw.Name}
	rows := map[string]*TestDiffRow{}
	var order []string
	side := func(r *TestRun, isNew bool) {
		seen := map[string]int{}
		for _, t := range r.Tests {
			seen[t.Name]++
			name := t.Name
			if k := seen[t.Name]; k > 1 {
				name = fmt.Sprintf("%s #%d", t.Name, k)
			}
			row := rows[name]
			if row == nil {
				row = &TestDiffRow{Name: name}
				rows[name] = row
				order = append(order, name)
			}
			s := &TestSide{Outcome: t.Outcome, Allocations: t.Allocations, Bytes: t.Bytes, DurationSeconds: t.DurationSeconds, Estimated: t.Estimated, Partial: t.Partial}
			if isNew {
				row.New = s
			} else {
				row.Base = s
			}
		}
	}
	side(base, false)
	side(nw, true)
	for _, name := range order {
		r := rows[name]
		r.Status, r.Change = status(r.Base, r.New)
		switch r.Status {
		case TestAdded:
			d.Added++
		case TestRemoved:
			d.Removed++
		case TestChanged:
			d.Changed++
		default:
			d.Unchanged++
		}
		d.Tests = append(d.Tests, *r)
	}
	slices.SortFunc(d.Tests, func(a, b TestDiffRow) int {
		if c := cmp.Compare(b.Change.Bytes, a.Change.Bytes); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Change.Allocations, a.Change.Allocations); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return d
}

// status says how a test moved from b to n (either may be nil) and by
// how much.
func status(b, n *TestSide) (string, TestChange) {
	var zero TestSide
	bs, ns := cmp.Or(b, &zero), cmp.Or(n, &zero)
	c := TestChange{Allocations: int64(ns.Allocations) - int64(bs.Allocations), Bytes: int64(ns.Bytes) - int64(bs.Bytes),
		DurationSeconds: ns.DurationSeconds - bs.DurationSeconds}
	switch {
	case b == nil:
		return TestAdded, c
	case n == nil:
		return TestRemoved, c
	case c.Allocations != 0 || c.Bytes != 0 || b.Outcome != n.Outcome || b.Partial != n.Partial:
		return TestChanged, c
	}
	return TestUnchanged, c
}
