package alloctrack

import (
	"slices"
	"strings"

	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/alloctrack/alloctrack/perfetto"
)

// Site is an allocation site: the allocated class and its whole stack.
type Site struct {
	ID       string // the site label the daemon exports (SiteID of its hash)
	Class    string
	Frames   []string // "pkg.Class.method(File.java:12)", top first
	AppFrame string   // the first frame outside framework packages, or the top frame
	Count
	// Heapprofd sites (Android 12+ traces): Estimated is set, Count is
	// Estimate rounded, and Sampled is what the traces held. Class is "".
	Estimated bool
	Sampled   Count
	Estimate  Estimate
}

// Tally counts allocations per class and per site over one or more reports.
// It keeps every distinct class and site, so it is for one-off reports, not
// for a long-running daemon.
type Tally struct {
	Total   Count
	Classes map[string]*Count
	sites   map[string]*Site

	// Heapprofd dumps (AddDump): Estimated tells that Total (and the
	// sites' counts) include estimates; Sampled is what the dumps held,
	// exactly, and Estimate the estimate from it. Classes get nothing.
	Estimated bool
	Sampled   Count
	Estimate  Estimate
	Dumps     int
	// SamplingInterval is the dumps' sampling interval in bytes (the
	// largest seen, should they differ).
	SamplingInterval uint64
	// Samples on broken stacks (see perfetto.Dump.Broken), by kind.
	ErrorStackSamples, UnknownStackSamples uint64
}

// NewTally returns an empty Tally.
func NewTally() *Tally {
	return &Tally{Classes: map[string]*Count{}, sites: map[string]*Site{}}
}

// Add counts every allocation of r.
func (t *Tally) Add(r *allocreport.Report) {
	// Frames repeat a lot; format each distinct (class, method, file, line)
	// of this report once.
	names := map[allocreport.Frame]string{}
	var sh *siteHasher
	var key strings.Builder
	for i := range r.Allocations {
		a := &r.Allocations[i]
		cls := r.Classes[a.Class]
		t.Total.add(a.Size)
		c := t.Classes[cls]
		if c == nil {
			c = &Count{}
			t.Classes[cls] = c
		}
		c.add(a.Size)

		stack := r.Stack(a)
		frames := make([]string, stack.Len())
		key.Reset()
		key.WriteString(cls)
		for j, f := range stack.All() {
			s, ok := names[f]
			if !ok {
				s = r.FrameString(f)
				names[f] = s
			}
			frames[j] = s
			key.WriteByte('\n')
			key.WriteString(s)
		}
		s := t.sites[key.String()]
		if s == nil {
			if sh == nil {
				sh = newSiteHasher(r)
			}
			s = &Site{ID: SiteID(sh.site(a, stack)), Class: cls, Frames: frames}
			if j := AppFrame(r, stack); j >= 0 {
				s.AppFrame = frames[j]
			}
			t.sites[key.String()] = s
		}
		s.add(a.Size)
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

func head[T any](s []T, n int) []T {
	if n > 0 && len(s) > n {
		return s[:n]
	}
	return s
}

// AddDump counts one heapprofd dump: per site (the Java frames of each
// stack, class ""), the samples exactly and the allocations estimated from
// them (EstimateValues per stack). Total and the sites' counts hold the
// estimate, rounded, and Estimated is set.
func (t *Tally) AddDump(d *perfetto.Dump) {
	t.Estimated = true
	t.Dumps++
	t.SamplingInterval = max(t.SamplingInterval, d.SamplingInterval)
	t.Total = subCounts(t.Total, roundCount(t.Estimate))
	var key strings.Builder
	for i := range d.Stacks {
		sd := &d.Stacks[i]
		v := sd.Delta
		if v.Count == 0 && v.Allocated == 0 {
			continue
		}
		switch sd.Stack.Unwind {
		case perfetto.UnwindError:
			t.ErrorStackSamples += v.Count
		case perfetto.UnwindUnknown:
			t.UnknownStackSamples += v.Count
		}
		refs := JavaFrames(sd.Stack)
		key.Reset()
		key.WriteString("\x00heapprofd")
		for _, f := range refs {
			key.WriteByte('\n')
			key.WriteString(f.Function())
		}
		s := t.sites[key.String()]
		if s == nil {
			frames := make([]string, len(refs))
			for j, f := range refs {
				frames[j] = heapprofdFrameString(f)
			}
			s = &Site{ID: SiteID(HeapprofdSiteHash(refs)), Frames: frames, Estimated: true}
			if j := heapprofdAppFrame(refs); j >= 0 {
				s.AppFrame = frames[j]
			}
			t.sites[key.String()] = s
		}
		e := EstimateValues(v, d.SamplingInterval)
		s.Sampled = addCounts(s.Sampled, Count{Allocations: v.Count, Bytes: v.Allocated})
		s.Estimate.add(e)
		s.Count = roundCount(s.Estimate)
		t.Sampled = addCounts(t.Sampled, Count{Allocations: v.Count, Bytes: v.Allocated})
		t.Estimate.add(e)
	}
	t.Total = addCounts(t.Total, roundCount(t.Estimate))
}
