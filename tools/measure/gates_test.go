package main

import (
	"math"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/gate"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/sim"
)

func testGatesOpts(t *testing.T) gatesOpts {
	o := gatesOpts{trials: 3, runs: 5, tests: 20, seed: 1, effect: 0.15, metrics: []string{"allocations", "bytes"},
		noise: sim.DefaultRunNoise(0), cfg: gate.Config{Level: 0.05, MinEffect: 0.10}, dir: t.TempDir()}
	b, err := relBudget(o.cfg)
	if err != nil {
		t.Fatal(err)
	}
	o.budget = b
	return o
}

// The same options give the same report; another seed another.
func TestGatesDeterministic(t *testing.T) {
	o := testGatesOpts(t)
	r1, err1 := o.measure()
	r2, err2 := o.measure()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if r1 != r2 {
		t.Fatalf("two reports of the same seed differ:\n%s\n%s", r1, r2)
	}
	o.seed = 2
	if r3, err := o.measure(); err != nil || r3 == r1 {
		t.Fatalf("seeds 1 and 2 gave the same report (%v):\n%s", err, r1)
	}
}

// A side is what diff loads: each run's tests from its tests.json, whole
// and exact; classes and sites summed over the run's tests; and
// DiffSeries gives one series per test, class or site and metric.
func TestGatesSidesAsDiffLoadsThem(t *testing.T) {
	o := testGatesOpts(t)
	suite, n := o.trialSuite(0)
	rs := runs(sim.NewSuiteModel(suite), n, 0, 5)
	s, err := loadSides(t.TempDir(), "base", rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.tests.Runs) != 5 || len(s.counts.Runs) != 5 {
		t.Fatalf("%d and %d runs, want 5", len(s.tests.Runs), len(s.counts.Runs))
	}
	for i, run := range rs {
		var total, classes, sites float64
		for _, tc := range run {
			v := s.tests.Tests[tc.Name][i]
			if v == nil || v.Allocations != float64(tc.Total.Allocations) || v.Bytes != float64(tc.Total.Bytes) || v.AllocationsSE != 0 {
				t.Fatalf("run %d %s: loaded %+v, want %+v, exact", i, tc.Name, v, tc.Total)
			}
			total += float64(tc.Total.Allocations)
		}
		for _, vs := range s.counts.Classes {
			classes += vs[i].Allocations
		}
		for _, vs := range s.counts.Sites {
			sites += vs[i].Allocations
		}
		if classes != total || sites != total {
			t.Errorf("run %d: classes sum to %v, sites to %v, tests to %v", i, classes, sites, total)
		}
	}
	for _, by := range gateBys[:3] {
		set := s.counts
		if by == "test" {
			set = s.tests
		}
		series, metric := offline.DiffSeries(set, set, by, o.metrics)
		want := map[string]int{"test": 20, "class": len(s.counts.Classes), "site": len(s.counts.Sites)}[by]
		if len(series) != 2*want || metric[0] != "allocations" || metric[len(metric)-1] != "bytes" {
			t.Errorf("--by %s: %d series, want %d for each metric", by, len(series), want)
		}
		for _, x := range series {
			if !strings.HasPrefix(x.Key, by+":") || len(x.Base) != 5 || len(x.New) != 5 {
				t.Errorf("--by %s: %s with %d and %d runs", by, x.Key, len(x.Base), len(x.New))
			}
		}
	}
}

// An A/B trial regresses the new side's chosen test only: a +100 % is
// found, an A/A trial of the same suite finds nothing in any gate.
func TestGatesTrialRegresses(t *testing.T) {
	o := testGatesOpts(t)
	o.effect = 1
	ab, err := o.trial(4, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 3} {
		if !ab[i].found || ab[i].elsewhere || ab[i].tooFew {
			t.Errorf("A/B +100 %%, %s: %+v, want the regressed test found and no other", gateName(gateBys[i]), ab[i])
		}
	}
	if ab[3].series != 40 {
		t.Errorf("the relative budget judged %d series, want 40 (20 tests, allocations and bytes)", ab[3].series)
	}
	aa, err := o.trial(4, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range aa {
		if v.breach || v.series == 0 {
			t.Errorf("A/A %s: %+v, want series and no breach", gateName(gateBys[i]), v)
		}
	}
}

func TestWilson(t *testing.T) {
	for _, c := range []struct {
		k, n   int
		lo, hi float64
	}{{0, 200, 0, 0.0188}, {143, 200, 0.649, 0.773}, {200, 200, 0.9812, 1}} {
		lo, hi := wilson(c.k, c.n)
		if math.Abs(lo-c.lo) > 0.001 || math.Abs(hi-c.hi) > 0.001 {
			t.Errorf("wilson(%d, %d) = %.4f-%.4f, want %.4f-%.4f", c.k, c.n, lo, hi, c.lo, c.hi)
		}
	}
}
