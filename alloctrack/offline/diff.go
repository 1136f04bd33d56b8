package offline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// Rate is a count over a run, per second when the run's duration is known.
type Rate struct {
	Allocations float64 `json:"allocations"`
	Bytes       float64 `json:"bytes"`
}

// DiffRow compares one class or site between two runs.
type DiffRow struct {
	Site     string   `json:"site,omitempty"` // site id, for site rows
	Class    string   `json:"class"`
	AppFrame string   `json:"app_frame,omitempty"`
	Frames   []string `json:"frames,omitempty"`
	Base     Rate     `json:"base"`
	New      Rate     `json:"new"`
	Change   Rate     `json:"change"` // New - Base
}

// Diff compares two runs per class and per site.
type Diff struct {
	PerSecond bool `json:"per_second"` // false: both durations not known, counts per run
	// BaseEstimated and NewEstimated: that run's counts are estimates
	// from heapprofd samples (a perfetto trace), not exact counts.
	BaseEstimated bool `json:"base_estimated,omitempty"`
	NewEstimated  bool `json:"new_estimated,omitempty"`
	// BaseSamples and NewSamples: that run's counts are samples of an
	// unknown rate (an agent log without its rate), set by the caller.
	BaseSamples bool `json:"base_samples,omitempty"`
	NewSamples  bool `json:"new_samples,omitempty"`
	Base        Rate `json:"base_total"`
	New         Rate `json:"new_total"`
	// Matching says what sites were matched on: everything, or, when an
	// input's frames have no file and line (perfetto traces, agent logs),
	// only what both inputs know (see matching).
	Matching string    `json:"site_matching"`
	Classes  []DiffRow `json:"classes"`
	Sites    []DiffRow `json:"sites"`
}

func rate(c alloctrack.Count, sec float64) Rate {
	return Rate{Allocations: float64(c.Allocations) / sec, Bytes: float64(c.Bytes) / sec}
}

// Compare builds the diff of two tallies over runs of durations bd and nd
// (per-second rates when both are known, counts per run otherwise). Rows
// are sorted by regression: the largest increase in bytes first, then in
// allocations.
func Compare(base, nw *alloctrack.Tally, bd, nd time.Duration) *Diff {
	d := &Diff{PerSecond: bd > 0 && nd > 0, BaseEstimated: base.Estimated, NewEstimated: nw.Estimated}
	bs, ns := 1.0, 1.0
	if d.PerSecond {
		bs, ns = bd.Seconds(), nd.Seconds()
	}
	d.Base, d.New = rate(base.Total, bs), rate(nw.Total, ns)
	keys := map[string]bool{}
	for k := range base.Classes {
		keys[k] = true
	}
	for k := range nw.Classes {
		keys[k] = true
	}
	for k := range keys {
		var b, n alloctrack.Count
		if c := base.Classes[k]; c != nil {
			b = *c
		}
		if c := nw.Classes[k]; c != nil {
			n = *c
		}
		d.Classes = append(d.Classes, row(DiffRow{Class: k}, rate(b, bs), rate(n, ns)))
	}
	sites := map[string]*DiffRow{}
	m := matchingOf(base, nw)
	d.Matching = m.String()
	add := func(s alloctrack.Site, isNew bool, sec float64) {
		class, frames := m.key(s)
		k := class + "\n" + strings.Join(frames, "\n")
		r := sites[k]
		if r == nil {
			r = &DiffRow{Site: s.ID, Class: class, AppFrame: s.AppFrame, Frames: frames}
			sites[k] = r
		}
		v := rate(s.Count, sec)
		if s.Estimated {
			v = Rate{Allocations: s.Estimate.Allocations / sec, Bytes: s.Estimate.Bytes / sec}
		}
		if isNew {
			r.New = Rate{Allocations: r.New.Allocations + v.Allocations, Bytes: r.New.Bytes + v.Bytes}
		} else {
			r.Base = Rate{Allocations: r.Base.Allocations + v.Allocations, Bytes: r.Base.Bytes + v.Bytes}
		}
	}
	for _, s := range base.TopSites(0, false) {
		add(s, false, bs)
	}
	for _, s := range nw.TopSites(0, false) {
		add(s, true, ns)
	}
	for _, r := range sites {
		d.Sites = append(d.Sites, row(*r, r.Base, r.New))
	}
	order := func(a, b DiffRow) int {
		if c := cmp.Compare(b.Change.Bytes, a.Change.Bytes); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Change.Allocations, a.Change.Allocations); c != 0 {
			return c
		}
		if c := strings.Compare(a.Class, b.Class); c != 0 {
			return c
		}
		return slices.Compare(a.Frames, b.Frames)
	}
	slices.SortFunc(d.Classes, order)
	slices.SortFunc(d.Sites, order)
	return d
}

func row(r DiffRow, b, n Rate) DiffRow {
	r.Base, r.New = b, n
	r.Change = Rate{Allocations: n.Allocations - b.Allocations, Bytes: n.Bytes - b.Bytes}
	return r
}

// matching is what two tallies' sites can be matched on. A DDM report
// knows each site's class and its frames' files and lines; a perfetto
// trace knows neither class nor file nor line; an agent log knows the
// class but no file or line, and in the README's layout not even the
// frames' classes. Sites are matched on what both inputs know, frames cut
// to the shallower input's depth, and the sites that become one are
// summed.
type matching struct {
	exact     bool // both inputs know everything: match on all of it
	noClass   bool // a side knows no allocated class (heapprofd)
	noFrameCl bool // a side's frames have no class (agent log, README layout)
	depth     int  // frames kept (0: all)
}

func matchingOf(a, b *alloctrack.Tally) matching {
	var m matching
	da, db := 0, 0
	lineless := false
	for i, t := range []*alloctrack.Tally{a, b} {
		for _, s := range t.TopSites(0, false) {
			if i == 0 {
				da = max(da, len(s.Frames))
			} else {
				db = max(db, len(s.Frames))
			}
			if !s.Lineless {
				continue
			}
			lineless = true
			if s.Class == "" {
				m.noClass = true
			}
			for _, f := range s.Frames {
				if !strings.Contains(f, ".") {
					m.noFrameCl = true
				}
			}
		}
	}
	if !lineless {
		m.exact = true
		return m
	}
	switch {
	case a.Sites() == 0:
		m.depth = db
	case b.Sites() == 0:
		m.depth = da
	default:
		m.depth = min(da, db)
	}
	return m
}

func (m matching) String() string {
	if m.exact {
		return "class and every frame with file and line"
	}
	s := "class and "
	if m.noClass {
		s = ""
	}
	if m.noFrameCl {
		s += "method names"
	} else {
		s += "Class.method"
	}
	return s + fmt.Sprintf(" of the top %d frames (an input has no file or line in its frames)", m.depth)
}

// key returns what site s is matched on.
func (m matching) key(s alloctrack.Site) (string, []string) {
	if m.exact {
		return s.Class, s.Frames
	}
	class := s.Class
	if m.noClass {
		class = ""
	}
	frames := make([]string, 0, min(len(s.Frames), m.depth))
	for _, f := range s.Frames[:min(len(s.Frames), m.depth)] {
		f, _, _ = strings.Cut(f, "(") // "pkg.Cls.m(File.java:12)": the function
		if m.noFrameCl {
			f = f[strings.LastIndexByte(f, '.')+1:]
		}
		frames = append(frames, f)
	}
	return class, frames
}
