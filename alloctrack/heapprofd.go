package alloctrack

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/perfetto"
)

// Heapprofd apps (Android 12 and later) are sampled, not traced: ART
// reports one allocation in roughly every sampling-interval bytes, with
// the object's true size. What a trace holds (samples and their bytes) is
// counted exactly, as Sampled; what the app allocated is estimated from it,
// as Estimated, never as the exact Count the DDM path fills. The allocated
// class is not in the data: a heapprofd site is keyed by its Java frames
// alone, with class "", and class-keyed counts hold nothing for the app.

// EstimateValues estimates the allocations and bytes behind v, the samples
// of one call stack taken at interval bytes (the dump's
// sampling_interval_bytes). An allocation of size s is sampled with
// probability 1 − exp(−s/interval), so each sample stands for
// 1/(1 − exp(−s/interval)) allocations; the stack's average sampled size
// stands for s:
//
//	avg = bytes/count; scale = 1/(1 − exp(−avg/interval)); estimate = value·scale
//
// This is exact when every object of the stack has the same size, and an
// approximation for stacks of variable-sized objects (arrays). Interval 1
// samples every allocation: the estimate is then the sampled values
// themselves, exactly. Interval 0 (not given) is taken as 1.
func EstimateValues(v perfetto.Values, interval uint64) Estimate {
	e := Estimate{Allocations: float64(v.Count), Bytes: float64(v.Allocated)}
	if interval <= 1 || v.Count == 0 || v.Allocated == 0 {
		return e
	}
	avg := float64(v.Allocated) / float64(v.Count)
	p := -math.Expm1(-avg / float64(interval)) // 1 − exp(−avg/I), accurate for small avg/I
	if p <= 0 {
		return e
	}
	scale := 1 / p
	return Estimate{Allocations: e.Allocations * scale, Bytes: e.Bytes * scale}
}

// IsJavaFrame tells whether a frame of a heapprofd stack is a Java method
// (interpreted, JIT or AOT code), as opposed to native code such as the
// ART allocation entry points in libart.so at the top of every stack, an
// unnamed frame or heapprofd's ERROR frame.
func IsJavaFrame(f *perfetto.Frame) bool {
	if f.Kind() != perfetto.FrameNamed {
		return false
	}
	if strings.Contains(f.Function, "::") || strings.ContainsAny(f.Function, " ()") {
		return false // C++ (art::gc::Heap::…), or a name normalization left alone
	}
	m := strings.TrimSuffix(f.Mapping, " (deleted)")
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	if strings.HasSuffix(m, ".so") || strings.Contains(m, ".so.") {
		return false // a native library: libart.so, libc.so, …
	}
	return strings.Contains(f.Function, ".")
}

// JavaFrames returns the Java frames of a heapprofd stack, innermost
// (allocating) first, by names: Class is the dotted class and Method the
// method, split at the last dot of the normalized function name. Heapprofd
// gives no file or line: File is "" and Line -1.
func JavaFrames(st *perfetto.Stack) []Frame {
	var out []Frame
	for _, f := range st.Frames {
		if !IsJavaFrame(f) {
			continue
		}
		i := strings.LastIndexByte(f.Function, '.')
		out = append(out, Frame{Class: f.Function[:i], Method: f.Function[i+1:], Line: -1})
	}
	return out
}

// HeapprofdSiteHash is the site hash of a heapprofd stack's Java frames
// (see JavaFrames): SiteHashNames with class "".
func HeapprofdSiteHash(frames []Frame) uint64 {
	return SiteHashNames("", frames)
}

// heapprofdFrameString is a heapprofd frame as labels and reports show it:
// the method's dotted name alone, heapprofd having no file or line.
func heapprofdFrameString(f Frame) string { return f.Function() }

// heapprofdAppFrame returns the index of the first frame outside framework
// packages, 0 when all are, -1 for no frames (as Report.AppFrame).
func heapprofdAppFrame(frames []Frame) int {
	for j, f := range frames {
		if !IsFrameworkClass(f.Class) {
			return j
		}
	}
	if len(frames) == 0 {
		return -1
	}
	return 0
}

