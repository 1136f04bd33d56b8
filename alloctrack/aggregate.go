package alloctrack

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/cespare/xxhash/v2"
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

func (c *AggregateConfig) fill() {
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

	// Heapprofd dumps (see AddDump).
	heapprofd          bool
	sampled            Count
	estimated          Estimate
	siteOtherSampled   Count
	siteOtherEstimated Estimate
}

// NewCounters returns empty counters.
func NewCounters(cfg AggregateConfig) *Counters {
	cfg.fill()
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

// siteHasher hashes sites of one report by names, so that the same site
// hashes alike in every report whatever its table indices.
type siteHasher struct {
	classes, methods, files []uint64
}

func newSiteHasher(r *allocreport.Report) *siteHasher {
	h := func(t []string) []uint64 {
		out := make([]uint64, len(t))
		for i, s := range t {
			out[i] = xxhash.Sum64String(s)
		}
		return out
	}
	return &siteHasher{classes: h(r.Classes), methods: h(r.Methods), files: h(r.Files)}
}

// sameWire tells whether st's frame bytes are b.
func sameWire(st allocreport.Stack, b []byte) bool {
	sb, _ := st.Wire()
	return bytes.Equal(sb, b)
}

func (sh *siteHasher) site(a *allocreport.Allocation, st allocreport.Stack) uint64 {
	h := mix(0x616c6c6f63, sh.classes[a.Class])
	if b, stride := st.Wire(); stride == allocreport.FrameLen {
		// The common layout, straight from the frame bytes.
		for j := 0; j+8 <= len(b); j += 8 {
			v := binary.BigEndian.Uint64(b[j : j+8])
			h = mix(h, frameHash(sh.classes[v>>48], sh.methods[v>>32&0xffff], sh.files[v>>16&0xffff], int16(v)))
		}
		return h
	}
	for j := range st.Len() {
		f := st.At(j)
		h = mix(h, frameHash(sh.classes[f.Class], sh.methods[f.Method], sh.files[f.File], f.Line))
	}
	return h
}

func (c *Counters) siteInfo(r *allocreport.Report, a *allocreport.Allocation, h uint64) SiteInfo {
	st := r.Stack(a)
	info := SiteInfo{ID: SiteID(h), Class: r.ClassName(a)}
	if j := AppFrame(r, st); j >= 0 {
		info.Frame = r.FrameString(st.At(j))
	}
	info.Frames = make([]Frame, st.Len())
	for j, f := range st.All() {
		info.Frames[j] = FrameOf(r, f)
	}
	var b strings.Builder
	for j, f := range st.All() {
		if j > 0 {
			b.WriteString("; ")
		}
		b.WriteString(r.FrameString(f))
		if b.Len() > c.cfg.StackLabelMax {
			break
		}
	}
	s := b.String()
	if max := c.cfg.StackLabelMax; len(s) > max {
		ellipsis := "..."
		if max < len(ellipsis) {
			ellipsis = ""
		}
		cut := max - len(ellipsis)
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut-- // never inside a UTF-8 sequence
		}
		s = s[:cut] + ellipsis
	}
	info.Stack = s
	return info
}

// countersGen numbers the states of every Counters of the process.
var countersGen atomic.Uint64

// siteAgg is one distinct site of a report being counted.
type siteAgg struct {
	h   uint64
	n   Count
	rep int32 // index of one allocation of the site
}

// rawSeq is one distinct byte sequence of class and frame indices.
type rawSeq struct {
	h     uint64
	class uint16
	site  int32 // index into addScratch.sites
	rep   int32 // an allocation with these bytes
}

// addScratch is the working memory of one Add, reused across reports (and
// apps) through scratchPool rather than allocated per window.
type addScratch struct {
	sites   []siteAgg
	table   []int32 // open addressing over sites: index + 1, 0 for empty
	raws    []rawSeq
	raw     []int32 // open addressing over raws
	classes []Count // by class index
	hashes  [3][]uint64
	heap    []int32
	sel     []int32
}

// rawSeed seeds the hashes of raw stacks within one Add.
var rawSeed = maphash.MakeSeed()

var scratchPool = sync.Pool{New: func() any { return new(addScratch) }}

// grow returns s with length n, reusing its array when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// hashTables fills the scratch's name hashes of r's tables.
func (sc *addScratch) hashTables(r *allocreport.Report) *siteHasher {
	for i, t := range [3][]string{r.Classes, r.Methods, r.Files} {
		h := grow(sc.hashes[i], len(t))
		for j, s := range t {
			h[j] = xxhash.Sum64String(s)
		}
		sc.hashes[i] = h
	}
	return &siteHasher{classes: sc.hashes[0], methods: sc.hashes[1], files: sc.hashes[2]}
}

