package pertest

import (
	"math"
	"slices"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// pendingDump is a heapprofd dump waiting for the runner's lines that
// bound it.
type pendingDump struct {
	w        *frozen
	from, to time.Time
}

// maxPending bounds the dumps a process keeps waiting for lines: past it
// the oldest is placed with what is known (a test still open is taken to
// run on).
const maxPending = 64

// flushDumps places the dumps of p whose end the runner's lines have
// passed (all of them when all is set).
func (a *Attributor) flushDumps(p *proc, all bool) {
	for len(p.pending) > 0 {
		d := p.pending[0]
		if !all && len(p.pending) <= maxPending && p.last.Before(d.to) {
			return
		}
		a.place(p, d)
		a.leanDumps(p, d.from)
		p.pending[0] = pendingDump{}
		p.pending = p.pending[1:]
	}
	p.pending = nil
}

// share is one destination of a dump and the fraction of it that goes
// there.
type share struct {
	t *alloctrack.Tally
	f float64
}

// place splits dump d among the tests of p it overlaps, in proportion to
// the overlap, the rest going between tests.
func (a *Attributor) place(p *proc, d pendingDump) {
	a.total.Add(&d.w.w)
	var shares []share
	sum := 0.0
	for _, i := range p.started {
		f := overlap(a.start(i), a.end(i), d.from, d.to)
		if f <= 0 {
			continue
		}
		t := a.dumped[i]
		if t == nil {
			t = alloctrack.NewTally()
			a.dumped[i] = t
		}
		shares = append(shares, share{t, f})
		sum += f
	}
	if !p.listing && (len(p.started) == 0 || a.noTimes(p)) {
		a.problem("pid %d: heapprofd dumps came with no runner line with a device time: they count as between tests", p.pid)
	}
	if sum > 1 { // overlapping tests (lines lost): scale to the whole
		for k := range shares {
			shares[k].f /= sum
		}
		sum = 1
	}
	if rest := 1 - sum; rest > 1e-12 || len(shares) == 0 {
		shares = append(shares, share{a.between, max(rest, 0)})
	}
	for k, w := range splitWindow(&d.w.w, shares) {
		shares[k].t.Add(w)
	}
}

// Bounds of a test whose lines are missing: forever, for one still
// running (or crashed: its process's end ended it, and no line says
// when); processStart, for one whose process logged nothing before it.
var (
	forever      = time.Unix(math.MaxInt32*8, 0)
	processStart = time.Unix(1, 0)
)

// end is when test i ended, for its dumps: its end line's time; when that
// line was not read, the process's next line (endBound); with no such
// line yet, forever while it may run on (open, crashed, or ended by am's
// status alone: the line may still come, or the process's end bounds
// it); zero when nothing bounds it.
func (a *Attributor) end(i int) time.Time {
	if t := a.run.Tests[i].End; !t.IsZero() {
		return t
	}
	m := &a.meta[i]
	switch {
	case !m.endBound.IsZero():
		return m.endBound
	case m.open || a.run.Tests[i].Outcome == Crashed || (m.statusEnd && !m.lost):
		return forever
	}
	return time.Time{}
}

// start is when test i started, for its dumps: its started: line's time,
// or, when that line was not read, the process's line before (startBound).
func (a *Attributor) start(i int) time.Time {
	if t := a.run.Tests[i].Start; !t.IsZero() {
		return t
	}
	return a.meta[i].startBound
}

func (a *Attributor) noTimes(p *proc) bool {
	for _, i := range p.started {
		if !a.start(i).IsZero() {
			return false
		}
	}
	return true
}

// overlap is the fraction of [from, to] within [s, e]; a dump of no
// length goes whole to the test it falls in.
func overlap(s, e, from, to time.Time) float64 {
	if s.IsZero() || e.IsZero() {
		return 0
	}
	if !to.After(from) {
		if !from.Before(s) && !from.After(e) {
			return 1
		}
		return 0
	}
	lo, hi := maxTime(s, from), minTime(e, to)
	if !hi.After(lo) {
		return 0
	}
	return float64(hi.Sub(lo)) / float64(to.Sub(from))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// splitWindow divides w by the shares' fractions (summing to 1): every
// site's and class's samples by largest remainder, so that the parts'
// samples add up to w's exactly, and the estimates in proportion.
func splitWindow(w *alloctrack.Window, shares []share) []*alloctrack.Window {
	fr := make([]float64, len(shares))
	for k, s := range shares {
		fr[k] = s.f
	}
	out := make([]*alloctrack.Window, len(shares))
	for k := range out {
		part := &alloctrack.Window{Start: w.Start, End: w.End, Source: w.Source}
		if w.Sampling != nil {
			s := *w.Sampling
			if k != 0 {
				s.ErrorStackSamples, s.UnknownStackSamples = 0, 0
			}
			part.Sampling = &s
		}
		part.Estimated = scale(w.Estimated, fr[k])
		out[k] = part
	}
	splitCount(w.Total, fr, func(k int, c alloctrack.Count) { out[k].Total = c })
	for _, cd := range w.Classes {
		splitCount(cd.Count, fr, func(k int, c alloctrack.Count) {
			out[k].Classes = append(out[k].Classes, alloctrack.ClassDelta{Class: cd.Class, Count: c})
		})
	}
	for _, sd := range w.Sites {
		splitCount(sd.Count, fr, func(k int, c alloctrack.Count) {
			out[k].Sites = append(out[k].Sites, alloctrack.SiteDelta{Hash: sd.Hash, Count: c, Estimated: scale(sd.Estimated, fr[k])})
		})
	}
	return out
}

// scale is e times f. (Each part keeps every site of w, in w's order, so
// that w's source names the part's site i.)
func scale(e alloctrack.Estimate, f float64) alloctrack.Estimate {
	return alloctrack.Estimate{Allocations: e.Allocations * f, Bytes: e.Bytes * f}
}

// splitCount gives each part its share of c, allocations and bytes each
// by largest remainder.
func splitCount(c alloctrack.Count, fr []float64, set func(k int, c alloctrack.Count)) {
	allocs := apportion(c.Allocations, fr)
	bytes := apportion(c.Bytes, fr)
	for k := range fr {
		set(k, alloctrack.Count{Allocations: allocs[k], Bytes: bytes[k]})
	}
}

// apportion divides n in the proportions fr (summing to 1), whole numbers
// that add up to n exactly (largest remainder).
func apportion(n uint64, fr []float64) []uint64 {
	out := make([]uint64, len(fr))
	if len(fr) == 0 {
		return out
	}
	rem := make([]int, len(fr))
	var given uint64
	for k, f := range fr {
		out[k] = uint64(math.Floor(float64(n) * f))
		if given+out[k] > n {
			out[k] = n - given
		}
		given += out[k]
		rem[k] = k
	}
	remainder := func(k int) float64 { return float64(n)*fr[k] - float64(out[k]) }
	slices.SortStableFunc(rem, func(x, y int) int {
		switch rx, ry := remainder(x), remainder(y); {
		case rx > ry:
			return -1
		case rx < ry:
			return 1
		}
		return 0
	})
	for j := 0; given < n; j = (j + 1) % len(rem) {
		out[rem[j]]++
		given++
	}
	return out
}