// heapprofdSiteInfo builds the labels of a heapprofd site.
func heapprofdSiteInfo(h uint64, frames []Frame, stackMax int) SiteInfo {
	info := SiteInfo{ID: SiteID(h), Heapprofd: true, Frames: frames}
	if j := heapprofdAppFrame(frames); j >= 0 {
		info.Frame = heapprofdFrameString(frames[j])
	}
	strs := make([]string, len(frames))
	for j, f := range frames {
		strs[j] = heapprofdFrameString(f)
	}
	info.Stack = capLabel(strings.Join(strs, "; "), stackMax)
	return info
}

// dumpSite is one distinct site of a dump being counted.
type dumpSite struct {
	h      uint64
	frames []Frame
	smp    Count
	est    Estimate
	w      uint64 // weight for admission: estimated allocations, at least 1
	done   bool
}

// weight orders sites for admission as the DDM path does by allocations:
// here by estimated allocations.
func (s *dumpSite) weight() uint64 {
	w := uint64(math.Round(s.est.Allocations))
	if w == 0 && s.smp.Allocations > 0 {
		w = 1
	}
	return w
}

// aggregateDump sums a dump's stack deltas per site (the Java frames of
// each stack), in order of first appearance.
func aggregateDump(d *perfetto.Dump) (sites []*dumpSite, smp Count, est Estimate) {
	byHash := map[uint64]*dumpSite{}
	for i := range d.Stacks {
		sd := &d.Stacks[i]
		v := sd.Delta
		if v.Count == 0 && v.Allocated == 0 {
			continue
		}
		frames := JavaFrames(sd.Stack)
		h := HeapprofdSiteHash(frames)
		s := byHash[h]
		if s == nil {
			s = &dumpSite{h: h, frames: frames}
			byHash[h] = s
			sites = append(sites, s)
		}
		e := EstimateValues(v, d.SamplingInterval)
		s.smp.Allocations += v.Count
		s.smp.Bytes += v.Allocated
		s.est.add(e)
		smp.Allocations += v.Count
		smp.Bytes += v.Allocated
		est.add(e)
	}
	for _, s := range sites {
		s.w = s.weight()
	}
	return sites, smp, est
}

// JavaHeapDump tells whether d is a dump of the Java heap (heap
// perfetto.ArtHeap, or no heap name, as dumps built by hand may have), the
// only heap whose samples hold objects' true sizes, which the estimator
// needs; native heaps' values come scaled already and are not counted.
func JavaHeapDump(d *perfetto.Dump) bool {
	return d != nil && (d.Heap == perfetto.ArtHeap || d.Heap == "")
}

