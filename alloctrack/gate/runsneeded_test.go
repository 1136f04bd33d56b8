package gate

import (
	"math"
	"math/rand/v2"
	"testing"
)

// noisyGate is a gate of 20 series, 5 runs a side, each run log-normal
// around 1000 with spread cv (fixed seed); the first series' new side is
// +effect.
func noisyGate(cv, effect float64) []Series {
	r := rand.New(rand.NewPCG(37, 1))
	run := func(f float64) []float64 {
		v := make([]float64, 5)
		for i := range v {
			v[i] = 1000 * f * math.Exp(cv*r.NormFloat64())
		}
		return v
	}
	out := make([]Series, 20)
	for i := range out {
		out[i] = Series{Key: "test:" + string(rune('a'+i)), Base: run(1), New: run(1)}
	}
	out[0].New = run(1 + effect)
	return out
}

// spreadRuns are 5 runs around 1000·f whose logs have sample standard
// deviation sd exactly.
func spreadRuns(f, sd float64) []float64 {
	z := []float64{-1, -0.5, 0, 0.5, 1} // sample variance 0.625
	v := make([]float64, len(z))
	for i, x := range z {
		v[i] = 1000 * f * math.Exp(sd*x/math.Sqrt(0.625))
	}
	return v
}

// With a prior the gate's test has d0 more degrees of freedom and a
// steadier variance: RunsNeeded counts with them, so a +15 % the gate
// finds at 5 runs is not called too few, as Welch's count would.
func TestRunsNeededModerated(t *testing.T) {
	s := noisyGate(0.03, 0.15)
	s[0].Base, s[0].New = spreadRuns(1, 0.035), spreadRuns(1.15, 0.035)
	r := Compare(s, Config{})
	own := runsNeeded(s[0], Config{}.norm(), len(s), prior{}, false)
	t.Logf("3.5 %% spread: breach %v P %.3g, runs needed %d (by its own variance %d)", r[0].Breach, r[0].P, r[0].RunsNeeded, own)
	if !r[0].Breach {
		t.Fatalf("+15 %% at 3 %% spread, 5 runs: %+v, want a breach", r[0])
	}
	if r[0].RunsNeeded > 5 || r[0].TooFew {
		t.Errorf("the gate found +15 %% at 5 runs, yet needs %d (too few %v)", r[0].RunsNeeded, r[0].TooFew)
	}
	if own <= 5 {
		t.Errorf("by its own variance the series needs %d, want more than 5 (the case shows nothing)", own)
	}
}

// At 8 % spread the moderated count still asks for more than 5 runs, and
// the gate cannot tell a +15 % change from noise at 5.
func TestRunsNeededModeratedAsksMore(t *testing.T) {
	s := noisyGate(0.08, 0.15)
	r := Compare(s, Config{})
	t.Logf("8 %%: breach %v P %.3g, runs needed %d", r[0].Breach, r[0].P, r[0].RunsNeeded)
	if r[0].RunsNeeded <= 5 || !r[0].TooFew {
		t.Errorf("8 %% spread, +10 %% at level 0.05/20: needs %d (too few %v), want more than 5", r[0].RunsNeeded, r[0].TooFew)
	}
	if r[0].Significant {
		t.Errorf("+15 %% at 8 %% spread found at 5 runs (P %.3g) though the gate needs %d", r[0].P, r[0].RunsNeeded)
	}
}