// aggregate sums r's allocations per class and per distinct site.
func (sc *addScratch) aggregate(r *allocreport.Report) (total Count) {
	sh := sc.hashTables(r)
	sc.classes = grow(sc.classes, len(r.Classes))
	n := len(r.Allocations)
	size := 16
	for size < 2*n {
		size <<= 1
	}
	sc.table = grow(sc.table, size)
	sc.raw = grow(sc.raw, size)
	mask := uint64(size - 1)
	sc.sites = sc.sites[:0]
	sc.raws = sc.raws[:0]
	// Allocations of one site usually repeat the same bytes (class and
	// frame indices): those are matched by their bytes first, and the
	// site's hash by names is computed once per distinct byte sequence.
	// When nearly every entry is a new sequence, that costs more than it
	// saves, and is stopped.
	useRaw := true
	for i := range r.Allocations {
		a := &r.Allocations[i]
		total.add(a.Size)
		sc.classes[a.Class].add(a.Size)
		st := r.Stack(a)
		var rh uint64
		if useRaw {
			if i == 4096 && len(sc.raws) > 3*4096/4 {
				useRaw = false
			} else {
				// Raw keys live only in this table: the runtime's hash
				// (AES-based where the CPU has it) is several times
				// cheaper than xxhash on stacks this short.
				stb, _ := st.Wire()
				rh = maphash.Bytes(rawSeed, stb) ^ uint64(a.Class)*0x9e3779b97f4a7c15
				found := false
				for j := rh & mask; ; j = (j + 1) & mask {
					k := sc.raw[j]
					if k == 0 {
						break
					}
					if e := &sc.raws[k-1]; e.h == rh && e.class == a.Class && sameWire(r.Stack(&r.Allocations[e.rep]), stb) {
						sc.sites[e.site].n.add(a.Size)
						found = true
						break
					}
				}
				if found {
					continue
				}
			}
		}
		h := sh.site(a, st)
		site := int32(-1)
		for j := h & mask; ; j = (j + 1) & mask {
			k := sc.table[j]
			if k == 0 {
				sc.sites = append(sc.sites, siteAgg{h: h, rep: int32(i)})
				site = int32(len(sc.sites) - 1)
				sc.sites[site].n.add(a.Size)
				sc.table[j] = site + 1
				break
			}
			if s := &sc.sites[k-1]; s.h == h {
				s.n.add(a.Size)
				site = k - 1
				break
			}
		}
		if useRaw {
			sc.raws = append(sc.raws, rawSeq{h: rh, class: a.Class, site: site, rep: int32(i)})
			for j := rh & mask; ; j = (j + 1) & mask {
				if sc.raw[j] == 0 {
					sc.raw[j] = int32(len(sc.raws))
					break
				}
			}
		}
	}
	return total
}

// heavier orders sites heaviest first, then by hash.
func heavier(a, b *siteAgg) int {
	if d := cmpCount(a.n, b.n); d != 0 {
		return d
	}
	return cmp.Compare(a.h, b.h)
}

// selectHeaviest returns the indices (into sc.sites) of the m heaviest
// sites among idx, heaviest first.
func (sc *addScratch) selectHeaviest(idx []int32, m int) []int32 {
	hp := sc.heap[:0]
	// A min-heap of the m heaviest so far: the lightest at the root.
	lighter := func(i, j int) bool { return heavier(&sc.sites[hp[i]], &sc.sites[hp[j]]) > 0 }
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
		if m == 0 || heavier(&sc.sites[k], &sc.sites[hp[0]]) >= 0 {
			continue
		}
		hp[0] = k
		down(0)
	}
	slices.SortFunc(hp, func(a, b int32) int { return heavier(&sc.sites[a], &sc.sites[b]) })
	sc.heap = hp
	return hp
}

// Add counts every allocation of r at time now, as a window that began
// when the previous one ended (or at now, for the first). It keeps nothing
// of r: admitted sites get their labels built from r's tables (new strings).
func (c *Counters) Add(r *allocreport.Report, now time.Time) {
	c.mu.Lock()
	start := c.last
	c.mu.Unlock()
	if start.IsZero() {
		start = now
	}
	c.AddWindow(r, start, now)
}