// AddDump counts one heapprofd dump of the app, the window from start to
// now: each stack's delta, by site, sampled values exactly and estimates
// scaled by the dump's sampling interval (EstimateValues, per stack and
// dump). Sites get the same bounded series and other as DDM sites
// (AggregateConfig.TopSites, candidates, expiry); admission weighs
// estimated allocations. The dump's Stacks already hold deltas: a stack
// missing from a dump gained nothing, and one back under a new callstack
// id continues from its total (the perfetto Decoder sees to both). The
// window is remembered for Recent. Exact counts (Total, classes) are not
// touched. A dump of another heap than the Java heap (see JavaHeapDump)
// counts as an empty window.
func (c *Counters) AddDump(d *perfetto.Dump, start, now time.Time) {
	if start.IsZero() {
		start = now
	}
	var sites []*dumpSite
	var smp Count
	var est Estimate
	if JavaHeapDump(d) {
		sites, smp, est = aggregateDump(d)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen = countersGen.Add(1)
	c.heapprofd = true
	c.expireLocked(now)
	c.last = now
	c.sampled = addCounts(c.sampled, smp)
	c.estimated.add(est)
	w := window{WindowTotal: WindowTotal{Start: start, End: now, Sampled: smp, Estimated: est}}
	defer func() { c.remember(w) }() // under c.mu, released by the earlier defer

	count := func(s *siteSeries, ds *dumpSite) {
		if s.info.ID == "" {
			s.info = heapprofdSiteInfo(ds.h, ds.frames, c.cfg.StackLabelMax)
		}
		s.smp = addCounts(s.smp, ds.smp)
		s.est.add(ds.est)
		s.last = now
		w.hsites = append(w.hsites, keyEstimate{k: ds.h, smp: ds.smp, est: ds.est})
	}
	toOther := func(ds *dumpSite) {
		c.siteOtherSampled = addCounts(c.siteOtherSampled, ds.smp)
		c.siteOtherEstimated.add(ds.est)
	}

	// The same policy as AddWindow: sites with a series count into it; of
	// the others, the heaviest take the free series, the next heaviest are
	// offered as candidates, and every one counts into other.
	free := max(c.cfg.TopSites-len(c.sites), 0)
	var un []*dumpSite
	for _, ds := range sites {
		if s := c.sites[ds.h]; s != nil {
			count(s, ds)
			continue
		}
		if free == 0 {
			if cw, ok := c.siteCands.w[ds.h]; ok {
				c.siteCands.w[ds.h] = cw + ds.w
				toOther(ds)
				continue
			}
		}
		un = append(un, ds)
	}
	slices.SortFunc(un, func(a, b *dumpSite) int {
		if d := cmp.Compare(b.w, a.w); d != 0 {
			return d
		}
		if d := cmpCount(a.smp, b.smp); d != 0 {
			return d
		}
		return cmp.Compare(a.h, b.h)
	})
	for j, ds := range un {
		switch {
		case j < free:
			s := &siteSeries{}
			c.sites[ds.h] = s
			c.siteCands.remove(ds.h)
			count(s, ds)
		case j < free+c.siteCands.max:
			toOther(ds)
			c.siteCands.offer(ds.h, ds.w)
		default:
			toOther(ds)
			if free > 0 {
				if cw, ok := c.siteCands.w[ds.h]; ok {
					c.siteCands.w[ds.h] = cw + ds.w
				}
			}
		}
	}
}

// capLabel cuts s to at most max bytes, ending in "..." when cut, never
// inside a UTF-8 sequence.
func capLabel(s string, max int) string {
	if len(s) <= max {
		return s
	}
	ellipsis := "..."
	if max < len(ellipsis) {
		ellipsis = ""
	}
	cut := max - len(ellipsis)
	for cut > 0 && cut < len(s) && s[cut]&0xc0 == 0x80 {
		cut-- // never inside a UTF-8 sequence
	}
	return s[:cut] + ellipsis
}

// AddDumpStats counts one dump of the app in its heapprofd status: the
// dump, its samples and sampled bytes, the samples on broken stacks (by
// kind of unwind failure), the sampling interval it gives, and traceBytes,
// the trace bytes read from the device since the last call (0 when they
// are counted elsewhere). d may be nil to count bytes alone.
func (a *AppStats) AddDumpStats(d *perfetto.Dump, traceBytes int) {
	a.update(func(s *AppStatus) {
		h := &s.Heapprofd
		if traceBytes > 0 {
			h.TraceBytes += uint64(traceBytes)
		}
		if d == nil {
			return
		}
		h.Dumps++
		if d.SamplingInterval > 0 {
			h.SamplingInterval = d.SamplingInterval
		}
		h.Samples += d.Delta.Count
		h.SampledBytes += d.Delta.Allocated
		for i := range d.Stacks {
			sd := &d.Stacks[i]
			switch sd.Stack.Unwind {
			case perfetto.UnwindError:
				h.ErrorStackSamples += sd.Delta.Count
			case perfetto.UnwindUnknown:
				h.UnknownStackSamples += sd.Delta.Count
			}
		}
	})
}
