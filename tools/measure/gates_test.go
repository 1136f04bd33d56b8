package main

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/gate"
	"github.com/alloctrack/alloctrack/sim"
)

func testGatesOpts() gatesOpts {
	return gatesOpts{trials: 3, runs: 5, tests: 20, seed: 1, effect: 0.15, metric: "allocations", scope: "all",
		noise: sim.DefaultRunNoise(0), cfg: gate.Config{Level: 0.05, MinEffect: 0.10}}
}

// The same options give the same series and the same report; another
// seed gives others.
func TestGatesDeterministic(t *testing.T) {
	o := testGatesOpts()
	suite, n := o.trialSuite(2)
	m := sim.NewSuiteModel(suite)
	a := gateSeries(runs(m, n, 0, 5), runs(m, n, 5, 5), "allocations", false)
	b := gateSeries(runs(m, n, 0, 5), runs(m, n, 5, 5), "allocations", false)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same trial gave different series")
	}
	if r1, r2 := o.measure(), o.measure(); r1 != r2 {
		t.Fatalf("two reports of the same seed differ:\n%s\n%s", r1, r2)
	}
	o2 := o
	o2.seed = 2
	s2, n2 := o2.trialSuite(2)
	m2 := sim.NewSuiteModel(s2)
	if reflect.DeepEqual(a, gateSeries(runs(m2, n2, 0, 5), runs(m2, n2, 5, 5), "allocations", false)) {
		t.Fatal("seeds 1 and 2 gave the same series")
	}
}

// A gate holds every test, class and site, each run's values summed
// over the run's tests.
func TestGateSeriesSums(t *testing.T) {
	o := testGatesOpts()
	suite, n := o.trialSuite(0)
	m := sim.NewSuiteModel(suite)
	base, nw := runs(m, n, 0, 5), runs(m, n, 5, 4)
	s := gateSeries(base, nw, "allocations", false)
	sums := map[string][2]float64{}
	var tests int
	for _, x := range s {
		if len(x.Base) != 5 || len(x.New) != 4 {
			t.Fatalf("%s: %d and %d runs, want 5 and 4", x.Key, len(x.Base), len(x.New))
		}
		kind, _, _ := strings.Cut(x.Key, ":")
		v := sums[kind]
		v[0] += x.Base[2]
		v[1] += x.New[3]
		sums[kind] = v
		if kind == "test" {
			tests++
		}
	}
	var want [2]float64
	for _, tc := range base[2] {
		want[0] += float64(tc.Total.Allocations)
	}
	for _, tc := range nw[3] {
		want[1] += float64(tc.Total.Allocations)
	}
	for _, kind := range []string{"test", "class", "site"} {
		if sums[kind] != want {
			t.Errorf("%s series sum to %v, want the runs' totals %v", kind, sums[kind], want)
		}
	}
	keys := map[string]bool{}
	for _, rs := range append(base, nw...) {
		for _, tc := range rs {
			keys["test:"+tc.Name] = true
			for k := range tc.ByClass {
				keys["class:"+k] = true
			}
			for k := range tc.BySiteID {
				keys["site:"+k] = true
			}
		}
	}
	for _, x := range s {
		delete(keys, x.Key)
	}
	if len(keys) > 0 {
		t.Errorf("no series for %v", keys)
	}
	if tests != 20 || len(gateSeries(base, nw, "allocations", true)) != 20 {
		t.Errorf("%d test series, want 20 (and 20 with tests only)", tests)
	}
}

// An A/B trial regresses the new side's chosen test only: a +100 % is
// found, an A/A trial of the same suite finds nothing.
func TestGatesTrialRegresses(t *testing.T) {
	o := testGatesOpts()
	o.effect = 1
	if r := o.trial(4, true); !r.found || r.elsewhere {
		t.Errorf("A/B +100 %%: %+v, want the regressed test found and no other", r)
	}
	if r := o.trial(4, false); r.breach {
		t.Errorf("A/A: %+v, want no breach", r)
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
