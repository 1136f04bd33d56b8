package sim

import (
	"math"
	"math/rand/v2"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// RunNoise is seeded run-to-run variation of a suite's allocations: what
// makes two runs of the same build allocate a little differently (lazy
// initialisation, caches, collections and JIT timing moving work between
// tests). Each test has its own coefficient of variation, drawn once per
// seed between MinCV and MaxCV; each run multiplies the test's every site
// by one log-normal factor of mean 1 and that CV, and each site by a
// smaller factor of its own (SiteCV). With probability OutlierRate a test's
// run is an outlier: it allocates OutlierMin to OutlierMax more (a retry,
// a cache that missed). docs/gates.md says where the figures come from.
type RunNoise struct {
	Seed                   uint64
	MinCV, MaxCV, SiteCV   float64
	OutlierRate            float64
	OutlierMin, OutlierMax float64
	// Regress multiplies the named tests' (SuiteTest.Name) allocations
	// in every run, e.g. 1.15 for a +15 % regression.
	Regress map[string]float64
}

// DefaultRunNoise is the noise docs/gates.md describes: per-test CV 2-4 %,
// 1 % per site, and one run in a hundred of a test 10-30 % higher.
func DefaultRunNoise(seed uint64) RunNoise {
	return RunNoise{Seed: seed, MinCV: 0.02, MaxCV: 0.04, SiteCV: 0.01, OutlierRate: 0.01, OutlierMin: 0.10, OutlierMax: 0.30}
}

// TestCV is test i's own coefficient of variation (outliers and the
// per-site part aside).
func (n RunNoise) TestCV(i int) float64 {
	r := rand.New(rand.NewPCG(n.Seed, 0x637600000000|uint64(i)))
	return n.MinCV + (n.MaxCV-n.MinCV)*r.Float64()
}

// logNormal is a log-normal factor of mean 1 and coefficient of
// variation cv, from a standard normal draw z.
func logNormal(z, cv float64) float64 {
	if cv <= 0 {
		return 1
	}
	s := math.Sqrt(math.Log1p(cv * cv))
	return math.Exp(s*z - s*s/2)
}

// SuiteModel computes what a suite's tests allocate in a run, per class
// and site, as the simulator's ground truth (TestTruth.Allocated) names
// them, without running the suite: thousands of runs through adb would
// take hours, this takes milliseconds.
type SuiteModel struct {
	suite Suite
	prog  *program
	first int // prog.sites index of the first test's first allocation
}

// TestCounts is what one test allocated in one run.
type TestCounts struct {
	Name, Class, Method string
	Counts
}

// NewSuiteModel prepares the model of suite s.
func NewSuiteModel(s Suite) *SuiteModel {
	var named []NamedSite
	for i := range s.Tests {
		for _, a := range s.Tests[i].Allocs {
			named = append(named, testSite(&s.Tests[i], a))
		}
	}
	w := Workload{Sites: 1, Seed: 1}
	p := newProgram(w, s.Target, named...)
	return &SuiteModel{suite: s, prog: p, first: p.work}
}

// Run returns each test's allocations in run number run (any integer)
// under noise n: the same seed and run always give the same counts. An
// ignored test allocates nothing, a crashed one half of its body.
func (m *SuiteModel) Run(n RunNoise, run int) []TestCounts {
	rng := rand.New(rand.NewPCG(n.Seed, 0x72756e0000000000^uint64(run)))
	sites := make([]alloctrack.Count, len(m.prog.sites))
	out := make([]TestCounts, 0, len(m.suite.Tests))
	k := m.first
	for i := range m.suite.Tests {
		t := &m.suite.Tests[i]
		f := logNormal(rng.NormFloat64(), n.TestCV(i))
		if u, g := rng.Float64(), rng.Float64(); u < n.OutlierRate {
			f *= 1 + n.OutlierMin + (n.OutlierMax-n.OutlierMin)*g
		}
		if r, ok := n.Regress[t.Name()]; ok {
			f *= r
		}
		switch t.Outcome {
		case pertest.Ignored:
			f = 0
		case pertest.Crashed:
			f /= 2
		}
		clear(sites)
		for _, a := range t.Allocs {
			c := uint64(math.Round(float64(a.Count) * f * logNormal(rng.NormFloat64(), n.SiteCV)))
			sites[k] = alloctrack.Count{Allocations: c, Bytes: c * uint64(a.Size)}
			k++
		}
		out = append(out, TestCounts{Name: t.Name(), Class: t.Class, Method: t.Method, Counts: m.prog.counts(sites, 16)})
	}
	return out
}
