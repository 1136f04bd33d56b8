// Package gate decides, over several runs a side, which series (tests,
// classes, sites) changed significantly. It is pure: no I/O, no logging,
// no randomness, so the same inputs always give the same results.
//
// Method (docs/gates.md): a t test on log(1+value), so a change is a
// ratio and skewed counts become near symmetric; a sampled run's standard
// error is added to its side's variance; with ModerateMin or more series
// of nonzero spread, each series' variance is moderated toward the gate's
// (moderate.go), else Welch's t; Holm's correction over all series
// of one Compare call (one gate) keeps the chance of any false alarm in the
// gate at most Config.Level.
package gate

import (
	"math"
	"sort"
)

// Series is one thing compared: one value per run on each side.
type Series struct {
	Key       string    // "test:NAME", "class:NAME", "site:ID"
	Base, New []float64 // one value per run
	// BaseSE, NewSE: a sampled run's standard error of its value (same
	// length as Base, New), nil for exact counts.
	BaseSE, NewSE []float64
}

// Config sets a gate.
type Config struct {
	Level     float64 // family-wise significance level of the gate, 0.05 if 0
	MinEffect float64 // smallest regression that matters, 0.10 = +10 %; 0.10 if 0
}

// Result is the verdict on one series.
type Result struct {
	Key                   string
	BaseMedian, NewMedian float64
	BaseMAD, NewMAD       float64 // median absolute deviation from the median
	BaseCV, NewCV         float64 // standard deviation / mean, 0 with fewer than 2 runs
	// Ratio is NewMedian/BaseMedian (+Inf when only the base is 0, 1 when
	// both are). Lo, Hi: the interval of the change as a ratio, at
	// confidence 1-Level/m (m testable series of the gate, Bonferroni), so
	// all intervals of a gate hold together at 1-Level.
	Ratio, Lo, Hi float64
	// P is Holm-adjusted over the gate: Significant is P < Level. 1 when
	// the series cannot be tested (fewer than 2 runs a side).
	P           float64
	Significant bool
	// Breach: Significant, and Ratio above 1+MinEffect.
	Breach bool
	// TooFew: fewer runs a side than RunsNeeded, the runs a side that
	// would detect a change of MinEffect at the gate's level with 90 %
	// power given the observed spread (at least MinRuns), by the test the
	// gate applies: moderated (posterior variance, d0 more degrees of
	// freedom) when the gate moderates.
	TooFew     bool
	RunsNeeded int
}

// MinRuns is the fewest runs a side a gate accepts as enough.
const MinRuns = 3

// Power is the chance RunsNeeded gives of finding a change of MinEffect.
const Power = 0.90

func (c Config) norm() Config {
	if c.Level <= 0 || c.Level >= 1 {
		c.Level = 0.05
	}
	if c.MinEffect <= 0 {
		c.MinEffect = 0.10
	}
	return c
}

// Compare judges every series; results are in the order of s.
func Compare(s []Series, cfg Config) []Result {
	cfg = cfg.norm()
	out := make([]Result, len(s))
	tests := make([]welch, len(s))
	m := 0
	for i, x := range s {
		out[i] = describe(x)
		tests[i] = welchOf(x)
		if tests[i].ok {
			m++
		}
	}
	p, moderated := moderate(s, tests)
	holm(out, tests, cfg.Level)
	for i := range out {
		r := &out[i]
		if tests[i].ok {
			r.Lo, r.Hi = tests[i].interval(cfg.Level / float64(max(m, 1)))
		} else {
			r.Lo, r.Hi = math.Inf(-1), math.Inf(1)
		}
		r.Breach = r.Significant && r.Ratio > 1+cfg.MinEffect
		r.RunsNeeded = runsNeeded(s[i], cfg, max(m, 1), p, moderated)
		r.TooFew = min(len(s[i].Base), len(s[i].New)) < r.RunsNeeded
	}
	return out
}

func describe(x Series) Result {
	r := Result{Key: x.Key, P: 1}
	r.BaseMedian, r.NewMedian = median(x.Base), median(x.New)
	r.BaseMAD, r.NewMAD = mad(x.Base), mad(x.New)
	r.BaseCV, r.NewCV = cv(x.Base), cv(x.New)
	switch {
	case r.BaseMedian == 0 && r.NewMedian == 0:
		r.Ratio = 1
	case r.BaseMedian == 0:
		r.Ratio = math.Inf(1)
	default:
		r.Ratio = r.NewMedian / r.BaseMedian
	}
	return r
}

// holm sets P (adjusted) and Significant over the testable series.
func holm(out []Result, t []welch, level float64) {
	var idx []int
	for i := range t {
		if t[i].ok {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return t[idx[a]].p < t[idx[b]].p })
	m, run := len(idx), 0.0
	for k, i := range idx {
		run = math.Max(run, math.Min(1, float64(m-k)*t[i].p))
		out[i].P = run
		out[i].Significant = run < level
	}
}
