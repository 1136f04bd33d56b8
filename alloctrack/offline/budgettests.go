package offline

import (
	"fmt"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// HasTestLimits tells whether the budget limits tests (tests:).
func (b *Budget) HasTestLimits() bool { return len(b.Tests) > 0 }

// MeasureTests measures each test of run against every tests: rule whose
// expression matches its name (method(pkg.Class) as the runner gives it,
// or pkg.Class.method; see NameMatcher.Test), in the budget's order, then
// the run's. A rule limits each test it matches on its own, not their
// sum; per-second limits use the test's duration, and are not measured
// for a test whose duration is unknown (0: an ignored test, or no device
// times). Ignored tests did not run and are not measured. A measurement
// of a partial test has Partial set; a rule that matched no test measures
// nothing (0) against each of its limits, with Unmatched set.
func (b *Budget) MeasureTests(run *TestRun) []Measurement {
	var out []Measurement
	for i, r := range b.Tests {
		rule := fmt.Sprintf("tests[%d] %s", i, asTyped(r.Match))
		matched := false
		var names []string
		for _, t := range run.Tests {
			names = append(names, t.Name)
			if t.Outcome == pertest.Ignored || !r.m.Test(t.Name, t.Class, t.Method) {
				continue
			}
			matched = true
			out = append(out, measureTest(rule, r.Limits, run, t)...)
		}
		if !matched {
			miss := &Unmatched{Names: "test", Optional: r.Optional, Near: r.m.near(names)}
			if len(run.Tests) == 0 {
				miss.Why = "the run holds no test"
			}
			for _, m := range measureTest(rule, r.Limits, run, pertest.Test{DurationSeconds: 1}) {
				m.Rule, m.Unmatched = rule+" in "+run.Name, miss
				out = append(out, m)
			}
		}
	}
	return out
}

// measureTest measures test t of run against limits l of rule.
func measureTest(rule string, l Limits, run *TestRun, t pertest.Test) []Measurement {
	var out []Measurement
	on := fmt.Sprintf("%s on %s", rule, t.Name)
	var partial *ShortfallError
	if t.Partial {
		partial = &ShortfallError{Input: run.Name, Why: "the test " + partialWhy(t) + " is partial"}
	}
	add := func(what string, v, limit float64) {
		out = append(out, Measurement{Rule: on, What: what, Value: v, Limit: limit, Estimated: t.Estimated, Partial: partial})
	}
	if sec := t.DurationSeconds; sec > 0 {
		if l.MaxAllocationsPerSecond != nil {
			add("allocations per second", float64(t.Allocations)/sec, *l.MaxAllocationsPerSecond)
		}
		if l.MaxBytesPerSecond != nil {
			add("bytes per second", float64(t.Bytes)/sec, *l.MaxBytesPerSecond)
		}
	}
	if l.MaxAllocations != nil {
		add("allocations", float64(t.Allocations), float64(*l.MaxAllocations))
	}
	if l.MaxBytes != nil {
		add("bytes", float64(t.Bytes), float64(*l.MaxBytes))
	}
	return out
}
