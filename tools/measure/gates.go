package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/gate"
	"github.com/alloctrack/alloctrack/sim"
)

// gatesOpts sets the gate measurement: how many trials of each kind, and
// the suite, noise and gate they use.
type gatesOpts struct {
	trials, runs, tests int
	seed                uint64
	effect              float64 // the true regression of the A/B trials, 0.15
	metric              string  // "allocations" or "bytes"
	scope               string  // "all" (tests, classes, sites) or "tests"
	noise               sim.RunNoise
	cfg                 gate.Config
}

// trialSuite is trial k's suite and noise: each trial is another app,
// with its own amounts and its tests' own CVs.
func (o gatesOpts) trialSuite(k int) (sim.Suite, sim.RunNoise) {
	s := o.seed*1_000_003 + uint64(k)
	suite := sim.SeededSuite("com.example.test", "com.example.app", sim.SeedSpec{Tests: o.tests, Seed: s, Allocations: 2000})
	n := o.noise
	n.Seed = s
	return suite, n
}

// runs returns runs first..first+count-1 of m under n.
func runs(m *sim.SuiteModel, n sim.RunNoise, first, count int) [][]sim.TestCounts {
	var out [][]sim.TestCounts
	for r := first; r < first+count; r++ {
		out = append(out, m.Run(n, r))
	}
	return out
}

func metricOf(c alloctrack.Count, metric string) float64 {
	if metric == "bytes" {
		return float64(c.Bytes)
	}
	return float64(c.Allocations)
}

