package alloctrack

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// AggregateConfig bounds the series one app gets.
type AggregateConfig struct {
	TopClasses int           // classes with a series of their own
	TopSites   int           // sites with a series of their own (default 100)
	Expiry     time.Duration // an admitted series idle this long is dropped (0: never)
	// Candidates bounds the bookkeeping of classes and sites waiting for a
	// series; 0 means 4 × the top size.
	Candidates int
	// StackLabelMax caps the length of a site's stack text.
	StackLabelMax int
	// HistoryWindows is how many recent windows are remembered for rates
	// and recent profiles (0: DefaultHistoryWindows; negative: none).
	HistoryWindows int
}

// Fill sets every unset field to its default.
func (c *AggregateConfig) Fill() {
	if c.TopClasses <= 0 {
		c.TopClasses = 100
	}
	if c.TopSites <= 0 {
		c.TopSites = 100
	}
	if c.StackLabelMax <= 0 {
		c.StackLabelMax = 1024
	}
	if c.HistoryWindows == 0 {
		c.HistoryWindows = DefaultHistoryWindows
	}
}

type series struct {
	Count
	last time.Time
	name string // a class series' own copy of the class name
}

type siteSeries struct {
	series
	info SiteInfo
	smp  Count    // heapprofd sites: samples
	est  Estimate // heapprofd sites: estimate
}

// Counters accumulate one app's allocations per class and per site, with
// memory and series bounded whatever the app does. Counts only grow; the
// sum over classes (or sites) including Other equals Total as long as no
// series has expired. It is safe for concurrent use.
type Counters struct {
	cfg AggregateConfig

	mu         sync.Mutex
	gen        uint64
	total      Count
	classes    map[string]*series
	classOther Count
	classCands candidates[string]
	sites      map[uint64]*siteSeries
	siteOther  Count
	siteCands  candidates[uint64]
	history    []window
	last       time.Time // end of the last counted window

	// Heapprofd dumps (sampled windows).
	heapprofd          bool
	sampled            Count
	estimated          Estimate
	siteOtherSampled   Count
	siteOtherEstimated Estimate
}

// NewCounters returns empty counters.
func NewCounters(cfg AggregateConfig) *Counters {
	cfg.Fill()
	cc, sc := cfg.Candidates, cfg.Candidates
	if cc <= 0 {
		cc, sc = 4*cfg.TopClasses, 4*cfg.TopSites
	}
	return &Counters{
		cfg:        cfg,
		classes:    map[string]*series{},
		classCands: newCandidates[string](cc),
		sites:      map[uint64]*siteSeries{},
		siteCands:  newCandidates[uint64](sc),
	}
}

// countersGen numbers the states of every Counters of the process.
var countersGen atomic.Uint64

// grow returns s with length n, reusing its array when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// pickScratch is the working memory of one Counters.Add, reused through
// pickPool.
type pickScratch struct {
	weights []uint64
	done    []bool
	heap    []int32
	un      []int32
}

var pickPool = sync.Pool{New: func() any { return new(pickScratch) }}

// heavier orders sites heaviest first: by weight, then by count, then by
// hash.
func (ps *pickScratch) heavier(w *Window, a, b int32) int {
	if d := cmp.Compare(ps.weights[b], ps.weights[a]); d != 0 {
		return d
	}
	if d := cmpCount(w.Sites[a].Count, w.Sites[b].Count); d != 0 {
		return d
	}
	return cmp.Compare(w.Sites[a].Hash, w.Sites[b].Hash)
}

// selectHeaviest returns the m heaviest sites among idx (indices into
// w.Sites), heaviest first.
func (ps *pickScratch) selectHeaviest(w *Window, idx []int32, m int) []int32 {
	hp := ps.heap[:0]
	// A min-heap of the m heaviest so far: the lightest at the root.
	lighter := func(i, j int) bool { return ps.heavier(w, hp[i], hp[j]) > 0 }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(hp) {
				return
			}
			c := l
			if r := l + 1; r < len(hp) && lighter(r, l) {
				c = r
			}
			if !lighter(c, i) {
				return
			}
			hp[i], hp[c] = hp[c], hp[i]
			i = c
		}
	}
	for _, k := range idx {
		if len(hp) < m {
			hp = append(hp, k)
			for i := len(hp) - 1; i > 0; {
				p := (i - 1) / 2
				if !lighter(i, p) {
					break
				}
				hp[i], hp[p] = hp[p], hp[i]
				i = p
			}
			continue
		}
		if m == 0 || ps.heavier(w, k, hp[0]) >= 0 {
			continue
		}
		hp[0] = k
		down(0)
	}
	slices.SortFunc(hp, func(a, b int32) int { return ps.heavier(w, a, b) })
	ps.heap = hp
	return hp
}

