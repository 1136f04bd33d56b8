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
