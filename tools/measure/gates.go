package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/gate"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/sim"
)

// gatesOpts sets the gate measurement: how many trials of each kind, and
// the suite, noise and gate they use.
type gatesOpts struct {
	trials, runs, tests int
	seed                uint64
	effect              float64  // the true regression of the A/B trials, 0.15
	metrics             []string // diff's --metric: allocations, bytes, or both
	noise               sim.RunNoise
	cfg                 gate.Config
	budget              *offline.Budget // the relative budget baseline check judges
	dir                 string          // scratch directory for the runs' tests.json
}

// gateBys are the gates of one comparison: one diff --by each, and
// "budget": baseline check of a budget with one relative tests: rule.
var gateBys = []string{"test", "class", "site", "budget"}

func gateName(by string) string {
	if by == "budget" {
		return "baseline check, tests: relative"
	}
	return "diff --by " + by
}

// relBudget is the budget of a gated CI job with a baseline: every test at
// most the gate's minimum effect over the baseline, at its level.
func relBudget(cfg gate.Config) (*offline.Budget, error) {
	y := fmt.Sprintf("tests:\n  - match: '.*'\n    relative: {increase: %g%%, level: %g}\n", 100*cfg.MinEffect, cfg.Level)
	return offline.ParseBudget("measure gates", []byte(y))
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

// sides are one side's runs as diff loads them: tests from each run's
// tests.json (offline.LoadRuns, as diff --by test --base DIR reads a test
// run), classes and sites from the runs' counts, as a capture's reports
// would give them.
type sides struct {
	tests, counts *offline.RunSet
	paths         []string // the tests.json files
}

// loadSides writes each run's tests.json under dir/name-N and loads them with
// offline.LoadRuns; a run diff would refuse is an error.
func loadSides(dir, name string, rs [][]sim.TestCounts) (sides, error) {
	var paths []string
	for i, tests := range rs {
		p := filepath.Join(dir, fmt.Sprintf("%s-%d", name, i), offline.TestsFile)
		if err := writeTestRun(p, tests); err != nil {
			return sides{}, err
		}
		paths = append(paths, p)
	}
	set, err := offline.LoadRuns(paths)
	if err != nil {
		return sides{}, err
	}
	for _, r := range set.Runs {
		if r.Shortfall != nil || r.Partial != nil || r.Kind != offline.TestsFile {
			return sides{}, fmt.Errorf("%s: diff would refuse it (kind %s): %v %v", r.Path, r.Kind, r.Shortfall, r.Partial)
		}
	}
	return sides{tests: set, counts: countsSet(name, rs), paths: paths}, nil
}

// writeTestRun writes a whole, finished test run of exact (DDM) counts.
func writeTestRun(path string, tests []sim.TestCounts) error {
	run := pertest.Run{Package: "com.example.app", Backend: alloctrack.BackendDDM, Complete: true, Expected: len(tests)}
	for _, t := range tests {
		f := pertest.Figures{Allocations: t.Total.Allocations, Bytes: t.Total.Bytes}
		run.Tests = append(run.Tests, pertest.Test{Name: t.Name, Class: t.Class, Method: t.Method, Outcome: pertest.Passed, Figures: f})
	}
	data, err := json.Marshal(run)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// countsSet is the runs' classes and sites summed over their tests, one
// exact run each, per run (no duration: not per second).
func countsSet(name string, rs [][]sim.TestCounts) *offline.RunSet {
	set := &offline.RunSet{Classes: map[string][]*offline.Value{}, Sites: map[string][]*offline.Value{}, SiteLabels: map[string]string{}}
	add := func(m map[string][]*offline.Value, key string, i, n int, c alloctrack.Count) {
		vs := m[key]
		if vs == nil {
			vs = make([]*offline.Value, n)
			m[key] = vs
		}
		if vs[i] == nil {
			vs[i] = &offline.Value{}
		}
		vs[i].Allocations += float64(c.Allocations)
		vs[i].Bytes += float64(c.Bytes)
	}
	for i, tests := range rs {
		set.Runs = append(set.Runs, offline.LoadedRun{Path: fmt.Sprintf("%s-%d", name, i), Kind: "exact"})
		for _, t := range tests {
			for k, c := range t.ByClass {
				add(set.Classes, k, i, len(rs), c)
			}
			for k, c := range t.BySiteID {
				add(set.Sites, k, i, len(rs), c)
			}
		}
	}
	return set
}

// verdict is what one gate (one diff --by) said in one trial.
type verdict struct {
	series     int
	breach     bool // any series breached: the gate fails
	sig        bool // any series significant, breach or not
	found      bool // A/B: a row of the regressed test breached
	elsewhere  bool // A/B: a row of another test breached
	tooFew     bool // A/B: a row of the regressed test is too-few
	runsNeeded int  // A/B: the most a row of the regressed test needs
	// A/B: the regressed test's rows with enough runs (not too-few), and
	// those of them significantly up: RunsNeeded promises Power of them
	// when the regression is MinEffect.
	ready, readyUp int
}

// judge is diff --base --new --by by over the two sides: offline.DiffSeries
// and gate.Compare, as cmd/alloctrack's judgeRuns calls them; for
// "budget", Budget.JudgeRelative on the runs' files, as baseline check.
func (o gatesOpts) judge(base, nw sides, by, target string) (verdict, error) {
	var res []gate.Result
	if by == "budget" {
		vs, err := o.budget.JudgeRelative(base.paths, nw.paths)
		if err != nil {
			return verdict{}, err
		}
		for _, v := range vs {
			res = append(res, v.Result)
		}
	} else {
		b, n := base.counts, nw.counts
		if by == "test" {
			b, n = base.tests, nw.tests
		}
		series, _ := offline.DiffSeries(b, n, by, o.metrics)
		res = gate.Compare(series, o.cfg)
	}
	return tell(res, target), nil
}

// tell counts a gate's results; a row of the regressed test has key
// "test:NAME" (diff) or "test:NAME METRIC" (a relative rule).
func tell(res []gate.Result, target string) verdict {
	v := verdict{series: len(res)}
	for _, r := range res {
		v.breach = v.breach || r.Breach
		v.sig = v.sig || r.Significant
		switch {
		case target != "" && (r.Key == "test:"+target || strings.HasPrefix(r.Key, "test:"+target+" ")):
			v.found = v.found || r.Breach
			v.tooFew = v.tooFew || r.TooFew
			v.runsNeeded = max(v.runsNeeded, r.RunsNeeded)
			if !r.TooFew {
				v.ready++
				v.readyUp += b2i(r.Significant && r.Ratio > 1)
			}
		case r.Breach && strings.HasPrefix(r.Key, "test:"):
			v.elsewhere = true
		}
	}
	return v
}

// trial runs trial k: A/A when ab is false, else the new side's test
// k%tests is +effect. It returns each gate's verdict, in gateBys' order.
func (o gatesOpts) trial(k int, ab bool) ([]verdict, error) {
	suite, n := o.trialSuite(k)
	m := sim.NewSuiteModel(suite)
	nn := n
	var target string
	if ab {
		target = suite.Tests[k%len(suite.Tests)].Name()
		nn.Regress = map[string]float64{target: 1 + o.effect}
	}
	dir, err := os.MkdirTemp(o.dir, "trial")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	base, err := loadSides(dir, "base", runs(m, n, 0, o.runs))
	if err != nil {
		return nil, err
	}
	nw, err := loadSides(dir, "new", runs(m, nn, o.runs, o.runs))
	if err != nil {
		return nil, err
	}
	var out []verdict
	for _, by := range gateBys {
		v, err := o.judge(base, nw, by, target)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
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
	metric := fs.String("metric", "both", "diff's --metric: both, allocations or bytes")
	fs.Float64Var(&o.cfg.Level, "level", 0.05, "the gate's level (diff --level)")
	fs.Float64Var(&o.cfg.MinEffect, "min-effect", 0.10, "the gate's minimum effect (diff --min-effect)")
	n := sim.DefaultRunNoise(0)
	fs.Float64Var(&n.MinCV, "cv.min", n.MinCV, "smallest per-test CV")
	fs.Float64Var(&n.MaxCV, "cv.max", n.MaxCV, "largest per-test CV")
	fs.Float64Var(&n.SiteCV, "cv.site", n.SiteCV, "per-site CV")
	fs.Float64Var(&n.OutlierRate, "outliers", n.OutlierRate, "chance of an outlier per test and run")
	fs.Parse(args)
	switch *metric {
	case "both":
		o.metrics = []string{"allocations", "bytes"}
	case "allocations", "bytes":
		o.metrics = []string{*metric}
	default:
		return fmt.Errorf("-metric %q: both, allocations or bytes", *metric)
	}
	if o.trials < 1 || o.runs < 1 || o.tests < 1 {
		return fmt.Errorf("-trials, -runs and -tests must be at least 1")
	}
	o.noise = n
	b, err := relBudget(o.cfg)
	if err != nil {
		return err
	}
	o.budget = b
	report, err := o.measure()
	fmt.Print(report)
	return err
}

// tally counts one kind of trial's verdicts, per gate and over the job
// that runs all of them.
type tally struct {
	n, sig, series   []int // per gate: gates that failed, with a significant row, their series
	foundBy          []int // per gate: a row of the regressed test breached
	anyFail          int   // the three diff gates together
	found, elsewhere int
	tooFew, both     int // the regressed test too-few; too-few yet found
	ready, readyUp   int // rows of the regressed test not too-few, and significantly up
	needed           []int
}

func newTally() *tally {
	k := len(gateBys)
	return &tally{n: make([]int, k), sig: make([]int, k), series: make([]int, k), foundBy: make([]int, k)}
}

func (t *tally) add(vs []verdict) {
	fail := false
	for i, v := range vs {
		t.n[i] += b2i(v.breach)
		t.sig[i] += b2i(v.sig)
		t.series[i] += v.series
		t.foundBy[i] += b2i(v.found)
		fail = fail || (v.breach && gateBys[i] != "budget")
	}
	t.anyFail += b2i(fail)
	tv := vs[0] // --by test
	t.found += b2i(tv.found)
	t.elsewhere += b2i(tv.elsewhere)
	t.tooFew += b2i(tv.tooFew)
	t.both += b2i(tv.tooFew && tv.found)
	t.needed = append(t.needed, tv.runsNeeded)
	t.ready += tv.ready
	t.readyUp += tv.readyUp
}

// measure runs the trials and returns the report.
func (o gatesOpts) measure() (string, error) {
	aa, ab := newTally(), newTally()
	for k := range o.trials {
		v, err := o.trial(k, false)
		if err != nil {
			return "", err
		}
		aa.add(v)
		if v, err = o.trial(k, true); err != nil {
			return "", err
		}
		ab.add(v)
	}
	return o.report(aa, ab), nil
}

func (o gatesOpts) report(aa, ab *tally) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gates: %d A/A and %d A/B trials, %d tests a suite, %d runs a side, --metric %s, level %g, min effect +%g %%; each trial is diff --base x%d --new x%d --by test, class, site (tests from tests.json files through offline.LoadRuns; offline.DiffSeries, gate.Compare), and baseline check's Budget.JudgeRelative on the same tests.json files\n",
		o.trials, o.trials, o.tests, o.runs, strings.Join(o.metrics, "+"), o.cfg.Level, 100*o.cfg.MinEffect, o.runs, o.runs)
	fmt.Fprintf(&b, "noise: per-test CV %.1f-%.1f %%, per-site %.1f %%, outliers %.1f %% of test runs (+%.0f-%.0f %%); A/B: +%.0f %% on one test; seed %d\n",
		100*o.noise.MinCV, 100*o.noise.MaxCV, 100*o.noise.SiteCV, 100*o.noise.OutlierRate, 100*o.noise.OutlierMin, 100*o.noise.OutlierMax, 100*o.effect, o.seed)
	for i, by := range gateBys {
		fmt.Fprintf(&b, "%s (%.1f series a gate on average):\n", gateName(by), float64(aa.series[i])/float64(o.trials))
		fmt.Fprintln(&b, "  "+rate("false alarms (A/A gates with a breach)", aa.n[i], o.trials))
		fmt.Fprintln(&b, "  "+rate("A/A gates with a significant row, breach or not", aa.sig[i], o.trials))
		fmt.Fprintln(&b, "  "+rate("A/B gates that fail", ab.n[i], o.trials))
		if by == "test" || by == "budget" {
			fmt.Fprintln(&b, "  "+rate("power (A/B: a row of the regressed test breaches)", ab.foundBy[i], o.trials))
		}
	}
	fmt.Fprintln(&b, rate("a job running the three diff gates: A/A jobs with a breach", aa.anyFail, o.trials))
	fmt.Fprintln(&b, rate("A/B, --by test: another test breaches", ab.elsewhere, o.trials))
	fmt.Fprintln(&b, rate("A/B, --by test: the regressed test's rows say too-few", ab.tooFew, o.trials))
	fmt.Fprintln(&b, rate("A/B, --by test: too-few, yet found", ab.both, o.trials))
	fmt.Fprintln(&b, rate("A/B, --by test: rows of the regressed test not too-few that are significantly up (RunsNeeded promises 90 % at +min effect)", ab.readyUp, ab.ready))
	slices.Sort(ab.needed)
	nd := ab.needed
	fmt.Fprintf(&b, "runs a side the gate asks for the regressed test: median %d (%d-%d)\n", nd[len(nd)/2], nd[0], nd[len(nd)-1])
	return b.String()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