// AddWindow counts every allocation of r, the report of the window from
// start to now, and remembers the window for Recent.
func (c *Counters) AddWindow(r *allocreport.Report, start, now time.Time) {
	if len(r.Allocations) == 0 {
		c.mu.Lock()
		c.gen = countersGen.Add(1)
		c.expireLocked(now)
		c.last = now
		c.remember(window{WindowTotal: WindowTotal{Start: start, End: now}})
		c.mu.Unlock()
		return
	}
	// Aggregate the report on its own first: admission then works per
	// distinct class and site, not per allocation.
	sc := scratchPool.Get().(*addScratch)
	defer scratchPool.Put(sc)
	total := sc.aggregate(r)

	// Classes by weight: the report's heaviest take the free series first.
	classIdx := make([]uint16, 0, 64)
	for idx := range sc.classes {
		if sc.classes[idx].Allocations > 0 {
			classIdx = append(classIdx, uint16(idx))
		}
	}
	slices.SortFunc(classIdx, func(a, b uint16) int {
		if d := cmpCount(sc.classes[a], sc.classes[b]); d != 0 {
			return d
		}
		return strings.Compare(r.Classes[a], r.Classes[b])
	})

	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen = countersGen.Add(1)
	c.expireLocked(now)
	c.total.Allocations += total.Allocations
	c.total.Bytes += total.Bytes
	c.last = now
	w := window{WindowTotal: WindowTotal{Start: start, End: now, Count: total}}
	defer func() { c.remember(w) }() // under c.mu, released by the earlier defer
	for _, idx := range classIdx {
		n := sc.classes[idx]
		// A report's names share one string per table: a name kept past
		// this window (a new series, a candidate, the window history) is
		// a copy of its own, so that it keeps no table alive.
		k := r.Classes[idx]
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
		w.classes = append(w.classes, keyCount[string]{s.name, n})
		s.Allocations += n.Allocations
		s.Bytes += n.Bytes
		s.last = now
	}

	// Sites: those with a series count into it. Of the others, the
	// heaviest take the free series, the next heaviest are offered as
	// candidates (at most as many as the candidates kept), and every one
	// counts into other; one that is a candidate already gains weight.
	free := max(c.cfg.TopSites-len(c.sites), 0)
	un := sc.sel[:0]
	for i := range sc.sites {
		sa := &sc.sites[i]
		if s := c.sites[sa.h]; s != nil {
			c.addSite(s, r, sa, now, &w)
			continue
		}
		if free == 0 {
			// No series to win this time: a known candidate gains weight.
			if w, ok := c.siteCands.w[sa.h]; ok {
				c.siteCands.w[sa.h] = w + sa.n.Allocations
				c.siteOther.Allocations += sa.n.Allocations
				c.siteOther.Bytes += sa.n.Bytes
				continue
			}
		}
		un = append(un, int32(i))
	}
	sc.sel = un
	sel := sc.selectHeaviest(un, free+c.siteCands.max)
	for j, k := range sel {
		sa := &sc.sites[k]
		sa.rep = -1 - sa.rep // done here (the representative stays recoverable)
		if j < free {
			s := &siteSeries{}
			c.sites[sa.h] = s
			c.siteCands.remove(sa.h)
			rep := *sa
			rep.rep = -1 - sa.rep
			c.addSite(s, r, &rep, now, &w)
			continue
		}
		c.siteOther.Allocations += sa.n.Allocations
		c.siteOther.Bytes += sa.n.Bytes
		c.siteCands.offer(sa.h, sa.n.Allocations)
	}
	for _, k := range un {
		sa := &sc.sites[k]
		if sa.rep < 0 {
			continue // admitted or offered above
		}
		c.siteOther.Allocations += sa.n.Allocations
		c.siteOther.Bytes += sa.n.Bytes
		if free > 0 {
			if w, ok := c.siteCands.w[sa.h]; ok {
				c.siteCands.w[sa.h] = w + sa.n.Allocations
			}
		}
	}
}

// addSite counts a report's site into its series, building its labels
// when the series first counts, and into the window w.
func (c *Counters) addSite(s *siteSeries, r *allocreport.Report, sa *siteAgg, now time.Time, w *window) {
	w.sites = append(w.sites, keyCount[uint64]{sa.h, sa.n})
	if s.info.ID == "" {
		// Labels are built once, when a series first counts: only
		// admitted sites pay for formatting their frames.
		s.info = c.siteInfo(r, &r.Allocations[sa.rep], sa.h)
	}
	s.Allocations += sa.n.Allocations
	s.Bytes += sa.n.Bytes
	s.last = now
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
