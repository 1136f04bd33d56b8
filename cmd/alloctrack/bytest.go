package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// reportByTest is `report --by test`: each input's test run (a capture
// directory holding tests.json, or the file), its tests sorted by bytes,
// and a budget's tests: rules judged.
func (c *reportCmd) reportByTest(stdout, stderr io.Writer) int {
	const who = "alloctrack report"
	switch {
	case *c.format != "text" && *c.format != "json":
		fmt.Fprintf(stderr, "%s: --by test writes text or json, not %s\n", who, *c.format)
		return exitUsage
	case *c.class != "" || *c.frame != "" || *c.thread >= 0 || *c.every != 0:
		fmt.Fprintf(stderr, "%s: --class, --frame, --thread and --agent.rate do not apply to --by test (tests.json holds each test's figures)\n", who)
		return exitUsage
	case c.bud != nil && (c.bud.HasAllocationLimits() || c.bud.HasHeapLimits()):
		fmt.Fprintf(stderr, "%s: --by test judges a budget's tests: rules only; %s also has total, classes, sites or heap limits: run report without --by test to judge them all\n", who, *c.budget)
		return exitUsage
	case c.bud != nil && !c.bud.HasTestLimits():
		fmt.Fprintf(stderr, "%s: %s has no tests: rules for --by test\n", who, *c.budget)
		return exitUsage
	}
	status := exitOK
	var runs []*offline.TestRun
	for _, name := range *c.inputs {
		r, err := offline.ReadTestRun(name)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", who, err)
			status = exitFailure
			continue
		}
		runs = append(runs, r)
	}
	w := bufio.NewWriter(stdout)
	if *c.format == "json" {
		writeTestsJSON(w, runs)
	} else {
		for _, r := range runs {
			writeTestTable(w, r)
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "%s: writing output: %v\n", who, err)
		return exitFailure
	}
	if c.bud == nil || status != exitOK {
		return status
	}
	return judgeTests(stderr, who, c.bud, runs, c.gate)
}

// byBytes returns the tests of run, the most bytes first (then most
// allocations, then in run order).
func byBytes(run *pertest.Run) []pertest.Test {
	tests := slices.Clone(run.Tests)
	slices.SortStableFunc(tests, func(a, b pertest.Test) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(b.Allocations, a.Allocations))
	})
	return tests
}

// writeTestsJSON writes each run with its tests sorted by bytes.
func writeTestsJSON(w io.Writer, runs []*offline.TestRun) {
	type jsonRun struct {
		Input string `json:"input"`
		*pertest.Run
	}
	out := struct {
		Runs []jsonRun `json:"runs"`
	}{Runs: []jsonRun{}}
	for _, r := range runs {
		sorted := *r.Run
		sorted.Tests = byBytes(r.Run)
		out.Runs = append(out.Runs, jsonRun{Input: r.Name, Run: &sorted})
	}
	writeIndentedJSON(w, out)
}