// gateSeries is one gate's series, sorted by key: each test, and each
// class and site summed over the run's tests, one value per run a side.
// With testsOnly, only the tests.
func gateSeries(base, nw [][]sim.TestCounts, metric string, testsOnly bool) []gate.Series {
	idx := map[string]int{}
	var out []gate.Series
	add := func(key string, side, run int, v float64) {
		i, ok := idx[key]
		if !ok {
			i = len(out)
			idx[key] = i
			out = append(out, gate.Series{Key: key, Base: make([]float64, len(base)), New: make([]float64, len(nw))})
		}
		if side == 0 {
			out[i].Base[run] += v
		} else {
			out[i].New[run] += v
		}
	}
	for side, rs := range [][][]sim.TestCounts{base, nw} {
		for r, tests := range rs {
			for _, t := range tests {
				add("test:"+t.Name, side, r, metricOf(t.Total, metric))
				if testsOnly {
					continue
				}
				for k, c := range t.ByClass {
					add("class:"+k, side, r, metricOf(c, metric))
				}
				for k, c := range t.BySiteID {
					add("site:"+k, side, r, metricOf(c, metric))
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b gate.Series) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// trialResult is what one trial's gate said.
type trialResult struct {
	series      int
	breach      bool // any series breached: the gate fails
	significant bool // any series significant, breach or not
	found       bool // A/B: the regressed test breached
	elsewhere   bool // A/B: a series of another test breached
	runsNeeded  int  // A/B: RunsNeeded of the regressed test
}

// trial runs trial k: A/A when ab is false, else the new side's test
// k%tests is +effect.
func (o gatesOpts) trial(k int, ab bool) trialResult {
	suite, n := o.trialSuite(k)
	m := sim.NewSuiteModel(suite)
	nn := n
	var target string
	if ab {
		target = suite.Tests[k%len(suite.Tests)].Name()
		nn.Regress = map[string]float64{target: 1 + o.effect}
	}
	s := gateSeries(runs(m, n, 0, o.runs), runs(m, nn, o.runs, o.runs), o.metric, o.scope == "tests")
	res := trialResult{series: len(s)}
	for _, r := range gate.Compare(s, o.cfg) {
		res.breach = res.breach || r.Breach
		res.significant = res.significant || r.Significant
		if r.Key == "test:"+target {
			res.found, res.runsNeeded = r.Breach, r.RunsNeeded
		} else if r.Breach && strings.HasPrefix(r.Key, "test:") {
			res.elsewhere = true
		}
	}
	return res
}

// wilson is the 95 % Wilson score interval of k successes in n trials.
func wilson(k, n int) (lo, hi float64) {
	if n == 0 {
		return 0, 1
	}
	const z = 1.959964
	p, fn := float64(k)/float64(n), float64(n)
	c := (p + z*z/(2*fn)) / (1 + z*z/fn)
	h := z / (1 + z*z/fn) * math.Sqrt(p*(1-p)/fn+z*z/(4*fn*fn))
	return math.Max(0, c-h), math.Min(1, c+h)
}

func rate(name string, k, n int) string {
	lo, hi := wilson(k, n)
	return fmt.Sprintf("%s: %d of %d = %.1f %% (95 %% CI %.1f-%.1f %%)", name, k, n, 100*float64(k)/float64(n), 100*lo, 100*hi)
}

func gates(args []string) error {
	fs := flag.NewFlagSet("gates", flag.ExitOnError)
	o := gatesOpts{}
	fs.IntVar(&o.trials, "trials", 200, "A/A comparisons, and as many A/B")
	fs.IntVar(&o.runs, "runs", 5, "runs a side")
	fs.IntVar(&o.tests, "tests", 20, "tests a suite")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the suites and their noise")
	fs.Float64Var(&o.effect, "effect", 0.15, "the true regression of one test in the A/B trials")
	fs.StringVar(&o.metric, "metric", "allocations", "allocations or bytes")
	fs.StringVar(&o.scope, "scope", "all", "series of a gate: all (tests, classes, sites) or tests")
	fs.Float64Var(&o.cfg.Level, "level", 0.05, "the gate's level")
	fs.Float64Var(&o.cfg.MinEffect, "min-effect", 0.10, "the gate's minimum effect")
	n := sim.DefaultRunNoise(0)
	fs.Float64Var(&n.MinCV, "cv.min", n.MinCV, "smallest per-test CV")
	fs.Float64Var(&n.MaxCV, "cv.max", n.MaxCV, "largest per-test CV")
	fs.Float64Var(&n.SiteCV, "cv.site", n.SiteCV, "per-site CV")
	fs.Float64Var(&n.OutlierRate, "outliers", n.OutlierRate, "chance of an outlier per test and run")
	fs.Parse(args)
	if o.metric != "allocations" && o.metric != "bytes" {
		return fmt.Errorf("-metric %q: allocations or bytes", o.metric)
	}
	if o.scope != "all" && o.scope != "tests" {
		return fmt.Errorf("-scope %q: all or tests", o.scope)
	}
	if o.trials < 1 || o.runs < 1 || o.tests < 1 {
		return fmt.Errorf("-trials, -runs and -tests must be at least 1")
	}
	o.noise = n
	fmt.Print(o.measure())
	return nil
}

// measure runs the trials and returns the report.
func (o gatesOpts) measure() string {
	var fa, sig, found, failed, elsewhere, series int
	var needed []int
	for k := range o.trials {
		aa := o.trial(k, false)
		series += aa.series
		fa += b2i(aa.breach)
		sig += b2i(aa.significant)
		ab := o.trial(k, true)
		found += b2i(ab.found)
		failed += b2i(ab.breach)
		elsewhere += b2i(ab.elsewhere)
		needed = append(needed, ab.runsNeeded)
	}
	slices.Sort(needed)
	var b strings.Builder
	fmt.Fprintf(&b, "gates: %d A/A and %d A/B trials, %d tests a suite (%.1f series a gate on average), %d runs a side, %s, scope %s\n",
		o.trials, o.trials, o.tests, float64(series)/float64(o.trials), o.runs, o.metric, o.scope)
	fmt.Fprintf(&b, "noise: per-test CV %.1f-%.1f %%, per-site %.1f %%, outliers %.1f %% of test runs (+%.0f-%.0f %%); gate: level %.0f %%, min effect +%.0f %%; A/B: +%.0f %% on one test; seed %d\n",
		100*o.noise.MinCV, 100*o.noise.MaxCV, 100*o.noise.SiteCV, 100*o.noise.OutlierRate, 100*o.noise.OutlierMin, 100*o.noise.OutlierMax,
		100*o.cfg.Level, 100*o.cfg.MinEffect, 100*o.effect, o.seed)
	fmt.Fprintln(&b, rate("false alarms (A/A gates with a breach)", fa, o.trials))
	fmt.Fprintln(&b, rate("A/A gates with any significant series", sig, o.trials))
	fmt.Fprintln(&b, rate("power (A/B: the regressed test breaches)", found, o.trials))
	fmt.Fprintln(&b, rate("A/B gates that fail", failed, o.trials))
	fmt.Fprintln(&b, rate("A/B gates where another test breaches", elsewhere, o.trials))
	fmt.Fprintf(&b, "runs a side the gate asks for the regressed test: median %d (%d-%d)\n", needed[len(needed)/2], needed[0], needed[len(needed)-1])
	return b.String()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
