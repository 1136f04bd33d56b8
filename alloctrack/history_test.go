package alloctrack_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
)

// Recent sums exactly the last n windows, bounded by HistoryWindows, and
// what has no series counts as other, so that classes plus other and sites
// plus other add up to the total of those windows.
func TestCountersRecent(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 3, TopSites: 5, HistoryWindows: 4})
	rng := rand.New(rand.NewPCG(3, 4))
	start := time.Unix(1_000_000, 0)
	var totals []alloctrack.Count
	for i := range 7 {
		r, tot := randomReport(t, rng, 200+100*i, 10, 40)
		totals = append(totals, tot)
		c.Add(ddm.WindowOfReport(r, start.Add(time.Duration(2*i)*time.Second), start.Add(time.Duration(2*i+2)*time.Second)))
	}
	if got := len(c.Snapshot().Windows); got != 4 {
		t.Fatalf("snapshot holds %d windows, want the last 4", got)
	}
	for _, n := range []int{0, 1, 3, 4, 9} {
		rc := c.Recent(n)
		k := n // windows summed: all 4 remembered for n = 0 or n > 4
		if n == 0 || n > 4 {
			k = 4
		}
		var want alloctrack.Count
		for _, tot := range totals[7-k:] {
			want.Allocations += tot.Allocations
			want.Bytes += tot.Bytes
		}
		if len(rc.Windows) != k || rc.Total != want {
			t.Errorf("Recent(%d): %d windows, total %+v; want %d windows, %+v", n, len(rc.Windows), rc.Total, k, want)
		}
		if span := rc.Span(); span != time.Duration(2*k)*time.Second {
			t.Errorf("Recent(%d): span %v, want %v", n, span, time.Duration(2*k)*time.Second)
		}
		var cs, ss alloctrack.Count
		for _, x := range rc.Classes {
			cs.Allocations += x.Allocations
			cs.Bytes += x.Bytes
		}
		for _, x := range rc.Sites {
			ss.Allocations += x.Allocations
			ss.Bytes += x.Bytes
			if x.ID == "" || len(x.Frames) == 0 {
				t.Errorf("Recent(%d): site without labels: %+v", n, x.SiteInfo)
			}
		}
		if cs.Allocations+rc.ClassOther.Allocations != want.Allocations || ss.Bytes+rc.SiteOther.Bytes != want.Bytes {
			t.Errorf("Recent(%d): classes %+v + other %+v, sites %+v + other %+v; want %+v", n, cs, rc.ClassOther, ss, rc.SiteOther, want)
		}
		if rc.SiteOther.Allocations == 0 {
			t.Errorf("Recent(%d): 40 sites and 5 series, yet nothing counted as other", n)
		}
	}
	// Add without a start begins where the last window ended.
	r, _ := randomReport(t, rng, 10, 2, 2)
	c.Add(ddm.WindowOfReport(r, time.Time{}, start.Add(20*time.Second)))
	ws := c.Recent(1).Windows
	if len(ws) != 1 || !ws[0].Start.Equal(start.Add(14*time.Second)) {
		t.Errorf("a window with no start after one with a start: window %+v, want it to start at the previous end", ws)
	}
	// Negative: no history.
	none := alloctrack.NewCounters(alloctrack.AggregateConfig{HistoryWindows: -1})
	none.Add(ddm.WindowOfReport(r, time.Time{}, start))
	if rc := none.Recent(0); len(rc.Windows) != 0 || rc.Total.Allocations != 0 {
		t.Errorf("HistoryWindows -1 remembered %+v", rc)
	}
}

// A window without a span (a process's first heapprofd dump ends where it
// starts) counts in the totals but is not kept in the history: the recent
// windows, their span and their rates are those of windows with a span.
func TestCountersZeroSpanWindowNotKept(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 3, TopSites: 5})
	rng := rand.New(rand.NewPCG(5, 6))
	at := time.Unix(1_000_000, 0)
	r1, t1 := randomReport(t, rng, 300, 10, 40)
	r2, t2 := randomReport(t, rng, 200, 10, 40)
	c.Add(ddm.WindowOfReport(r1, at, at))
	c.Add(ddm.WindowOfReport(r2, at, at.Add(10*time.Second)))
	s, rc := c.Snapshot(), c.Recent(0)
	if len(s.Windows) != 1 || len(rc.Windows) != 1 || rc.Span() != 10*time.Second || rc.Total != t2 {
		t.Errorf("history: %d windows in the snapshot, %d recent over %v with %+v; want 1 of 10 s with %+v", len(s.Windows), len(rc.Windows), rc.Span(), rc.Total, t2)
	}
	if want := t1.Allocations + t2.Allocations; s.Total.Allocations != want {
		t.Errorf("total %d allocations, want %d (both windows)", s.Total.Allocations, want)
	}
}
