package ddm_test

import (
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// BenchmarkCountersAdd counts a maximum-size report (65,535 allocations of
// 16 frames) into counters that already hold a steady state.
func BenchmarkCountersAdd(b *testing.B) {
	raw := maxReport(b)
	r, err := allocreport.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{})
	now := time.Unix(1_000_000, 0)
	addReport(c, r, now)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(10 * time.Second)
		addReport(c, r, now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(r.Allocations)), "ns/allocation")
}

// Counting a report should cost a bounded number of allocations per
// allocation in it. The maximum-size report has nearly every site distinct,
// so nearly every site is a new candidate.
func TestCountersAddAllocationBudget(t *testing.T) {
	r, err := allocreport.Parse(maxReport(t))
	if err != nil {
		t.Fatal(err)
	}
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{})
	now := time.Unix(1_000_000, 0)
	addReport(c, r, now)
	allocs := testing.AllocsPerRun(1, func() {
		now = now.Add(10 * time.Second)
		addReport(c, r, now)
	})
	perEntry := allocs / float64(len(r.Allocations))
	t.Logf("%.0f allocations per Add of %d entries (%.1f per entry)", allocs, len(r.Allocations), perEntry)
	if perEntry > 8 {
		t.Fatalf("regression: Counters.Add makes %.1f allocations per report entry (%.0f per maximum-size report; "+
			"BenchmarkCountersAdd: ~0.5 s and ~450 MB per report): Counters.Add builds a full "+
			"SiteInfo (stack text, frame list) for every site that enters the candidate set, and most are "+
			"forgotten again when the set halves; build infos only for the candidates left at the end of Add", perEntry, allocs)
	}
}

// BenchmarkCountersAddTypical counts a maximum-size report whose 65,535
// allocations come from 200 sites, as an app's report usually does.
func BenchmarkCountersAddTypical(b *testing.B) {
	full, err := allocreport.Parse(maxReport(b))
	if err != nil {
		b.Fatal(err)
	}
	bld := allocreport.NewBuilder()
	for i := range allocreport.MaxEntries {
		a := &full.Allocations[(i*7919)%200]
		var frames []allocreport.FrameName
		for _, f := range full.Stack(a).All() {
			frames = append(frames, allocreport.FrameName{Class: full.RawClasses[f.Class], Method: full.RawMethods[f.Method], File: full.RawFiles[f.File], Line: f.Line})
		}
		bld.Add(a.Size, a.Thread, full.RawClasses[a.Class], frames)
	}
	r, err := bld.Report()
	if err != nil {
		b.Fatal(err)
	}
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{})
	now := time.Unix(1_000_000, 0)
	addReport(c, r, now)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(10 * time.Second)
		addReport(c, r, now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(r.Allocations)), "ns/allocation")
}

// maxReport is the largest report a VM sends (allocreport.SyntheticMax).
func maxReport(tb testing.TB) []byte {
	tb.Helper()
	b, err := allocreport.SyntheticMax()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// addReport counts r as the window ending at now, as a session does.
func addReport(c *alloctrack.Counters, r *allocreport.Report, now time.Time) {
	w := ddm.WindowOfReport(r, time.Time{}, now)
	c.Add(w)
	w.Release()
}
