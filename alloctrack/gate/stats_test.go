package gate

import (
	"math"
	"testing"
)

// Known values of Student's t (two-sided 95 % critical values and tails).
func TestStudentT(t *testing.T) {
	for _, c := range []struct{ p, df, want float64 }{
		{0.975, 1, 12.7062}, {0.975, 4, 2.7764}, {0.975, 8, 2.3060},
		{0.975, 30, 2.0423}, {0.995, 10, 3.1693}, {0.90, 8, 1.3968},
	} {
		if got := tQuantile(c.p, c.df); math.Abs(got-c.want) > 1e-3 {
			t.Errorf("t quantile %v df %v = %.4f, want %.4f", c.p, c.df, got, c.want)
		}
	}
	if got := tUpper(2.0, 5); math.Abs(got-0.05097) > 1e-4 {
		t.Errorf("P(T>2, df 5) = %.5f, want 0.05097", got)
	}
}

func TestMedianMADCV(t *testing.T) {
	v := []float64{1, 2, 3, 4, 100}
	if median(v) != 3 || mad(v) != 1 {
		t.Errorf("median %v mad %v, want 3 and 1", median(v), mad(v))
	}
	if median([]float64{4, 1, 3, 2}) != 2.5 {
		t.Errorf("even median %v, want 2.5", median([]float64{4, 1, 3, 2}))
	}
	if got := cv([]float64{90, 100, 110}); math.Abs(got-0.1) > 1e-12 {
		t.Errorf("cv %v, want 0.1", got)
	}
}

// logs returns values whose log(1+x) are ys.
func logs(ys ...float64) []float64 {
	out := make([]float64, len(ys))
	for i, y := range ys {
		out[i] = math.Expm1(y)
	}
	return out
}

// Welch on log(1+x): logs 1..5 against 3..7 is t = 2 at 8 degrees of
// freedom, two-sided P 0.0805 (textbook value).
func TestWelchKnownAnswer(t *testing.T) {
	w := welchOf(Series{Base: logs(1, 2, 3, 4, 5), New: logs(3, 4, 5, 6, 7)})
	if !w.ok || math.Abs(w.d-2) > 1e-9 || math.Abs(w.se-1) > 1e-9 || math.Abs(w.df-8) > 1e-9 || math.Abs(w.p-0.0805) > 5e-4 {
		t.Errorf("welch %+v, want d 2, se 1, df 8, p 0.0805", w)
	}
}

// Runs needed against the normal approximation 2 s² (z(.975)+z(.9))² /
// log(1.1)² = 23.1 for s = 0.1: the t distribution asks a little more.
func TestRunsNeededKnownAnswer(t *testing.T) {
	// Logs 10-d, 10, 10+d, 10, 10: sample variance 2d²/4 = 0.01.
	d := 0.1 * math.Sqrt(2)
	side := logs(10-d, 10, 10+d, 10, 10)
	n := runsNeeded(Series{Base: side, New: side}, Config{}.norm(), 1, prior{}, false)
	if n < 24 || n > 26 {
		t.Errorf("runs needed %d, want 24 to 26", n)
	}
}

// With a prior of very many degrees of freedom the t quantiles are the
// normal's: n >= 2 s² (1.960 + 1.2816)² / δ² = 21.01 for s² = 0.01, δ = 0.1.
func TestRunsForLargeD0IsNormal(t *testing.T) {
	if n := runsFor(0.01, 1e7, 0.1, 0.05); n != 22 {
		t.Errorf("runs for a normal test: %d, want 22", n)
	}
	if n := runsFor(0.01, 0, 0.1, 0.05); n <= 22 {
		t.Errorf("runs without a prior: %d, want more than the normal's 22", n)
	}
}
