package alloctrack

import (
	"fmt"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// The bookkeeping of classes and sites waiting for a series stays bounded
// whatever the app allocates: 100,000 distinct sites over 50 classes.
func TestCountersBookkeepingBounded(t *testing.T) {
	for _, cfg := range []AggregateConfig{
		{TopClasses: 5, TopSites: 20},                 // candidates: 4 × top
		{TopClasses: 5, TopSites: 20, Candidates: 64}, // explicit bound
		{TopClasses: 5, TopSites: 20, Candidates: 64, Expiry: 3 * time.Second},
	} {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			c := NewCounters(cfg)
			maxClass, maxSite := 4*cfg.TopClasses, 4*cfg.TopSites
			if cfg.Candidates > 0 {
				maxClass, maxSite = cfg.Candidates, cfg.Candidates
			}
			site := 0
			var peakCands, peakReps int
			for rep := range 20 {
				b := allocreport.NewBuilder()
				for range 5_000 {
					frames := []allocreport.FrameName{
						{Class: "Ljava/util/ArrayList;", Method: "add", File: "ArrayList.java", Line: 457},
						{Class: fmt.Sprintf("Lcom/example/M%d;", site/30000), Method: "run", File: "M.java", Line: int16(site % 30000)},
					}
					b.Add(16, 1, fmt.Sprintf("Lcom/example/K%d;", site%50), frames)
					site++
				}
				r, err := b.Report()
				if err != nil {
					t.Fatal(err)
				}
				addReport(c, r, time.Unix(int64(rep), 0))

				c.mu.Lock()
				nc, ns := len(c.classCands.w), len(c.siteCands.w)
				nr := 0
				for _, s := range c.sites {
					if len(s.info.Frames) > 0 {
						nr++
					}
				}
				nClasses, nSites := len(c.classes), len(c.sites)
				c.mu.Unlock()
				peakCands, peakReps = max(peakCands, ns), max(peakReps, nr)
				if nc > maxClass || ns > maxSite || nr > cfg.TopSites {
					t.Fatalf("after %d sites: %d class candidates (max %d), %d site candidates and %d site infos (max %d)",
						site, nc, maxClass, ns, nr, maxSite)
				}
				if nClasses > cfg.TopClasses || nSites > cfg.TopSites {
					t.Fatalf("%d classes, %d sites admitted", nClasses, nSites)
				}
				// Site infos are kept only for admitted series.
			}
			if site != 100_000 {
				t.Fatalf("fed %d sites", site)
			}
			t.Logf("peak: %d site candidates, %d site infos (admitted series only)", peakCands, peakReps)
		})
	}
}

func TestCandidatesForgetLighterHalf(t *testing.T) {
	c := newCandidates[int](4)
	for k, w := range []uint64{10, 1, 7, 3} {
		if d := c.offer(k, w); d != nil {
			t.Fatalf("dropped %v before full", d)
		}
	}
	dropped := c.offer(9, 5)
	if len(dropped) != 2 || !(c.has(0) && c.has(2) && c.has(9)) || c.has(1) || c.has(3) {
		t.Fatalf("dropped %v, kept %v; want the two lightest (1 and 3) dropped", dropped, c.w)
	}
	// A known key gains weight without dropping anything.
	if d := c.offer(9, 100); d != nil || c.w[9] != 105 {
		t.Fatalf("offer to a known key: dropped %v, weight %d", d, c.w[9])
	}
	if k, ok := c.popMax(); !ok || k != 9 {
		t.Fatalf("popMax = %d, %v; want 9", k, ok)
	}
	if k, _ := c.popMax(); k != 0 {
		t.Fatalf("popMax = %d, want 0", k)
	}
}

// BenchmarkCountersAdd counts a maximum-size report (65,535 allocations of
// 16 frames) into counters that already hold a steady state.
func BenchmarkCountersAdd(b *testing.B) {
	raw := maxReport(b)
	r, err := allocreport.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	c := NewCounters(AggregateConfig{})
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
	c := NewCounters(AggregateConfig{})
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
			"BenchmarkCountersAdd: ~0.5 s and ~450 MB per report): alloctrack/aggregate.go Add builds a full "+
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
	c := NewCounters(AggregateConfig{})
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
func addReport(c *Counters, r *allocreport.Report, now time.Time) {
	w := WindowOfReport(r, time.Time{}, now)
	c.Add(w)
	w.Release()
}
