package alloctrack

import (
	"slices"
	"strings"
)

// Site is an allocation site: the allocated class and its whole stack.
type Site struct {
	ID       string // the site label the daemon exports (SiteID of its hash)
	Class    string
	Frames   []string // "pkg.Class.method(File.java:12)", top first
	AppFrame string   // the first frame outside framework packages, or the top frame
	Count
	// Sampled sites (heapprofd traces, agent logs of known rate):
	// Estimated is set, Count is Estimate rounded, and Sampled is what
	// the trace or log held. Class is "" for heapprofd sites.
	Estimated bool
	Sampled   Count
	Estimate  Estimate
	// Lineless: the frames have no file or line (heapprofd traces and
	// agent logs), Frames are "pkg.Class.method" alone.
	Lineless bool
}

// Tally counts allocations per class and per site over one or more reports.
// It keeps every distinct class and site, so it is for one-off reports, not
// for a long-running daemon.
type Tally struct {
	Total   Count
	Classes map[string]*Count
	sites   map[uint64]*Site

	// Sampled windows (heapprofd dumps, agent logs): Estimated tells that
	// Total (and the sites' counts) include estimates; Sampled is what the
	// dumps held, exactly, and Estimate the estimate from it. Classes get
	// the windows' estimated classes (agent logs; heapprofd has none).
	Estimated bool
	Sampled   Count
	Estimate  Estimate
	Dumps     int
	// SamplingInterval is the dumps' sampling interval in bytes (the
	// largest seen, should they differ).
	SamplingInterval uint64
	// SampleEvery is the agent logs' rate (the largest seen).
	SampleEvery uint64
	// Samples on broken stacks (see perfetto.Dump.Broken), by kind.
	ErrorStackSamples, UnknownStackSamples uint64
}

// NewTally returns an empty Tally.
func NewTally() *Tally {
	return &Tally{Classes: map[string]*Count{}, sites: map[uint64]*Site{}}
}

// Add counts a window: its classes and sites exactly, or, for a sampled
// window (heapprofd), its samples exactly and the allocations estimated
// from them, Total and the sites' counts then holding the estimate,
// rounded, and Estimated set.
func (t *Tally) Add(w *Window) {
	sampled := w.Sampling != nil
	if sampled {
		t.Estimated = true
		t.Dumps++
		t.SamplingInterval = max(t.SamplingInterval, w.Sampling.Interval)
		t.SampleEvery = max(t.SampleEvery, w.Sampling.Every)
		t.ErrorStackSamples += w.Sampling.ErrorStackSamples
		t.UnknownStackSamples += w.Sampling.UnknownStackSamples
		t.Total = subCounts(t.Total, roundCount(t.Estimate))
		t.Sampled = addCounts(t.Sampled, w.Total)
		t.Estimate.add(w.Estimated)
		t.Total = addCounts(t.Total, roundCount(t.Estimate))
	} else {
		t.Total = addCounts(t.Total, w.Total)
	}
	for _, cd := range w.Classes {
		c := t.Classes[cd.Class]
		if c == nil {
			c = &Count{}
			t.Classes[strings.Clone(cd.Class)] = c
		}
		*c = addCounts(*c, cd.Count)
	}
	for i := range w.Sites {
		sd := &w.Sites[i]
		s := t.sites[sd.Hash]
		if s == nil {
			info := w.Info(i, 0)
			s = &Site{ID: info.ID, Class: info.Class, Frames: info.FrameStrings(), AppFrame: info.Frame, Estimated: sampled, Lineless: info.Heapprofd || info.Lineless}
			t.sites[sd.Hash] = s
		}
		if sampled {
			s.Sampled = addCounts(s.Sampled, sd.Count)
			s.Estimate.add(sd.Estimated)
			s.Count = roundCount(s.Estimate)
		} else {
			s.Count = addCounts(s.Count, sd.Count)
		}
	}
}

// TopClasses returns the n classes with most allocations (or bytes, when
// byBytes), ties broken by name. n <= 0 returns all.
func (t *Tally) TopClasses(n int, byBytes bool) []ClassCount {
	out := make([]ClassCount, 0, len(t.Classes))
	for c, v := range t.Classes {
		out = append(out, ClassCount{Class: c, Count: *v})
	}
	slices.SortFunc(out, func(a, b ClassCount) int {
		if d := compareCount(a.Count, b.Count, byBytes); d != 0 {
			return d
		}
		return strings.Compare(a.Class, b.Class)
	})
	return head(out, n)
}

// Sites returns the number of distinct sites.
func (t *Tally) Sites() int { return len(t.sites) }

// TopSites returns the n sites with most allocations (or bytes), ties
// broken by class and frames. n <= 0 returns all.
func (t *Tally) TopSites(n int, byBytes bool) []Site {
	out := make([]Site, 0, len(t.sites))
	for _, s := range t.sites {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Site) int {
		if d := compareCount(a.Count, b.Count, byBytes); d != 0 {
			return d
		}
		if d := strings.Compare(a.Class, b.Class); d != 0 {
			return d
		}
		return slices.Compare(a.Frames, b.Frames)
	})
	return head(out, n)
}

// Shrink keeps of a tally that will not grow again its totals, sampling
// figures and the n classes with most bytes (as TopClasses orders them),
// and drops its other classes and every site: for a caller that needs no
// more of it (the daemon's tests, once summarised).
func (t *Tally) Shrink(n int) {
	if len(t.Classes) > n {
		keep := make(map[string]*Count, n)
		for _, c := range t.TopClasses(0, true)[:n] {
			keep[c.Class] = t.Classes[c.Class]
		}
		t.Classes = keep
	}
	t.sites = map[uint64]*Site{}
}

func head[T any](s []T, n int) []T {
	if n > 0 && len(s) > n {
		return s[:n]
	}
	return s
}
