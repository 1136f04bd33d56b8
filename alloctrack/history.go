package alloctrack

import (
	"slices"
	"strings"
)

// DefaultHistoryWindows is how many recent windows Counters remember when
// AggregateConfig.HistoryWindows is 0.
const DefaultHistoryWindows = 30

// window is one remembered window: its total and the counts of the
// classes and sites that had a series then. What is left counts as other.
type window struct {
	WindowTotal
	classes []keyCount[string]
	sites   []keyCount[uint64]
	hsites  []keyEstimate // heapprofd sites
}

// keyEstimate is a heapprofd site's share of a window.
type keyEstimate struct {
	k   uint64
	smp Count
	est Estimate
}

type keyCount[K comparable] struct {
	k K
	Count
}

// remember appends a window to the bounded history (c.mu held). A window
// without a span (a process's first heapprofd dump: its samples have no
// known start) is counted in the totals but not kept: there is nothing to
// rate it over, to draw, or to count among the recent windows.
func (c *Counters) remember(w window) {
	if c.cfg.HistoryWindows < 0 || !w.End.After(w.Start) {
		return
	}
	if len(c.history) >= c.cfg.HistoryWindows {
		// Reuse the oldest entry's slices.
		old := c.history[0]
		copy(c.history, c.history[1:])
		c.history = c.history[:len(c.history)-1]
		w.classes = append(old.classes[:0], w.classes...)
		w.sites = append(old.sites[:0], w.sites...)
		w.hsites = append(old.hsites[:0], w.hsites...)
	}
	c.history = append(c.history, w)
}

// Recent sums the last n remembered windows (n <= 0: all of them). A site
// whose series expired since counts as other.
func (c *Counters) Recent(n int) Recent {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.history
	if n > 0 && len(h) > n {
		h = h[len(h)-n:]
	}
	var r Recent
	classes := map[string]Count{}
	sites := map[uint64]Count{}
	type se struct {
		smp Count
		est Estimate
	}
	hsites := map[uint64]se{}
	for _, w := range h {
		r.Windows = append(r.Windows, w.WindowTotal)
		r.Total.Allocations += w.Allocations
		r.Total.Bytes += w.Bytes
		r.Sampled = addCounts(r.Sampled, w.Sampled)
		r.Estimated.add(w.Estimated)
		for _, ke := range w.hsites {
			v := hsites[ke.k]
			v.smp = addCounts(v.smp, ke.smp)
			v.est.add(ke.est)
			hsites[ke.k] = v
		}
		for _, kc := range w.classes {
			classes[kc.k] = addCounts(classes[kc.k], kc.Count)
		}
		for _, kc := range w.sites {
			sites[kc.k] = addCounts(sites[kc.k], kc.Count)
		}
	}
	var inClasses, inSites Count
	for k, v := range classes {
		r.Classes = append(r.Classes, ClassCount{Class: k, Count: v})
		inClasses = addCounts(inClasses, v)
	}
	for k, v := range sites {
		s := c.sites[k]
		if s == nil || s.info.ID == "" {
			continue
		}
		r.Sites = append(r.Sites, SiteCount{SiteInfo: s.info, Count: v})
		inSites = addCounts(inSites, v)
	}
	var inSampled Count
	var inEstimated Estimate
	for k, v := range hsites {
		s := c.sites[k]
		if s == nil || s.info.ID == "" {
			continue
		}
		r.Sites = append(r.Sites, SiteCount{SiteInfo: s.info, Sampled: v.smp, Estimated: v.est})
		inSampled = addCounts(inSampled, v.smp)
		inEstimated.add(v.est)
	}
	r.SiteOtherSampled = subCounts(r.Sampled, inSampled)
	r.SiteOtherEstimated = subEstimate(r.Estimated, inEstimated)
	r.ClassOther = subCounts(r.Total, inClasses)
	r.SiteOther = subCounts(r.Total, inSites)
	slices.SortFunc(r.Classes, func(a, b ClassCount) int { return strings.Compare(a.Class, b.Class) })
	slices.SortFunc(r.Sites, func(a, b SiteCount) int { return strings.Compare(a.ID, b.ID) })
	return r
}

// windowsLocked copies the window totals (c.mu held).
func (c *Counters) windowsLocked() []WindowTotal {
	out := make([]WindowTotal, len(c.history))
	for i, w := range c.history {
		out[i] = w.WindowTotal
	}
	return out
}
