package alloctrack

import (
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Other is the class and site label that collects everything not admitted
// to a series of its own.
const Other = "other"

// AggregateConfig bounds the series one app gets.
type AggregateConfig struct {
	TopClasses int           // classes with a series of their own
	TopSites   int           // sites with a series of their own
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
		c.TopSites = 200
	}
	if c.StackLabelMax <= 0 {
		c.StackLabelMax = 1024
	}
	if c.HistoryWindows == 0 {
		c.HistoryWindows = DefaultHistoryWindows
	}
}

// SiteInfo describes an admitted allocation site.
type SiteInfo struct {
	ID    string // short stable hash of class and frames
	Class string // allocated class
	Frame string // first app frame (see AppFrame), or the top frame
	Stack string // every frame, top first, "; "-separated, capped
	// Frames are the site's frames by names, top first.
	Frames []FrameRef
}

// ClassCount and SiteCount are admitted series and their counts.
type (
	SiteCount struct {
		SiteInfo
		Count
	}
	// AppCounts is a consistent copy of one app's counters. Sites share
	// their SiteInfo (frames included) with the counters: do not modify.
	AppCounts struct {
		Total      Count
		Classes    []ClassCount // admitted, by name
		ClassOther Count
		Sites      []SiteCount // admitted, by id
		SiteOther  Count
		// Windows are the totals of the last remembered windows, oldest
		// first; the last one's End is when the last report was counted.
		Windows []WindowTotal
	}
)

type series struct {
	Count
	last time.Time
}

type siteSeries struct {
	series
	info SiteInfo
}

