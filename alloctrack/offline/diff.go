package offline

import (
	"cmp"
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
	BaseEstimated bool      `json:"base_estimated,omitempty"`
	NewEstimated  bool      `json:"new_estimated,omitempty"`
	Base          Rate      `json:"base_total"`
	New           Rate      `json:"new_total"`
	Classes       []DiffRow `json:"classes"`
	Sites         []DiffRow `json:"sites"`
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
	add := func(s alloctrack.Site, isNew bool, sec float64) {
		k := s.Class + "\n" + strings.Join(s.Frames, "\n")
		r := sites[k]
		if r == nil {
			r = &DiffRow{Site: s.ID, Class: s.Class, AppFrame: s.AppFrame, Frames: s.Frames}
			sites[k] = r
		}
		v := rate(s.Count, sec)
		if s.Estimated {
			v = Rate{Allocations: s.Estimate.Allocations / sec, Bytes: s.Estimate.Bytes / sec}
		}
		if isNew {
			r.New = v
		} else {
			r.Base = v
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
