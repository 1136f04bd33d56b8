package offline

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/gate"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// Value is one run's figures for a test, class or site. The SEs are the
// sampling standard errors of estimates (heapprofd, agent logs of known
// rate), 0 for exact counts.
type Value struct {
	Allocations, Bytes     float64
	AllocationsSE, BytesSE float64
}

// LoadedRun is one input of a RunSet.
type LoadedRun struct {
	Path string
	// Kind: "tests.json" for a bare test run, else the Input kind
	// ("exact", "heapprofd", "agent", "samples"); Tests tells that the
	// run has per-test figures.
	Kind      string
	Tests     bool
	Estimated bool
	// Seconds the run lasted, 0 when unknown (bare files, tests.json).
	Seconds float64
	// Shortfall: why the run holds less than a whole run, nil if whole;
	// Partial: which of its tests are partial, nil if none.
	Shortfall, Partial *ShortfallError
}

// RunSet holds several runs of one side, grouped by test, class and site:
// each map's values have one entry per run, in Runs' order (nil: the run
// does not have it).
type RunSet struct {
	Runs    []LoadedRun
	Tests   map[string][]*Value
	Classes map[string][]*Value
	Sites   map[string][]*Value
	// SiteLabels names each site: its class and app frame.
	SiteLabels map[string]string
}

// LoadRuns reads each path (a capture directory, a tests.json file, a
// report, a perfetto trace; agent logs only as samples, see LoadRunsRate)
// as one run.
func LoadRuns(paths []string) (*RunSet, error) { return LoadRunsRate(paths, 0) }

