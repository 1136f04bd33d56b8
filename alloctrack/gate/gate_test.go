package gate

import (
	"math"
	"testing"
)

var base5 = []float64{1000, 1030, 970, 1010, 990}

func scaled(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * f
	}
	return out
}

func one(t *testing.T, s Series, cfg Config) Result {
	t.Helper()
	r := Compare([]Series{s}, cfg)
	if len(r) != 1 || r[0].Key != s.Key {
		t.Fatalf("Compare gave %+v", r)
	}
	return r[0]
}

func TestIdenticalSidesNotSignificant(t *testing.T) {
	r := one(t, Series{Key: "test:a", Base: base5, New: base5}, Config{})
	if r.Significant || r.Breach || r.P != 1 || r.Ratio != 1 {
		t.Errorf("identical sides: %+v", r)
	}
	if !(r.Lo < 1 && r.Hi > 1) {
		t.Errorf("interval [%v, %v] does not hold 1", r.Lo, r.Hi)
	}
	if r.BaseMedian != 1000 || r.BaseMAD != 10 || math.Abs(r.BaseCV-0.0224) > 1e-3 {
		t.Errorf("median %v MAD %v CV %v, want 1000, 10, 0.0224", r.BaseMedian, r.BaseMAD, r.BaseCV)
	}
}

func TestClearShiftIsABreach(t *testing.T) {
	nw := []float64{1500, 1460, 1540, 1490, 1520}
	r := one(t, Series{Key: "test:a", Base: base5, New: nw}, Config{})
	if !r.Significant || !r.Breach || r.P >= 0.001 {
		t.Errorf("+50 %%: %+v", r)
	}
	if math.Abs(r.Ratio-1.5) > 1e-9 || !(r.Lo > 1.4 && r.Lo < 1.5 && r.Hi > 1.5 && r.Hi < 1.6) {
		t.Errorf("ratio %v in [%v, %v], want 1.5 inside a narrow interval", r.Ratio, r.Lo, r.Hi)
	}
	if r.TooFew {
		t.Errorf("5 runs of 2 %% spread called too few (needs %d)", r.RunsNeeded)
	}
}

func TestSmallOrFallingChangeIsNoBreach(t *testing.T) {
	small := one(t, Series{Key: "s", Base: []float64{100, 100.1, 99.9}, New: []float64{105, 105.1, 104.9}}, Config{MinEffect: 0.10})
	if !small.Significant || small.Breach {
		t.Errorf("+5 %% with MinEffect 10 %%: significant %v breach %v, want true false", small.Significant, small.Breach)
	}
	fall := one(t, Series{Key: "f", Base: base5, New: scaled(base5, 0.5)}, Config{})
	if !fall.Significant || fall.Breach {
		t.Errorf("-50 %%: significant %v breach %v, want true false", fall.Significant, fall.Breach)
	}
}

// A change significant alone is not once 40 unchanged series share the gate.
func TestHolmOverTheGate(t *testing.T) {
	s := Series{Key: "test:a", Base: base5, New: []float64{1040, 1070, 1010, 1050, 1030}}
	alone := one(t, s, Config{})
	if !alone.Significant {
		t.Fatalf("alone: %+v, want significant", alone)
	}
	all := []Series{s}
	for range 40 {
		all = append(all, Series{Key: "test:same", Base: base5, New: []float64{990, 1010, 1000, 1030, 970}})
	}
	r := Compare(all, Config{})
	if r[0].Significant || r[0].P <= alone.P {
		t.Errorf("with 40 others: P %v (alone %v) significant %v, want larger P, not significant", r[0].P, alone.P, r[0].Significant)
	}
	if !(r[0].Lo < alone.Lo && r[0].Hi > alone.Hi) {
		t.Errorf("gate interval [%v, %v] not wider than alone [%v, %v]", r[0].Lo, r[0].Hi, alone.Lo, alone.Hi)
	}
}

func TestTooFew(t *testing.T) {
	for _, n := range []int{1, 2} {
		r := one(t, Series{Key: "t", Base: base5[:n], New: scaled(base5[:n], 1.3)}, Config{})
		if !r.TooFew || r.RunsNeeded < MinRuns {
			t.Errorf("%d runs a side: too few %v, needs %d", n, r.TooFew, r.RunsNeeded)
		}
		if n == 1 && (r.Significant || r.P != 1) {
			t.Errorf("1 run a side tested: %+v", r)
		}
	}
	// 20 % spread: +10 % needs many runs; 5 are too few.
	noisy := []float64{1000, 1250, 800, 1150, 850}
	r := one(t, Series{Key: "t", Base: noisy, New: noisy}, Config{MinEffect: 0.10})
	if !r.TooFew || r.RunsNeeded <= 20 {
		t.Errorf("20 %% spread: too few %v, needs %d, want more than 20", r.TooFew, r.RunsNeeded)
	}
	// The same spread, +50 % wanted: fewer runs.
	if r2 := one(t, Series{Key: "t", Base: noisy, New: noisy}, Config{MinEffect: 0.5}); r2.RunsNeeded >= r.RunsNeeded {
		t.Errorf("needs %d for +50 %%, %d for +10 %%", r2.RunsNeeded, r.RunsNeeded)
	}
}

func TestSampledSEWidensTheInterval(t *testing.T) {
	nw := scaled(base5, 1.2)
	exact := one(t, Series{Key: "t", Base: base5, New: nw}, Config{})
	se := []float64{50, 50, 50, 50, 50}
	sampled := one(t, Series{Key: "t", Base: base5, New: nw, BaseSE: se, NewSE: se}, Config{})
	if !(sampled.Lo < exact.Lo && sampled.Hi > exact.Hi && sampled.P > exact.P) {
		t.Errorf("with SE [%v, %v] P %v, exact [%v, %v] P %v", sampled.Lo, sampled.Hi, sampled.P, exact.Lo, exact.Hi, exact.P)
	}
	if sampled.RunsNeeded <= exact.RunsNeeded && exact.RunsNeeded != MinRuns {
		t.Errorf("SE did not raise the runs needed: %d vs %d", sampled.RunsNeeded, exact.RunsNeeded)
	}
}

// Exact counts that do not move: any change is real.
func TestExactCounts(t *testing.T) {
	r := one(t, Series{Key: "t", Base: []float64{500, 500, 500}, New: []float64{600, 600, 600}}, Config{})
	if !r.Significant || !r.Breach || r.Lo != 1.2 && math.Abs(r.Lo-601.0/501) > 1e-9 || r.TooFew {
		t.Errorf("exact counts 500 -> 600: %+v", r)
	}
	z := one(t, Series{Key: "t", Base: []float64{0, 0, 0}, New: []float64{7, 8, 9}}, Config{})
	if !math.IsInf(z.Ratio, 1) || !z.Breach {
		t.Errorf("from nothing: %+v", z)
	}
}