// Add counts one window of the app. A zero w.Start means the window began
// when the one before ended (or at w.End, for the first). It keeps nothing
// of w: admitted sites get their labels (new strings) from w.Info, and
// class names kept are copies. It sorts w.Classes.
//
// Classes and sites are admitted by one policy: those with a series count
// into it; of the others, the heaviest (by allocations, counted or
// estimated) take the free series, the next heaviest are offered as
// candidates (at most as many as the candidates kept), and every one
// counts into other; one that is a candidate already gains weight.
func (c *Counters) Add(w *Window) {
	sampled := w.Sampling != nil
	slices.SortFunc(w.Classes, func(a, b ClassDelta) int {
		if d := cmpCount(a.Count, b.Count); d != 0 {
			return d
		}
		return strings.Compare(a.Class, b.Class)
	})
	ps := pickPool.Get().(*pickScratch)
	defer pickPool.Put(ps)
	ps.weights = grow(ps.weights, len(w.Sites))
	for i := range w.Sites {
		ps.weights[i] = w.weight(&w.Sites[i])
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	start, now := w.Start, w.End
	if start.IsZero() {
		start = c.last
		if start.IsZero() {
			start = now
		}
	}
	c.gen = countersGen.Add(1)
	c.expireLocked(now)
	c.last = now
	hw := window{WindowTotal: WindowTotal{Start: start, End: now}}
	if sampled {
		c.heapprofd = true
		c.sampled = addCounts(c.sampled, w.Total)
		c.estimated.add(w.Estimated)
		hw.Sampled, hw.Estimated = w.Total, w.Estimated
	} else {
		c.total = addCounts(c.total, w.Total)
		hw.Count = w.Total
	}
	defer func() { c.remember(hw) }() // under c.mu, released by the earlier defer

	for _, cd := range w.Classes {
		n := cd.Count
		// A report's names share one string per table: a name kept past
		// this window (a new series, a candidate, the window history) is
		// a copy of its own, so that it keeps no table alive.
		k := cd.Class
		if c.classes[k] == nil {
			k = strings.Clone(k)
		}
		s := admit(c.classes, c.cfg.TopClasses, &c.classCands, &c.classOther, k, n)
		if s == nil {
			continue
		}
		if s.name == "" {
			s.name = k
		}
		hw.classes = append(hw.classes, keyCount[string]{s.name, n})
		s.Allocations += n.Allocations
		s.Bytes += n.Bytes
		s.last = now
	}

	count := func(s *siteSeries, i int32) {
		sd := &w.Sites[i]
		if s.info.ID == "" {
			// Labels are built once, when a series first counts: only
			// admitted sites pay for naming their frames.
			s.info = w.Info(int(i), c.cfg.StackLabelMax)
		}
		if sampled {
			s.smp = addCounts(s.smp, sd.Count)
			s.est.add(sd.Estimated)
			hw.hsites = append(hw.hsites, keyEstimate{k: sd.Hash, smp: sd.Count, est: sd.Estimated})
		} else {
			s.Allocations += sd.Count.Allocations
			s.Bytes += sd.Count.Bytes
			hw.sites = append(hw.sites, keyCount[uint64]{sd.Hash, sd.Count})
		}
		s.last = now
	}
	toOther := func(i int32) {
		sd := &w.Sites[i]
		if sampled {
			c.siteOtherSampled = addCounts(c.siteOtherSampled, sd.Count)
			c.siteOtherEstimated.add(sd.Estimated)
		} else {
			c.siteOther.Allocations += sd.Count.Allocations
			c.siteOther.Bytes += sd.Count.Bytes
		}
	}

	free := max(c.cfg.TopSites-len(c.sites), 0)
	un := ps.un[:0]
	for i := range w.Sites {
		h := w.Sites[i].Hash
		if s := c.sites[h]; s != nil {
			count(s, int32(i))
			continue
		}
		if free == 0 {
			// No series to win this time: a known candidate gains weight.
			if cw, ok := c.siteCands.w[h]; ok {
				c.siteCands.w[h] = cw + ps.weights[i]
				toOther(int32(i))
				continue
			}
		}
		un = append(un, int32(i))
	}
	ps.un = un
	ps.done = grow(ps.done, len(w.Sites))
	for j, k := range ps.selectHeaviest(w, un, free+c.siteCands.max) {
		ps.done[k] = true
		h := w.Sites[k].Hash
		if j < free {
			s := &siteSeries{}
			c.sites[h] = s
			c.siteCands.remove(h)
			count(s, k)
			continue
		}
		toOther(k)
		c.siteCands.offer(h, ps.weights[k])
	}
	for _, k := range un {
		if ps.done[k] {
			continue // admitted or offered above
		}
		toOther(k)
		if free > 0 {
			h := w.Sites[k].Hash
			if cw, ok := c.siteCands.w[h]; ok {
				c.siteCands.w[h] = cw + ps.weights[k]
			}
		}
	}
}

// admit returns k's series, creating it while fewer than top exist;
// without one, n counts into other and weighs for k as a candidate.
func admit[K comparable, S any](m map[K]*S, top int, cands *candidates[K], other *Count, k K, n Count) *S {
	s := m[k]
	if s == nil && len(m) < top {
		s = new(S)
		m[k] = s
		cands.remove(k)
	}
	if s == nil {
		other.Allocations += n.Allocations
		other.Bytes += n.Bytes
		cands.offer(k, n.Allocations)
	}
	return s
}

// expireLocked drops admitted series idle longer than the expiry and
// admits the heaviest candidates in their place (they start from zero).
func (c *Counters) expireLocked(now time.Time) {
	if c.cfg.Expiry <= 0 {
		return
	}
	cut := now.Add(-c.cfg.Expiry)
	for k, s := range c.classes {
		if s.last.Before(cut) {
			delete(c.classes, k)
		}
	}
	for k, s := range c.sites {
		if s.last.Before(cut) {
			delete(c.sites, k)
		}
	}
	for len(c.classes) < c.cfg.TopClasses {
		k, ok := c.classCands.popMax()
		if !ok {
			break
		}
		c.classes[k] = &series{last: now, name: k}
	}
	for len(c.sites) < c.cfg.TopSites {
		k, ok := c.siteCands.popMax()
		if !ok {
			break
		}
		// Its labels are filled in when it next counts.
		c.sites[k] = &siteSeries{series: series{last: now}}
	}
}

// Snapshot returns a consistent copy of the counters, sorted by label.
func (c *Counters) Snapshot() AppCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := AppCounts{Gen: c.gen, Total: c.total, ClassOther: c.classOther, SiteOther: c.siteOther, Windows: c.windowsLocked(),
		Heapprofd: c.heapprofd, Sampled: c.sampled, Estimated: c.estimated,
		SiteOtherSampled: c.siteOtherSampled, SiteOtherEstimated: c.siteOtherEstimated}
	out.Classes = make([]ClassCount, 0, len(c.classes))
	for k, s := range c.classes {
		out.Classes = append(out.Classes, ClassCount{Class: k, Count: s.Count})
	}
	slices.SortFunc(out.Classes, func(a, b ClassCount) int { return strings.Compare(a.Class, b.Class) })
	out.Sites = make([]SiteCount, 0, len(c.sites))
	for _, s := range c.sites {
		if s.info.ID == "" {
			continue // admitted, but has not counted yet
		}
		out.Sites = append(out.Sites, SiteCount{SiteInfo: s.info, Count: s.Count, Sampled: s.smp, Estimated: s.est})
	}
	slices.SortFunc(out.Sites, func(a, b SiteCount) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// candidates keeps weights of keys waiting for a series, bounded: when
// full, the lighter half is forgotten.
type candidates[K comparable] struct {
	max int
	w   map[K]uint64
}

func newCandidates[K comparable](max int) candidates[K] {
	return candidates[K]{max: max, w: map[K]uint64{}}
}

func (c *candidates[K]) has(k K) bool { _, ok := c.w[k]; return ok }

func (c *candidates[K]) remove(k K) { delete(c.w, k) }

// offer adds weight to k and returns the keys forgotten to make room.
func (c *candidates[K]) offer(k K, w uint64) []K {
	if _, ok := c.w[k]; ok || len(c.w) < c.max {
		c.w[k] += w
		return nil
	}
	type kw struct {
		k K
		w uint64
	}
	all := make([]kw, 0, len(c.w))
	for k, w := range c.w {
		all = append(all, kw{k, w})
	}
	slices.SortFunc(all, func(a, b kw) int {
		switch {
		case a.w > b.w:
			return -1
		case a.w < b.w:
			return 1
		}
		return 0
	})
	var dropped []K
	for _, e := range all[len(all)/2:] {
		delete(c.w, e.k)
		dropped = append(dropped, e.k)
	}
	c.w[k] += w
	return dropped
}

func (c *candidates[K]) popMax() (K, bool) {
	var best K
	var bw uint64
	found := false
	for k, w := range c.w {
		if !found || w > bw {
			best, bw, found = k, w, true
		}
	}
	if found {
		delete(c.w, best)
	}
	return best, found
}
