package offline

import (
	"fmt"
	"math"
	"slices"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/gate"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// RelativeVerdict is a relative rule's judgment of one thing it matched
// (a test; a rule's sum for total, classes and sites) in one measure.
type RelativeVerdict struct {
	Rule      string // "tests[0] '.*' on NAME", "classes[1] 'regex'"
	What      string // "allocations" or "bytes"
	Increase  float64
	Level     float64
	Unmatched *Unmatched // the rule matched nothing in any run
	gate.Result
}

// relRun is one run's figures as the relative rules read them.
type relRun struct {
	tally *alloctrack.Tally // nil: the run holds no allocations
	tests *TestRun          // nil: not a test run
}

// readRelRun reads a run; one that holds less than a whole run is a
// *ShortfallError.
func readRelRun(path string) (relRun, error) {
	var r relRun
	if TestRunPath(path) != "" {
		tr, err := ReadTestRun(path)
		if err != nil {
			return r, err
		}
		if sf := tr.Shortfall(); sf != nil {
			return r, sf
		}
		r.tests = tr
	}
	in, err := ReadInput(path)
	if err != nil {
		if r.tests != nil {
			return r, nil
		}
		return r, err
	}
	if sf := in.Shortfall(); sf != nil && r.tests == nil {
		return r, sf
	}
	r.tally = alloctrack.NewTally()
	return r, in.AddTo(r.tally)
}

func readRelRuns(paths []string) ([]relRun, error) {
	out := make([]relRun, 0, len(paths))
	for _, p := range paths {
		r, err := readRelRun(p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// relItem is one series of a relative rule, before judgment.
type relItem struct {
	rule, what string
	rel        *Relative
	miss       *Unmatched
	s          gate.Series
}

// JudgeRelative judges the budget's relative rules: the runs at paths nw
// against the baseline's runs at base. Rules with the same increase and
// level are judged together by one gate.Compare; across such groups the
// level is split in proportion to their series (Bonferroni), so the
// chance of any false alarm in the whole budget stays at most the level.
func (b *Budget) JudgeRelative(base, nw []string) ([]RelativeVerdict, error) {
	br, err := readRelRuns(base)
	if err != nil {
		return nil, err
	}
	nr, err := readRelRuns(nw)
	if err != nil {
		return nil, err
	}
	items := b.relItems(br, nr)
	type group struct{ inc, level float64 }
	groups := map[group][]int{}
	n := 0
	for i, it := range items {
		if it.miss == nil {
			g := group{it.rel.increase, it.rel.Level}
			groups[g] = append(groups[g], i)
			n++
		}
	}
	out := make([]RelativeVerdict, len(items))
	for i, it := range items {
		out[i] = RelativeVerdict{Rule: it.rule, What: it.what, Increase: it.rel.increase, Level: it.rel.Level, Unmatched: it.miss, Result: gate.Result{Key: it.s.Key}}
	}
	for g, idx := range groups {
		ss := make([]gate.Series, len(idx))
		for j, i := range idx {
			ss[j] = items[i].s
		}
		cfg := gate.Config{Level: g.level * float64(len(idx)) / float64(n), MinEffect: g.inc}
		for j, res := range gate.Compare(ss, cfg) {
			out[idx[j]].Result = res
		}
	}
	return out, nil
}

// relItems builds the series of every relative rule, in budget order.
func (b *Budget) relItems(base, nw []relRun) []relItem {
	var out []relItem
	add := func(rule string, rel *Relative, miss *Unmatched, key string, val func(relRun, string) (float64, float64, bool)) {
		for _, what := range rel.metrics() {
			s := gate.Series{Key: key + " " + what}
			s.Base, s.BaseSE = relSide(base, what, val)
			s.New, s.NewSE = relSide(nw, what, val)
			out = append(out, relItem{rule: rule, what: what, rel: rel, miss: miss, s: s})
		}
	}
	if b.Total != nil && b.Total.Relative != nil {
		add("total", b.Total.Relative, nil, "total", func(r relRun, what string) (float64, float64, bool) {
			if r.tally == nil {
				return 0, 0, false
			}
			v, se := totalValue(r.tally, what)
			return v, se, true
		})
	}
	for i, r := range b.Classes {
		if r.Relative != nil {
			rule := fmt.Sprintf("classes[%d] %s", i, asTyped(r.Match))
			add(rule, r.Relative, relMiss(r, "class", base, nw, classesOf), rule, func(run relRun, what string) (float64, float64, bool) {
				if run.tally == nil {
					return 0, 0, false
				}
				c, _ := matchClasses(run.tally, r)
				return pick(what, c.Allocations, c.Bytes), 0, true
			})
		}
	}
	for i, r := range b.Sites {
		if r.Relative != nil {
			rule := fmt.Sprintf("sites[%d] %s", i, asTyped(r.Match))
			add(rule, r.Relative, relMiss(r, "frame", base, nw, framesOf), rule, func(run relRun, what string) (float64, float64, bool) {
				if run.tally == nil {
					return 0, 0, false
				}
				v, se := siteValue(run.tally, r, what)
				return v, se, true
			})
		}
	}
	for i, r := range b.Tests {
		if r.Relative != nil {
			out = append(out, b.testItems(i, r, base, nw)...)
		}
	}
	return out
}

func pick[T uint64 | float64](what string, allocs, bytes T) float64 {
	if what == "bytes" {
		return float64(bytes)
	}
	return float64(allocs)
}

// totalValue is a run's total and, for an estimate, its sampling error.
func totalValue(t *alloctrack.Tally, what string) (v, se float64) {
	if !t.Estimated {
		return pick(what, t.Total.Allocations, t.Total.Bytes), 0
	}
	v = pick(what, t.Total.Allocations, t.Total.Bytes)
	return v, sampledSE(v, t.Sampled.Allocations)
}

// siteValue sums the sites with a frame r matches, and their errors.
func siteValue(t *alloctrack.Tally, r BudgetRule, what string) (v, se float64) {
	for _, s := range t.TopSites(0, false) {
		if !r.m.AnyFrame(s.Frames) {
			continue
		}
		if !s.Estimated {
			v += pick(what, s.Allocations, s.Bytes)
			continue
		}
		e := pick(what, s.Estimate.Allocations, s.Estimate.Bytes)
		v += e
		se = math.Hypot(se, sampledSE(e, s.Sampled.Allocations))
	}
	return v, se
}

// relSide lists val over runs: the runs that have a value.
func relSide(runs []relRun, what string, val func(relRun, string) (float64, float64, bool)) (vals, ses []float64) {
	sampled := false
	for _, r := range runs {
		v, se, ok := val(r, what)
		if ok {
			vals, ses = append(vals, v), append(ses, se)
			sampled = sampled || se > 0
		}
	}
	if !sampled {
		ses = nil
	}
	return vals, ses
}

func classesOf(t *alloctrack.Tally) []string {
	var out []string
	for name := range t.Classes {
		out = append(out, name)
	}
	return out
}

func framesOf(t *alloctrack.Tally) []string { return frameNames(t.TopSites(0, false)) }

// relMiss says that r matched no class (or frame) of any run, or nil.
func relMiss(r BudgetRule, names string, base, nw []relRun, of func(*alloctrack.Tally) []string) *Unmatched {
	var all []string
	for _, run := range slices.Concat(base, nw) {
		if run.tally == nil {
			continue
		}
		for _, n := range of(run.tally) {
			if (names == "class" && r.m.Class(n)) || (names == "frame" && r.m.Frame(n)) {
				return nil
			}
			all = append(all, n)
		}
	}
	slices.Sort(all)
	return &Unmatched{Names: names, Optional: r.Optional, Near: r.m.near(slices.Compact(all))}
}

// testItems are the series of tests rule r (the i-th): one per test it
// matches in any run, valued in the runs that ran it.
func (b *Budget) testItems(i int, r BudgetRule, base, nw []relRun) []relItem {
	rule := fmt.Sprintf("tests[%d] %s", i, asTyped(r.Match))
	var names, all []string
	for _, run := range slices.Concat(base, nw) {
		if run.tests == nil {
			continue
		}
		for _, t := range run.tests.Tests {
			all = append(all, t.Name)
			if t.Outcome != pertest.Ignored && r.m.Test(t.Name, t.Class, t.Method) && !slices.Contains(names, t.Name) {
				names = append(names, t.Name)
			}
		}
	}
	if len(names) == 0 {
		miss := &Unmatched{Names: "test", Optional: r.Optional, Near: r.m.near(all)}
		var out []relItem
		for _, what := range r.Relative.metrics() {
			out = append(out, relItem{rule: rule, what: what, rel: r.Relative, miss: miss, s: gate.Series{Key: "test: " + what}})
		}
		return out
	}
	slices.Sort(names)
	var out []relItem
	for _, name := range names {
		val := func(run relRun, what string) (float64, float64, bool) {
			if run.tests == nil {
				return 0, 0, false
			}
			for _, t := range run.tests.Tests {
				if t.Name == name && t.Outcome != pertest.Ignored {
					v := testValue(t.Figures)
					return pick(what, v.Allocations, v.Bytes), pick(what, v.AllocationsSE, v.BytesSE), true
				}
			}
			return 0, 0, false
		}
		for _, what := range r.Relative.metrics() {
			s := gate.Series{Key: "test:" + name + " " + what}
			s.Base, s.BaseSE = relSide(base, what, val)
			s.New, s.NewSE = relSide(nw, what, val)
			out = append(out, relItem{rule: rule + " on " + name, what: what, rel: r.Relative, s: s})
		}
	}
	return out
}

// String says what a verdict found: medians, the change with its
// interval, and whether it breaches the rule.
func (v RelativeVerdict) String() string {
	if v.Unmatched != nil {
		return fmt.Sprintf("%s: matched no %s in any run", v.Rule, v.Unmatched.Names)
	}
	verdict := "within"
	switch {
	case v.Breach:
		verdict = "BREACH"
	case v.TooFew:
		verdict = fmt.Sprintf("too few runs to tell (%d a side needed)", v.RunsNeeded)
	}
	return fmt.Sprintf("%s: %s: median %s → %s, ×%.3f (interval ×%.3f–×%.3f, p %.3g), limit +%g%% at level %g: %s",
		v.Rule, v.What, num(math.Round(v.BaseMedian)), num(math.Round(v.NewMedian)), v.Ratio, v.Lo, v.Hi, v.P, 100*v.Increase, v.Level, verdict)
}
