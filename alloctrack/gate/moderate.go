package gate

import "math"

// Moderation (docs/gates.md, "Moderated t"): as in limma, each series'
// per-run log variance is pulled toward a prior variance s0² shared by the
// gate, which counts as d0 extra degrees of freedom. The prior is
// estimated from the gate's own series by the method of moments on their
// log variances.
const (
	// ModerateMin: with fewer testable series of nonzero spread the gate
	// has too little to estimate a prior from, and keeps Welch's t.
	ModerateMin = 5
	// D0Floor and D0Cap bound the prior's degrees of freedom: at least
	// D0Floor when the series' variances scatter more than chance allows
	// (the moment estimate would trust each series alone), at most D0Cap
	// when they scatter less (it would trust the prior alone).
	D0Floor = 4.0
	D0Cap   = 100.0
)

// prior is the gate's prior variance s0² and degrees of freedom d0.
type prior struct{ s0, d0 float64 }

// spread is one series' pooled per-run log variance and its degrees of
// freedom.
type spread struct{ s2, df float64 }

func spreadOf(x Series) spread {
	_, vb, nb := logSide(x.Base, x.BaseSE)
	_, vn, nn := logSide(x.New, x.NewSE)
	df := float64(nb + nn - 2)
	return spread{s2: (vb*float64(nb*(nb-1)) + vn*float64(nn*(nn-1))) / df, df: df}
}

// estimatePrior: limma's moment estimate. e = log s² - digamma(df/2) +
// log(df/2) has mean log s0² - digamma(d0/2) + log(d0/2) and variance
// trigamma(df/2) + trigamma(d0/2). ok is false with too few series.
func estimatePrior(sp []spread) (p prior, ok bool) {
	var e, tri []float64
	for _, v := range sp {
		if v.s2 > 0 {
			e = append(e, math.Log(v.s2)-digamma(v.df/2)+math.Log(v.df/2))
			tri = append(tri, trigamma(v.df/2))
		}
	}
	if len(e) < ModerateMin {
		return prior{}, false
	}
	mean := avg(e)
	excess := sampleVar(e) - avg(tri)
	d0 := D0Cap
	if excess > 0 {
		d0 = math.Min(D0Cap, math.Max(D0Floor, 2*trigammaInv(excess)))
	}
	return prior{s0: math.Exp(mean + digamma(d0/2) - math.Log(d0/2)), d0: d0}, true
}

// moderate replaces the test of every testable series with nonzero spread
// by the moderated t: posterior variance (d0·s0² + df·s²)/(d0 + df), df +
// d0 degrees of freedom. Series with no spread keep their exact verdict.
// It returns the gate's prior; ok is false when the gate has too few
// series to estimate one and keeps Welch's t.
func moderate(s []Series, tests []welch) (p prior, ok bool) {
	sp := make([]spread, len(s))
	var use []spread
	for i, x := range s {
		if tests[i].ok {
			sp[i] = spreadOf(x)
			use = append(use, sp[i])
		}
	}
	if p, ok = estimatePrior(use); !ok {
		return p, false
	}
	for i, x := range s {
		if tests[i].ok && sp[i].s2 > 0 {
			tests[i] = p.test(tests[i].d, sp[i], len(x.Base), len(x.New))
		}
	}
	return p, true
}

// posterior is the moderated per-run log variance of a series of spread v.
func (p prior) posterior(v spread) float64 {
	return (p.d0*p.s0 + v.df*v.s2) / (p.d0 + v.df)
}

// test is the moderated t of difference d for a series of spread v.
func (p prior) test(d float64, v spread, nb, nn int) welch {
	w := welch{ok: true, d: d, df: v.df + p.d0}
	w.se = math.Sqrt(p.posterior(v) * (1/float64(nb) + 1/float64(nn)))
	w.p = 2 * tUpper(math.Abs(d)/w.se, w.df)
	return w
}

// digamma by recurrence up to x >= 6, then its asymptotic series.
func digamma(x float64) float64 {
	r := 0.0
	for ; x < 6; x++ {
		r -= 1 / x
	}
	f := 1 / (x * x)
	return r + math.Log(x) - 0.5/x - f*(1.0/12-f*(1.0/120-f*(1.0/252-f*(1.0/240-f/132))))
}

// trigamma likewise.
func trigamma(x float64) float64 {
	r := 0.0
	for ; x < 6; x++ {
		r += 1 / (x * x)
	}
	f := 1 / (x * x)
	return r + 1/x + f/2 + f/x*(1.0/6-f*(1.0/30-f*(1.0/42-f/30)))
}

// trigammaInv solves trigamma(x) = y (y > 0) by bisection on log x:
// trigamma falls from +Inf to 0, so the root is unique.
func trigammaInv(y float64) float64 {
	lo, hi := -30.0, 30.0
	for range 200 {
		mid := (lo + hi) / 2
		if trigamma(math.Exp(mid)) > y {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Exp((lo + hi) / 2)
}