// writeTestTable writes a run's head and its tests, the most bytes first.
func writeTestTable(w io.Writer, r *offline.TestRun) {
	fmt.Fprintf(w, "%s\n  %s\n", r.Name, runHead(r.Run))
	if r.Boundary != "" {
		fmt.Fprintf(w, "  boundaries: %s\n", r.Boundary)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
	est := r.Backend == "heapprofd" || slices.ContainsFunc(r.Tests, func(t pertest.Test) bool { return t.Estimated })
	if est {
		fmt.Fprintf(w, "  ESTIMATES from heapprofd samples (~), not exact counts\n")
	}
	fmt.Fprintf(w, "\n  %10s %12s %9s  %-17s  %s\n", "allocs", "bytes", "duration", "outcome", "test")
	for _, t := range byBytes(r.Run) {
		notes := ""
		if t.Partial {
			notes = "  PARTIAL: " + cmp.Or(strings.Join(t.Notes, "; "), "figures miss part of the test")
		}
		fmt.Fprintf(w, "  %10s %12s %8.3fs  %-17s  %s%s\n", figure(t.Allocations, t.Estimated), figure(t.Bytes, t.Estimated), t.DurationSeconds, t.Outcome, t.Name, notes)
	}
	fmt.Fprintf(w, "  %10s %12s %9s  %-17s  %s\n", figure(r.Between.Allocations, r.Between.Estimated), figure(r.Between.Bytes, r.Between.Estimated), "", "", pertest.BetweenTests)
	fmt.Fprintf(w, "  %10s %12s %9s  %-17s  %s\n\n", figure(r.Total.Allocations, r.Total.Estimated), figure(r.Total.Bytes, r.Total.Estimated), "", "", "(total)")
}

// runHead says what a run was and how its tests ended.
func runHead(r *pertest.Run) string {
	var where []string
	if r.API > 0 {
		where = append(where, "API "+strconv.Itoa(r.API))
	}
	if r.Serial != "" {
		where = append(where, r.Serial)
	}
	if r.Backend != "" {
		where = append(where, r.Backend)
	}
	counts := map[pertest.Outcome]int{}
	partial := 0
	for _, t := range r.Tests {
		counts[t.Outcome]++
		if t.Partial {
			partial++
		}
	}
	var parts []string
	for _, o := range []pertest.Outcome{pertest.Passed, pertest.Failed, pertest.Errored, pertest.Crashed, pertest.Unfinished, pertest.AssumptionFailed, pertest.Ignored} {
		if counts[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[o], o))
		}
	}
	if partial > 0 {
		parts = append(parts, fmt.Sprintf("%d partial", partial))
	}
	end := "complete"
	if !r.Complete {
		end = "DID NOT FINISH"
	}
	return fmt.Sprintf("%s (%s): %d tests (%s), %s", r.Package, strings.Join(where, ", "), len(r.Tests), strings.Join(parts, ", "), end)
}

// figure formats a count, marked ~ when it is an estimate.
func figure(v uint64, estimated bool) string {
	if estimated {
		return "~" + strconv.FormatUint(v, 10)
	}
	return strconv.FormatUint(v, 10)
}

// judgeTests judges the tests of runs against the budget's tests: rules.
// A run that did not finish, or a partial test a rule matched, is not
// judged (exit 4) unless gate allows partial data; an empty run unless it
// allows empty ones. Then it is as judge says: 3 over budget, 5 a rule
// matched nothing, 0 within budget. The test command calls it too.
func judgeTests(stderr io.Writer, who string, bud *offline.Budget, runs []*offline.TestRun, gate *gateFlags) int {
	var all []offline.Measurement
	ok := true
	for _, r := range runs {
		if !gate.admit(stderr, who, r.Shortfall()) {
			ok = false
			continue
		}
		ms := bud.MeasureTests(r)
		said := map[string]bool{}
		for _, m := range ms {
			if m.Partial == nil || said[m.Partial.Why] {
				continue
			}
			said[m.Partial.Why] = true
			ok = gate.admit(stderr, who, m.Partial) && ok
		}
		all = append(all, ms...)
	}
	if !ok {
		fmt.Fprintf(stderr, "%s: the budget's tests: rules were not judged: a test run holds less than its whole\n", who)
		return exitInsufficient
	}
	return judge(stderr, who, all)
}

