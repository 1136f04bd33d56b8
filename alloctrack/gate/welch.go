package gate

import "math"

// welch is Welch's t test of the difference of mean log(1+value).
type welch struct {
	ok    bool
	d, se float64 // difference New-Base of mean logs, and its standard error
	df    float64
	p     float64 // two-sided, unadjusted
}

// logSide returns the side's mean log, and the variance of that mean: the
// runs' sample variance plus their mean squared relative SE, over n.
func logSide(v, se []float64) (mean, varMean float64, n int) {
	n = len(v)
	ls := make([]float64, n)
	for i, x := range v {
		ls[i] = math.Log1p(math.Max(x, 0))
	}
	mean = avg(ls)
	s2 := sampleVar(ls)
	if len(se) == n {
		rel := 0.0
		for i, e := range se {
			r := e / (1 + math.Max(v[i], 0))
			rel += r * r
		}
		s2 += rel / float64(n)
	}
	return mean, s2 / float64(n), n
}

func welchOf(x Series) welch {
	if len(x.Base) < 2 || len(x.New) < 2 {
		return welch{}
	}
	mb, vb, nb := logSide(x.Base, x.BaseSE)
	mn, vn, nn := logSide(x.New, x.NewSE)
	w := welch{ok: true, d: mn - mb, se: math.Sqrt(vb + vn)}
	w.df = satterthwaite(vb, nb, vn, nn)
	switch {
	case w.se == 0 && w.d == 0:
		w.p = 1
	case w.se == 0:
		w.p = 0
	default:
		w.p = 2 * tUpper(math.Abs(w.d)/w.se, w.df)
	}
	return w
}

func satterthwaite(vb float64, nb int, vn float64, nn int) float64 {
	den := vb*vb/float64(nb-1) + vn*vn/float64(nn-1)
	if den == 0 {
		return float64(nb + nn - 2)
	}
	return (vb + vn) * (vb + vn) / den
}

// interval is the two-sided 1-alpha interval of the ratio of (1+value)
// geometric means.
func (w welch) interval(alpha float64) (lo, hi float64) {
	h := tQuantile(1-alpha/2, w.df) * w.se
	return math.Exp(w.d - h), math.Exp(w.d + h)
}

// runsNeeded: runs a side for a two-sided test at level/m to find a change
// of MinEffect with probability Power, by the test the gate applies: with
// a prior (the gate moderates) the series' posterior variance and d0 more
// degrees of freedom, else its own pooled variance as Welch's t would see
// it. With no spread seen it is MinRuns.
func runsNeeded(x Series, cfg Config, m int, p prior, moderated bool) int {
	var s2 float64
	var k int
	for _, side := range [][2][]float64{{x.Base, x.BaseSE}, {x.New, x.NewSE}} {
		if len(side[0]) >= 2 {
			_, v, n := logSide(side[0], side[1])
			s2 += v * float64(n)
			k++
		}
	}
	if k == 0 || s2 == 0 {
		return MinRuns
	}
	s2 /= float64(k)
	d0 := 0.0
	if moderated && len(x.Base) >= 2 && len(x.New) >= 2 {
		s2, d0 = p.posterior(spreadOf(x)), p.d0
	}
	return runsFor(s2, d0, math.Log1p(cfg.MinEffect), cfg.Level/float64(m))
}

// runsFor is the smallest n (at least MinRuns) a side at which a t test of
// per-run variance s2 and 2n-2+d0 degrees of freedom, two-sided at alpha,
// finds a change of delta on the log scale with probability Power.
func runsFor(s2, d0, delta, alpha float64) int {
	for n := MinRuns; n < 10000; n++ {
		df := float64(2*n-2) + d0
		z := tQuantile(1-alpha/2, df) + tQuantile(Power, df)
		if float64(n) >= 2*s2*z*z/(delta*delta) {
			return n
		}
	}
	return 10000
}