// Counters accumulate one app's allocations per class and per site, with
// memory and series bounded whatever the app does. Counts only grow; the
// sum over classes (or sites) including Other equals Total as long as no
// series has expired. It is safe for concurrent use.
type Counters struct {
	cfg AggregateConfig

	mu         sync.Mutex
	total      Count
	classes    map[string]*series
	classOther Count
	classCands candidates[string]
	sites      map[uint64]*siteSeries
	siteOther  Count
	siteCands  candidates[uint64]
	history    []window
	last       time.Time // end of the last counted window
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

// frameworkPrefixes are the packages AppFrame skips.
var frameworkPrefixes = []string{
	"java.", "javax.", "android.", "androidx.", "dalvik.", "libcore.", "sun.", "com.android.internal.",
}

// IsFrameworkClass tells whether a dotted class name is in a framework
// package.
func IsFrameworkClass(class string) bool {
	for _, p := range frameworkPrefixes {
		if strings.HasPrefix(class, p) {
			return true
		}
	}
	return false
}

// AppFrame returns the index of the first frame of st that is not in a
// framework package, or 0 (the top frame) when all are; -1 when st is empty.
func (r *Report) AppFrame(st Stack) int {
	for j, f := range st.All() {
		if !IsFrameworkClass(r.Classes[f.Class]) {
			return j
		}
	}
	if st.Len() == 0 {
		return -1
	}
	return 0
}

// siteHasher hashes sites of one report by names, so that the same site
// hashes alike in every report whatever its table indices.
type siteHasher struct {
	classes, methods, files []uint64
}

func newSiteHasher(r *Report) *siteHasher {
	h := func(t []string) []uint64 {
		out := make([]uint64, len(t))
		for i, s := range t {
			out[i] = xxhash.Sum64String(s)
		}
		return out
	}
	return &siteHasher{classes: h(r.Classes), methods: h(r.Methods), files: h(r.Files)}
}

func mix(h, v uint64) uint64 {
	h ^= v
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>29
}

func (sh *siteHasher) site(a *Allocation, st Stack) uint64 {
	h := mix(0x616c6c6f63, sh.classes[a.Class])
	for j := range st.Len() {
		f := st.At(j)
		h = mix(h, sh.classes[f.Class])
		h = mix(h, sh.methods[f.Method]^0x5bd1e995)
		h = mix(h, sh.files[f.File]^0x27d4eb2f)
		h = mix(h, uint64(uint16(f.Line))|0x10000)
	}
	return h
}

// SiteID formats a site hash as its label: 12 hex digits.
func SiteID(h uint64) string {
	var b [8]byte
	for i := range b {
		b[i] = byte(h >> (56 - 8*i))
	}
	return hex.EncodeToString(b[:6])
}

// SiteHash returns the stable hash of allocation i's site.
func (r *Report) SiteHash(i int) uint64 {
	a := &r.Allocations[i]
	return newSiteHasher(r).site(a, r.Stack(a))
}

func (c *Counters) siteInfo(r *Report, a *Allocation, h uint64) SiteInfo {
	st := r.Stack(a)
	info := SiteInfo{ID: SiteID(h), Class: r.ClassName(a)}
	if j := r.AppFrame(st); j >= 0 {
		info.Frame = r.FrameString(st.At(j))
	}
	info.Frames = make([]FrameRef, st.Len())
	for j, f := range st.All() {
		info.Frames[j] = r.Ref(f)
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

type local struct {
	Count
	rep int32 // index of one allocation with this key
}

// Add counts every allocation of r at time now, as a window that began
// when the previous one ended (or at now, for the first).
func (c *Counters) Add(r *Report, now time.Time) {
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
func (c *Counters) AddWindow(r *Report, start, now time.Time) {
	if len(r.Allocations) == 0 {
		c.mu.Lock()
		c.expireLocked(now)
		c.last = now
		c.remember(window{WindowTotal: WindowTotal{Start: start, End: now}})
		c.mu.Unlock()
		return
	}
	// Aggregate the report on its own first: admission then works per
	// distinct class and site, not per allocation.
	sh := newSiteHasher(r)
	byClass := make(map[uint16]*Count, 64)
	bySite := make(map[uint64]local, min(len(r.Allocations), 1024))
	var total Count
	for i := range r.Allocations {
		a := &r.Allocations[i]
		total.add(a.Size)
		cc := byClass[a.Class]
		if cc == nil {
			cc = &Count{}
			byClass[a.Class] = cc
		}
		cc.add(a.Size)
		h := sh.site(a, r.Stack(a))
		l, ok := bySite[h]
		if !ok {
			l.rep = int32(i)
		}
		l.add(a.Size)
		bySite[h] = l
	}

	// Admit by weight: the report's heaviest classes and sites take the
	// free series first.
	classIdx := make([]uint16, 0, len(byClass))
	for idx := range byClass {
		classIdx = append(classIdx, idx)
	}
	slices.SortFunc(classIdx, func(a, b uint16) int {
		if d := cmpCount(*byClass[a], *byClass[b]); d != 0 {
			return d
		}
		return strings.Compare(r.Classes[a], r.Classes[b])
	})
	siteHashes := make([]uint64, 0, len(bySite))
	for h := range bySite {
		siteHashes = append(siteHashes, h)
	}
	slices.SortFunc(siteHashes, func(a, b uint64) int {
		if d := cmpCount(bySite[a].Count, bySite[b].Count); d != 0 {
			return d
		}
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})

	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(now)
	c.total.Allocations += total.Allocations
	c.total.Bytes += total.Bytes
	c.last = now
	w := window{WindowTotal: WindowTotal{Start: start, End: now, Count: total}}
	for _, idx := range classIdx {
		n := byClass[idx]
		s := admit(c.classes, c.cfg.TopClasses, &c.classCands, &c.classOther, r.Classes[idx], *n)
		if s == nil {
			continue
		}
		w.classes = append(w.classes, keyCount[string]{r.Classes[idx], *n})
		s.Allocations += n.Allocations
		s.Bytes += n.Bytes
		s.last = now
	}
	for _, h := range siteHashes {
		n := bySite[h]
		s := admit(c.sites, c.cfg.TopSites, &c.siteCands, &c.siteOther, h, n.Count)
		if s == nil {
			continue
		}
		if s.info.ID == "" {
			// Labels are built once, when a series first counts: only
			// admitted sites pay for formatting their frames.
			s.info = c.siteInfo(r, &r.Allocations[n.rep], h)
		}
		w.sites = append(w.sites, keyCount[uint64]{h, n.Count})
		s.Allocations += n.Allocations
		s.Bytes += n.Bytes
		s.last = now
	}
	c.remember(w)
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

// cmpCount orders heavier counts first.
func cmpCount(a, b Count) int { return compareCount(a, b, false) }

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
		c.classes[k] = &series{last: now}
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
	out := AppCounts{Total: c.total, ClassOther: c.classOther, SiteOther: c.siteOther, Windows: c.windowsLocked()}
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
		out.Sites = append(out.Sites, SiteCount{SiteInfo: s.info, Count: s.Count})
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