// LoadRunsRate is LoadRuns with the agent logs' sample rate (0: unknown).
// A capture directory with tests.json gives per-test figures and, when it
// also holds reports or a trace, per-class and per-site figures.
func LoadRunsRate(paths []string, every uint64) (*RunSet, error) {
	rs := &RunSet{Tests: map[string][]*Value{}, Classes: map[string][]*Value{}, Sites: map[string][]*Value{}, SiteLabels: map[string]string{}}
	var errs []error
	for _, p := range paths {
		if err := rs.load(p, every); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rs, nil
}

func (rs *RunSet) load(path string, every uint64) error {
	i := len(rs.Runs)
	run := LoadedRun{Path: path}
	var tr *TestRun
	if TestRunPath(path) != "" {
		var err error
		if tr, err = ReadTestRun(path); err != nil {
			return err
		}
		run.Tests, run.Kind = true, TestsFile
		run.Shortfall, run.Partial = tr.Shortfall(), tr.PartialShortfall()
	}
	in, err := ReadInput(path)
	switch {
	case err != nil && tr == nil:
		return err
	case err == nil:
		in.Every = every
		t := alloctrack.NewTally()
		if err := in.AddTo(t); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		run.Kind, run.Estimated, run.Seconds = in.Kind(), t.Estimated, in.Duration.Seconds()
		if tr == nil {
			run.Shortfall = in.Shortfall()
		}
		rs.addTally(i, t)
	}
	rs.Runs = append(rs.Runs, run)
	if tr != nil {
		for _, t := range tr.Tests {
			rs.put(rs.Tests, t.Name, i, testValue(t.Figures))
			run.Estimated = run.Estimated || t.Estimated
		}
		rs.Runs[i].Estimated = run.Estimated
	}
	return nil
}

// sampledSE is the standard error of an estimate made from n samples,
// taking the sampled count as Poisson: est/sqrt(n).
func sampledSE(est float64, n uint64) float64 {
	if n == 0 {
		return 0
	}
	return est / math.Sqrt(float64(n))
}

func testValue(f pertest.Figures) Value {
	v := Value{Allocations: float64(f.Allocations), Bytes: float64(f.Bytes)}
	if f.Estimated {
		v.AllocationsSE = sampledSE(v.Allocations, f.SampledAllocations)
		v.BytesSE = sampledSE(v.Bytes, f.SampledAllocations)
	}
	return v
}

func (rs *RunSet) addTally(i int, t *alloctrack.Tally) {
	for name, c := range t.Classes {
		rs.put(rs.Classes, name, i, Value{Allocations: float64(c.Allocations), Bytes: float64(c.Bytes)})
	}
	for _, s := range t.TopSites(0, false) {
		v := Value{Allocations: float64(s.Allocations), Bytes: float64(s.Bytes)}
		if s.Estimated {
			v = Value{Allocations: s.Estimate.Allocations, Bytes: s.Estimate.Bytes,
				AllocationsSE: sampledSE(s.Estimate.Allocations, s.Sampled.Allocations),
				BytesSE:       sampledSE(s.Estimate.Bytes, s.Sampled.Allocations)}
		}
		if old := rs.value(rs.Sites, s.ID, i); old != nil {
			v = addValues(*old, v)
		}
		rs.put(rs.Sites, s.ID, i, v)
		label := s.Class
		if s.AppFrame != "" {
			label += " at " + s.AppFrame
		}
		rs.SiteLabels[s.ID] = label
	}
}

func addValues(a, b Value) Value {
	return Value{a.Allocations + b.Allocations, a.Bytes + b.Bytes,
		math.Hypot(a.AllocationsSE, b.AllocationsSE), math.Hypot(a.BytesSE, b.BytesSE)}
}

func (rs *RunSet) value(m map[string][]*Value, key string, i int) *Value {
	if v := m[key]; i < len(v) {
		return v[i]
	}
	return nil
}

func (rs *RunSet) put(m map[string][]*Value, key string, i int, v Value) {
	vs := m[key]
	for len(vs) <= i {
		vs = append(vs, nil)
	}
	vs[i] = &v
	m[key] = vs
}

// GateSeries pairs base and nw by "test", "class" or "site", for
// "allocations" or "bytes", keys sorted. A test counts in the runs that
// ran it; a class or site is 0 in a run that holds allocations but not it.
func GateSeries(base, nw *RunSet, by, metric string) []gate.Series {
	pick := func(rs *RunSet) map[string][]*Value {
		switch by {
		case "test":
			return rs.Tests
		case "class":
			return rs.Classes
		}
		return rs.Sites
	}
	bm, nm := pick(base), pick(nw)
	rate := PerSecond(base, nw, by)
	keys := map[string]bool{}
	for k := range bm {
		keys[k] = true
	}
	for k := range nm {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	out := make([]gate.Series, 0, len(sorted))
	for _, k := range sorted {
		s := gate.Series{Key: by + ":" + k}
		s.Base, s.BaseSE = base.side(bm[k], by != "test", metric, rate)
		s.New, s.NewSE = nw.side(nm[k], by != "test", metric, rate)
		out = append(out, s)
	}
	return out
}

// DiffSeries is what one diff over several runs a side judges as one
// gate: GateSeries by "test", "class" or "site" for each metric in turn,
// and each series' metric.
func DiffSeries(base, nw *RunSet, by string, metrics []string) (series []gate.Series, metricOf []string) {
	for _, m := range metrics {
		s := GateSeries(base, nw, by, m)
		series = append(series, s...)
		for range s {
			metricOf = append(metricOf, m)
		}
	}
	return series, metricOf
}

// PerSecond tells whether GateSeries compares classes and sites per second:
// when every run of both sides knows its duration (capture directories), as
// the two-run diff does. Tests are compared per test, always.
func PerSecond(base, nw *RunSet, by string) bool {
	if by == "test" {
		return false
	}
	for _, r := range append(slices.Clone(base.Runs), nw.Runs...) {
		if r.Seconds <= 0 {
			return false
		}
	}
	return true
}

// side lists a key's values over the runs; zero fills runs that hold
// allocations but not this key. The SEs are nil when all are 0.
func (rs *RunSet) side(vs []*Value, zero bool, metric string, rate bool) (vals, ses []float64) {
	sampled := false
	for i, r := range rs.Runs {
		var v *Value
		if i < len(vs) {
			v = vs[i]
		}
		if v == nil && zero && r.Kind != TestsFile {
			v = &Value{}
		}
		if v == nil {
			continue
		}
		x, se := v.Allocations, v.AllocationsSE
		if metric == "bytes" {
			x, se = v.Bytes, v.BytesSE
		}
		if rate {
			x, se = x/r.Seconds, se/r.Seconds
		}
		vals, ses = append(vals, x), append(ses, se)
		sampled = sampled || se > 0
	}
	if !sampled {
		ses = nil
	}
	return vals, ses
}
