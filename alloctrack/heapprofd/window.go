package heapprofd

import (
	"math"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"

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
func EstimateValues(v perfetto.Values, interval uint64) alloctrack.Estimate {
	e := alloctrack.Estimate{Allocations: float64(v.Count), Bytes: float64(v.Allocated)}
	if interval <= 1 || v.Count == 0 || v.Allocated == 0 {
		return e
	}
	avg := float64(v.Allocated) / float64(v.Count)
	p := -math.Expm1(-avg / float64(interval)) // 1 − exp(−avg/I), accurate for small avg/I
	if p <= 0 {
		return e
	}
	scale := 1 / p
	return alloctrack.Estimate{Allocations: e.Allocations * scale, Bytes: e.Bytes * scale}
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
func JavaFrames(st *perfetto.Stack) []alloctrack.Frame {
	var out []alloctrack.Frame
	for _, f := range st.Frames {
		if !IsJavaFrame(f) {
			continue
		}
		i := strings.LastIndexByte(f.Function, '.')
		out = append(out, alloctrack.Frame{Class: f.Function[:i], Method: f.Function[i+1:], Line: -1})
	}
	return out
}

// SiteHash is the site hash of a heapprofd stack's Java frames
// (see JavaFrames): SiteHashNames with class "".
func SiteHash(frames []alloctrack.Frame) uint64 {
	return alloctrack.SiteHashNames("", frames)
}

// heapprofdAppFrame returns the index of the first frame outside framework
// packages, 0 when all are, -1 for no frames (as Report.AppFrame).
func heapprofdAppFrame(frames []alloctrack.Frame) int {
	for j, f := range frames {
		if !alloctrack.IsFrameworkClass(f.Class) {
			return j
		}
	}
	if len(frames) == 0 {
		return -1
	}
	return 0
}

// heapprofdSiteInfo builds the labels of a heapprofd site.
func heapprofdSiteInfo(h uint64, frames []alloctrack.Frame, stackMax int) alloctrack.SiteInfo {
	info := alloctrack.SiteInfo{ID: alloctrack.SiteID(h), Heapprofd: true, Frames: frames}
	if j := heapprofdAppFrame(frames); j >= 0 {
		info.Frame = frames[j].Function()
	}
	if stackMax > 0 {
		info.Stack = alloctrack.CapLabel(strings.Join(info.FrameStrings(), "; "), stackMax)
	}
	return info
}

// WindowOfDump returns the sampled window of heapprofd dump d, from start
// to end (zero: see Counters.Add): each stack's delta summed by site (its
// Java frames, see JavaFrames), the samples exactly and the allocations
// estimated from them (EstimateValues, per stack and summed). A dump of
// another heap than the Java heap (see JavaHeapDump) gives a window with
// nothing in it.
func WindowOfDump(d *perfetto.Dump, start, end time.Time) *alloctrack.Window {
	ds := &dumpSource{}
	w := &alloctrack.Window{Start: start, End: end, Sampling: &alloctrack.Sampling{Interval: d.SamplingInterval}, Source: ds}
	if !JavaHeapDump(d) {
		return w
	}
	byHash := map[uint64]int{}
	for i := range d.Stacks {
		sd := &d.Stacks[i]
		v := sd.Delta
		if v.Count == 0 && v.Allocated == 0 {
			continue
		}
		switch sd.Stack.Unwind {
		case perfetto.UnwindError:
			w.Sampling.ErrorStackSamples += v.Count
		case perfetto.UnwindUnknown:
			w.Sampling.UnknownStackSamples += v.Count
		}
		frames := JavaFrames(sd.Stack)
		h := SiteHash(frames)
		k, ok := byHash[h]
		if !ok {
			k = len(w.Sites)
			byHash[h] = k
			w.Sites = append(w.Sites, alloctrack.SiteDelta{Hash: h})
			ds.frames = append(ds.frames, frames)
		}
		smp := alloctrack.Count{Allocations: v.Count, Bytes: v.Allocated}
		e := EstimateValues(v, d.SamplingInterval)
		site := &w.Sites[k]
		site.Count = site.Count.Plus(smp)
		site.Estimated = site.Estimated.Plus(e)
		w.Total = w.Total.Plus(smp)
		w.Estimated = w.Estimated.Plus(e)
	}
	ds.w = w
	return w
}

// dumpSource names the sites of a dump's window.
type dumpSource struct {
	w      *alloctrack.Window
	frames [][]alloctrack.Frame // by site
}

func (ds *dumpSource) SiteInfo(i, stackMax int) alloctrack.SiteInfo {
	return heapprofdSiteInfo(ds.w.Sites[i].Hash, ds.frames[i], stackMax)
}

func (ds *dumpSource) Threads() []alloctrack.ThreadDelta { return nil }

func (ds *dumpSource) Release() {}

// JavaHeapDump tells whether d is a dump of the Java heap (heap
// perfetto.ArtHeap, or no heap name, as dumps built by hand may have), the
// only heap whose samples hold objects' true sizes, which the estimator
// needs; native heaps' values come scaled already and are not counted.
func JavaHeapDump(d *perfetto.Dump) bool {
	return d != nil && (d.Heap == perfetto.ArtHeap || d.Heap == "")
}

// CountDump counts one dump of the app in its heapprofd status: the
// dump, its samples and sampled bytes, the samples on broken stacks (by
// kind of unwind failure), the sampling interval it gives, and traceBytes,
// the trace bytes read from the device since the last call (0 when they
// are counted elsewhere). d may be nil to count bytes alone.
func CountDump(a *alloctrack.AppStats, d *perfetto.Dump, traceBytes int) {
	a.Update(func(s *alloctrack.AppStatus) {
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
