// Package agentlog turns the logs of AOSP's tiallocsample JVMTI agent
// (package tialloc) into the model's windows, so that report, diff,
// budgets and profiles take them like DDM reports and heapprofd traces.
//
// The agent logs one allocation in N per thread; N is the agent's
// sample_rate argument, which the log does not record. Given N, a log is a
// sampled window whose estimates are the samples times N; without it, a
// window that counts the samples, which the caller must present as
// samples.
//
// A site is the allocated class and the stack, as for DDM. The agent's
// frames carry the method's declaring class (released agents) or not
// (the README's layout), its name and signature, but no file and no line:
// the sites' frames are Class.method, signature dropped (overloads share a
// frame, as they do in a DDM report's names), with no file and line -1.
package agentlog

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/tialloc"
)

// UnknownClass names an allocation whose class the agent could not name.
const UnknownClass = "<unknown class>"

// Frames returns the frames of stack st (allocating frame first), by
// dotted names.
func Frames(l *tialloc.Log, st *tialloc.Stack) []alloctrack.Frame {
	out := make([]alloctrack.Frame, len(st.Frames))
	for i, k := range st.Frames {
		f := l.Frames[k]
		fr := alloctrack.Frame{Class: allocreport.DescriptorToDot(f.Class), Method: f.Method, Line: -1}
		if f.Method == "" {
			fr.Method = "<unknown method>"
		}
		out[i] = fr
	}
	return out
}

// Class returns the dotted name of the class allocation a allocated.
func Class(a *tialloc.Alloc) string {
	if a.Class == "" {
		return UnknownClass
	}
	return allocreport.DescriptorToDot(a.Class)
}

// ErrOverflow is returned when a log's estimates (samples times the rate)
// do not fit in a count.
var ErrOverflow = errors.New("agentlog: estimates past 2^64")

// Window returns the window of log l: its samples per site, and, when
// every (the agent's sample rate) is not 0, the allocations estimated from
// them (samples times every), per site and per class. Estimates whose
// total does not fit in a uint64 are ErrOverflow (tialloc.Parse already
// bounds the samples' bytes), so no count of the window wraps: every
// site's and class's count is part of the total.
func Window(l *tialloc.Log, every uint64, start, end time.Time) (*alloctrack.Window, error) {
	if every > 0 && (l.Samples > math.MaxUint64/every || l.Bytes > math.MaxUint64/every) {
		return nil, fmt.Errorf("%w: %d samples of %d bytes times the rate %d", ErrOverflow, l.Samples, l.Bytes, every)
	}
	src := &logSource{}
	w := &alloctrack.Window{Start: start, End: end, Source: src}
	if every > 0 {
		w.Sampling = &alloctrack.Sampling{Every: every}
	}
	byHash := map[uint64]int{}
	classes := map[string]int{}
	for i := range l.Stacks {
		st := &l.Stacks[i]
		if st.Samples == 0 {
			continue
		}
		a := &l.Allocs[st.Alloc]
		class := Class(a)
		frames := Frames(l, st)
		h := alloctrack.SiteHashNames(class, frames)
		k, ok := byHash[h]
		if !ok {
			k = len(w.Sites)
			byHash[h] = k
			w.Sites = append(w.Sites, alloctrack.SiteDelta{Hash: h})
			src.classes = append(src.classes, class)
			src.frames = append(src.frames, frames)
		}
		smp := alloctrack.Count{Allocations: st.Samples, Bytes: st.Samples * a.Size}
		site := &w.Sites[k]
		site.Count = site.Count.Plus(smp)
		w.Total = w.Total.Plus(smp)
		count := smp
		if every > 0 {
			count = alloctrack.Count{Allocations: smp.Allocations * every, Bytes: smp.Bytes * every}
			e := alloctrack.Estimate{Allocations: float64(count.Allocations), Bytes: float64(count.Bytes)}
			site.Estimated = site.Estimated.Plus(e)
			w.Estimated = w.Estimated.Plus(e)
		}
		c, ok := classes[class]
		if !ok {
			c = len(w.Classes)
			classes[class] = c
			w.Classes = append(w.Classes, alloctrack.ClassDelta{Class: class})
		}
		w.Classes[c].Count = w.Classes[c].Count.Plus(count)
	}
	src.w = w
	return w, nil
}

type logSource struct {
	w       *alloctrack.Window
	classes []string             // by site
	frames  [][]alloctrack.Frame // by site
}

func (s *logSource) SiteInfo(i, stackMax int) alloctrack.SiteInfo {
	frames := s.frames[i]
	info := alloctrack.SiteInfo{ID: alloctrack.SiteID(s.w.Sites[i].Hash), Class: s.classes[i], Frames: frames, Lineless: true}
	if len(frames) > 0 {
		info.Frame = frames[0].Function()
		for _, f := range frames {
			if !alloctrack.IsFrameworkClass(f.Class) && f.Class != "" {
				info.Frame = f.Function()
				break
			}
		}
	}
	if stackMax > 0 {
		info.Stack = alloctrack.CapLabel(strings.Join(info.FrameStrings(), "; "), stackMax)
	}
	return info
}

// Threads returns nil: the agent names threads, and the model counts them
// by DDM's thread ids.
func (s *logSource) Threads() []alloctrack.ThreadDelta { return nil }

func (s *logSource) Release() {}
