package sim

import (
	"maps"
	"math"
	"reflect"
	"testing"
	"time"
)

func noiseSuite(tests int) Suite {
	return SeededSuite("com.example.test", "com.example.app", SeedSpec{Tests: tests, Seed: 7, Allocations: 2000, Duration: 4 * time.Millisecond})
}

// Without noise the model gives exactly what a run of the suite on the
// simulated device allocates, per test, class and site.
func TestSuiteModelIsTheTruth(t *testing.T) {
	s := noiseSuite(4)
	d := suiteDevice(t, 30, s)
	shellAll(t, d, "am instrument -w -r com.example.test/"+AndroidJUnitRunner)
	rt, ok := d.RunTruth(-1)
	if !ok || len(rt.Tests) != 4 {
		t.Fatalf("run truth: %v, %d tests", ok, len(rt.Tests))
	}
	got := NewSuiteModel(s).Run(RunNoise{}, 0)
	for i, tt := range rt.Tests {
		g := got[i]
		if g.Name != tt.Name || g.Total != tt.Allocated.Total || !maps.Equal(g.ByClass, tt.Allocated.ByClass) || !maps.Equal(g.BySiteID, tt.Allocated.BySiteID) {
			t.Errorf("test %d: model %s %+v %v %v;\n device %s %+v %v %v", i, g.Name, g.Total, g.ByClass, g.BySiteID, tt.Name, tt.Allocated.Total, tt.Allocated.ByClass, tt.Allocated.BySiteID)
		}
	}
}

func TestSuiteModelDeterministic(t *testing.T) {
	m := NewSuiteModel(noiseSuite(20))
	n := DefaultRunNoise(3)
	a, b := m.Run(n, 5), NewSuiteModel(noiseSuite(20)).Run(n, 5)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed and run gave different counts")
	}
	if reflect.DeepEqual(a, m.Run(n, 6)) {
		t.Fatal("runs 5 and 6 gave the same counts: no noise")
	}
	if reflect.DeepEqual(a, m.Run(DefaultRunNoise(4), 5)) {
		t.Fatal("seeds 3 and 4 gave the same counts")
	}
}

// runStats returns, per test, the mean and CV of its total allocations
// over runs runs.
func runStats(m *SuiteModel, n RunNoise, runs int) (mean, cv []float64) {
	var sum, sq []float64
	for r := range runs {
		for i, tc := range m.Run(n, r) {
			if r == 0 {
				sum, sq = append(sum, 0), append(sq, 0)
			}
			x := float64(tc.Total.Allocations)
			sum[i] += x
			sq[i] += x * x
		}
	}
	for i := range sum {
		mu := sum[i] / float64(runs)
		mean = append(mean, mu)
		cv = append(cv, math.Sqrt(sq[i]/float64(runs)-mu*mu)/mu)
	}
	return mean, cv
}

// Each test's run-to-run CV is the one stated: its own 2-4 %, with the
// per-site part on top.
func TestRunNoiseCV(t *testing.T) {
	s := noiseSuite(20)
	m := NewSuiteModel(s)
	n := DefaultRunNoise(11)
	n.OutlierRate = 0
	mean, cv := runStats(m, n, 3000)
	for i, tt := range s.Tests {
		c := n.TestCV(i)
		if c < 0.02 || c > 0.04 {
			t.Errorf("test %d: CV %.4f outside 2-4 %%", i, c)
		}
		var w2 float64
		for _, a := range tt.Allocs {
			w := float64(a.Count) / float64(tt.Amount().Allocations)
			w2 += w * w
		}
		want := math.Sqrt(c*c + n.SiteCV*n.SiteCV*w2)
		if math.Abs(cv[i]-want) > 0.1*want {
			t.Errorf("test %d: CV over 3,000 runs %.4f, want %.4f", i, cv[i], want)
		}
		if r := mean[i] / float64(tt.Amount().Allocations); math.Abs(r-1) > 0.005 {
			t.Errorf("test %d: mean %.4f of the noiseless amount", i, r)
		}
	}
}

// Outliers and a regression raise a test's mean by what they say.
func TestRunNoiseOutliersAndRegression(t *testing.T) {
	s := noiseSuite(20)
	m := NewSuiteModel(s)
	n := DefaultRunNoise(11)
	n.OutlierRate = 1
	n.Regress = map[string]float64{s.Tests[3].Name(): 1.15}
	mean, _ := runStats(m, n, 400)
	for i, tt := range s.Tests {
		want := 1.2 // outliers are 10-30 % higher, 20 % on average
		if i == 3 {
			want *= 1.15
		}
		if r := mean[i] / float64(tt.Amount().Allocations); math.Abs(r-want) > 0.01 {
			t.Errorf("test %d: mean %.4f of the noiseless amount, want %.4f", i, r, want)
		}
	}
}