// testRunsOf returns the test runs of the inputs that hold one (capture
// directories with tests.json), for a budget's tests: rules judged by
// report without --by test.
func testRunsOf(inputs []string) ([]*offline.TestRun, error) {
	var runs []*offline.TestRun
	for _, in := range inputs {
		if offline.TestRunPath(in) == "" {
			continue
		}
		r, err := offline.ReadTestRun(in)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// diffByTest is `diff --by test`: two test runs compared test by test,
// the largest increase in bytes first.
func (c *diffCmd) diffByTest(stdout, stderr io.Writer) int {
	const who = "alloctrack diff"
	if *c.every != 0 {
		fmt.Fprintf(stderr, "%s: --agent.rate does not apply to --by test\n", who)
		return exitUsage
	}
	var runs [2]*offline.TestRun
	for i, p := range []string{*c.base, *c.new} {
		r, err := offline.ReadTestRun(p)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n", who, []string{"base", "new"}[i], err)
			return exitFailure
		}
		runs[i] = r
	}
	ok := true // every reason is said at once
	for _, r := range runs {
		sf := r.Shortfall()
		if sf == nil {
			sf = r.PartialShortfall()
		}
		ok = c.gate.admit(stderr, who, sf) && ok
	}
	if !ok {
		return exitInsufficient
	}
	d := offline.CompareTests(runs[0], runs[1])
	shown := shownOf(*c.top, len(d.Tests), "tests")
	if *c.top > 0 {
		d.Tests = d.Tests[:min(*c.top, len(d.Tests))]
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if *c.format == "json" {
		writeIndentedJSON(w, d)
		return exitOK
	}
	for i, r := range runs {
		fmt.Fprintf(w, "%-4s %s\n     %s\n", []string{"base", "new"}[i], r.Name, runHead(r.Run))
	}
	fmt.Fprintf(w, "tests: %d added, %d removed, %d changed, %d unchanged (counts per test; ~: estimate)\n\n", d.Added, d.Removed, d.Changed, d.Unchanged)
	fmt.Fprintf(w, "%s, largest regression first\n  %-9s %12s %12s %12s %11s %11s %11s  %-23s  %s\n", shown,
		"status", "base bytes", "new bytes", "change", "base allocs", "new allocs", "change", "outcome", "test")
	for _, r := range d.Tests {
		b, n := sideFigures(r.Base), sideFigures(r.New)
		fmt.Fprintf(w, "  %-9s %12s %12s %+12d %11s %11s %+11d  %-23s  %s\n", r.Status, b[1], n[1], r.Change.Bytes, b[0], n[0], r.Change.Allocations, outcomes(r), r.Name)
	}
	return exitOK
}

// sideFigures returns a test's allocations and bytes in one run, "-" when
// the run does not hold it.
func sideFigures(s *offline.TestSide) [2]string {
	if s == nil {
		return [2]string{"-", "-"}
	}
	return [2]string{figure(s.Allocations, s.Estimated), figure(s.Bytes, s.Estimated)}
}

// outcomes says how a test ended in each run.
func outcomes(r offline.TestDiffRow) string {
	o := func(s *offline.TestSide) string {
		if s == nil {
			return "-"
		}
		if s.Partial {
			return string(s.Outcome) + "*"
		}
		return string(s.Outcome)
	}
	if r.Base != nil && r.New != nil && r.Base.Outcome == r.New.Outcome && r.Base.Partial == r.New.Partial {
		return o(r.New)
	}
	return o(r.Base) + " -> " + o(r.New)
}

// isTestsFile tells whether input name is a tests.json file (not its
// capture directory): report reads it only with --by test.
func (c *reportCmd) isTestsFile(name string) bool {
	if offline.TestRunPath(name) != name {
		return false
	}
	_, err := offline.ReadTestRun(name)
	return err == nil
}

// judgeTestRuns judges the test runs of report's inputs (capture
// directories with tests.json) against bud's tests: rules.
func (c *reportCmd) judgeTestRuns(stderr io.Writer, bud *offline.Budget) int {
	const who = "alloctrack report"
	runs, err := testRunsOf(*c.inputs)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", who, err)
		return exitFailure
	}
	if len(runs) == 0 {
		fmt.Fprintf(stderr, "%s: the budget has tests: rules and no input holds a test run (a capture directory with %s)\n", who, offline.TestsFile)
		return exitUsage
	}
	return judgeTests(stderr, who, bud, runs, c.gate)
}
