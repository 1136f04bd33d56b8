package gate

import (
	"math"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

func TestPolygamma(t *testing.T) {
	for _, c := range []struct{ got, want float64 }{
		{digamma(1), -0.5772156649015329},
		{digamma(0.5), -1.9635100260214235},
		{trigamma(1), math.Pi * math.Pi / 6},
		{trigamma(0.5), math.Pi * math.Pi / 2},
		{trigammaInv(trigamma(3.7)), 3.7},
	} {
		if !near(c.got, c.want, 1e-9) {
			t.Errorf("got %v, want %v", c.got, c.want)
		}
	}
}

// Known answer: s0² 0.01 with d0 4, a series of s² 0.0025 on 5+5 runs, a
// difference 0.1: posterior 0.005, t = √5 on 12 df, two-sided p 0.045115
// (numerical integration of Student's density, done apart).
func TestModeratedKnownAnswer(t *testing.T) {
	w := prior{s0: 0.01, d0: 4}.test(0.1, spread{s2: 0.0025, df: 8}, 5, 5)
	if w.df != 12 || !near(w.se, math.Sqrt(0.002), 1e-12) || !near(w.p, 0.0451153645, 1e-7) {
		t.Errorf("moderated t: %+v, want df 12, se %v, p 0.0451153645", w, math.Sqrt(0.002))
	}
}

// Log variances scattered exactly as a prior of d0 4 predicts (variance
// trigamma(df/2) + trigamma(d0/2)): the moments give back d0 4 and s0².
func TestEstimatePriorKnownAnswer(t *testing.T) {
	a := math.Sqrt(5.0 / 6 * (trigamma(4) + trigamma(2)))
	c := math.Log(0.003)
	var sp []spread
	for _, sign := range []float64{1, 1, 1, -1, -1, -1} {
		sp = append(sp, spread{s2: math.Exp(c + sign*a + digamma(4) - math.Log(4)), df: 8})
	}
	p, ok := estimatePrior(sp)
	want := math.Exp(c + digamma(2) - math.Log(2))
	if !ok || !near(p.d0, 4, 1e-6) || !near(p.s0, want, 1e-9) {
		t.Errorf("prior %+v ok %v, want d0 4, s0² %v", p, ok, want)
	}
	if _, ok := estimatePrior(sp[:ModerateMin-1]); ok {
		t.Errorf("prior estimated from %d series", ModerateMin-1)
	}
	// Variances that scatter less than chance: the prior is trusted, d0 at its cap.
	same := []spread{{0.003, 8}, {0.003, 8}, {0.003, 8}, {0.003, 8}, {0.003, 8}}
	if p, _ := estimatePrior(same); p.d0 != D0Cap {
		t.Errorf("equal variances: d0 %v, want %v", p.d0, D0Cap)
	}
	// Variances far apart: the series are trusted, d0 at its floor.
	wide := []spread{{1e-6, 8}, {1e-4, 8}, {1e-2, 8}, {1, 8}, {1e-5, 8}}
	if p, _ := estimatePrior(wide); p.d0 != D0Floor {
		t.Errorf("scattered variances: d0 %v, want %v", p.d0, D0Floor)
	}
}

func quietGate(k int) []Series {
	var s []Series
	for i := range k {
		f := 1 + 0.003*float64(i%5)
		s = append(s, Series{Key: "test:q", Base: scaled(base5, f), New: scaled([]float64{990, 1010, 1000, 1030, 970}, f*(1+0.002*float64(i%3)))})
	}
	return s
}

// A lone noisy series among quiet ones borrows their spread: its standard
// error shrinks and its degrees of freedom grow; a +15 % shift that Welch
// alone misses in this gate is found.
func TestModerationShrinksLoneNoisySeries(t *testing.T) {
	noisy := Series{Key: "test:noisy", Base: []float64{1000, 1120, 880, 1060, 940}, New: []float64{1150, 1290, 1010, 1220, 1080}}
	s := append(quietGate(20), noisy)
	tests := make([]welch, len(s))
	for i, x := range s {
		tests[i] = welchOf(x)
	}
	alone := tests[20]
	moderate(s, tests)
	if !(tests[20].se < alone.se && tests[20].df > alone.df && tests[20].p < alone.p) {
		t.Errorf("moderated %+v, Welch %+v: want smaller se and p, more df", tests[20], alone)
	}
	if r := Compare(s, Config{}); !r[20].Breach {
		t.Errorf("noisy +15 %% in a quiet gate: %+v, want a breach", r[20])
	}
}

// Fewer than ModerateMin series (one here): the plain Welch test.
func TestOneSeriesIsWelch(t *testing.T) {
	x := Series{Key: "t", Base: base5, New: []float64{1040, 1090, 1010, 1050, 1030}}
	w := welchOf(x)
	r := one(t, x, Config{})
	if r.P != w.p {
		t.Errorf("one series: P %v, Welch %v", r.P, w.p)
	}
	lo, hi := w.interval(0.05)
	if r.Lo != lo || r.Hi != hi {
		t.Errorf("one series: [%v, %v], Welch [%v, %v]", r.Lo, r.Hi, lo, hi)
	}
}

// Exact counts that do not move keep their certain verdict in a moderated gate.
func TestExactCountsNotModerated(t *testing.T) {
	s := append(quietGate(10), Series{Key: "exact", Base: []float64{500, 500, 500}, New: []float64{600, 600, 600}})
	if r := Compare(s, Config{}); r[10].P != 0 || !r[10].Breach {
		t.Errorf("exact 500 -> 600 among 10: %+v, want P 0 and a breach", r[10])
	}
}
