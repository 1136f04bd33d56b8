package pertest

import (
	"fmt"
	"maps"
	"slices"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// Notes of tests, beside the marker tests' own.
const (
	noteNotTracked   = "its process sent no allocation data (it was not tracked)"
	noteNoMarkers    = "no per-test figures: the reports hold no marker of AndroidX Test's LogRunListener"
	noteRanBefore    = "ran before tracking was on: nothing of it is counted"
	noteStoppedEarly = "the process was stopped before its last report was read: pass -e delay_msec 500 to give the host that time"
	noteDied         = "its process ended before it finished: what was collected until then is kept"
	noteNoReport     = "no report held it: its process's reports ended before it"
	noteUnnamed      = "no runner line or status names this test (lines lost): it is named by its place"
	noteDumpBefore   = "began before tracking was on: its first allocations are not counted"
	noteDumpAfter    = "its process was stopped before a dump covered its end"
	noteDumpGap      = "heapprofd did not sample its process for part of it (between two profiling sessions): those allocations are not counted"
	// heapprofd places a test by its lines' times: one not read is
	// bounded by the process's line next to it (sprintf'd with which).
	noteEndBound    = "its end was not seen (no finished: line read: lost from logcat): its dumps are counted up to %s, so its figures may include what ran between its end and that"
	noteNoEnd       = "its end was not seen (no finished: line read: lost from logcat) and no later line of its process with a device time bounds it: its allocations count as between tests"
	noteStartBound  = "its start was not seen (no started: line read: lost from logcat): its dumps are counted from %s, so its figures may include what ran between that and its start"
	noteNoStartTime = "its start was not seen (no started: line with a device time read): its allocations count as between tests"
	noteFailedOnly  = "only its failed: line was read (its started: and finished: lines lost from logcat): its allocations count as between tests"
	noteNoLines     = "no runner line of it was read (lost from logcat): heapprofd's dumps are placed by those lines' times, so its allocations count as between tests"
)

// build makes the Run of what was fed so far.
func (a *Attributor) build() *Run {
	a.findListing()
	r := a.run
	r.Tests = slices.Clone(a.run.Tests)
	for i := range r.Tests {
		r.Tests[i].Notes = slices.Clone(r.Tests[i].Notes)
	}
	r.Problems = slices.Clone(a.run.Problems)
	r.DroppedOutcomes = maps.Clone(a.run.DroppedOutcomes)
	if a.cfg.Backend == alloctrack.BackendHeapprofd {
		a.buildDumps(&r)
	} else {
		a.buildDDM(&r)
	}
	r.Between, r.BetweenTally = a.figures(a.between), a.between
	for _, pid := range a.order {
		if p := a.procs[pid]; p.listing {
			// Marker tests of the listing process seen before its
			// run started: line: no test of the run.
			for _, mt := range p.ddm.tests {
				r.Between.Allocations += mt.tally.Total.Allocations
				r.Between.Bytes += mt.tally.Total.Bytes
			}
		}
	}
	r.Total = a.figures(a.total)
	sum := r.Between
	sum.Allocations += r.DroppedSum.Allocations
	sum.Bytes += r.DroppedSum.Bytes
	sum.SampledAllocations += r.DroppedSum.SampledAllocations
	sum.SampledBytes += r.DroppedSum.SampledBytes
	for i := range r.Tests {
		t := &r.Tests[i]
		sum.Allocations += t.Allocations
		sum.Bytes += t.Bytes
		sum.SampledAllocations += t.SampledAllocations
		sum.SampledBytes += t.SampledBytes
		if !t.Start.IsZero() && !t.End.IsZero() && t.End.After(t.Start) {
			t.DurationSeconds = t.End.Sub(t.Start).Seconds()
		}
	}
	if a.cfg.Backend == alloctrack.BackendHeapprofd {
		// The parts' rounded estimates: the total is their sum.
		r.Total.Allocations, r.Total.Bytes = sum.Allocations, sum.Bytes
	}
	r.Boundary = a.boundary()
	for _, pid := range a.order {
		if p := a.procs[pid]; a.finished && len(p.started) > 0 && p.ddm.reports == 0 && p.dumps == 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("pid %d logged %d tests but sent no allocation data (a process of another app, or one not tracked): their figures are zero", pid, len(p.started)))
		}
	}
	if a.finished && !r.Complete {
		r.Problems = append(r.Problems, "the run did not finish: no run finished: line and no INSTRUMENTATION_CODE (the device went away, or the run was cut)")
	}
	return &r
}

func (a *Attributor) boundary() string {
	if a.cfg.Backend == alloctrack.BackendHeapprofd {
		return fmt.Sprintf("heapprofd: each dump (every %s) is split among the tests it overlaps, by the device times of the runner's logcat lines, in proportion to the overlap (a uniform allocation rate within a dump is assumed): a boundary may be off by up to %.3f s, the dump interval, plus the clock error between logcat and the dumps; figures are estimates", a.cfg.DumpInterval, a.cfg.DumpInterval.Seconds())
	}
	return "DDM: boundaries are the allocations AndroidX Test's LogRunListener makes for its started: and finished: lines, found in each report in allocation order: exact (0 s); the runner's own allocations count as between tests"
}

// figures are a tally's numbers and its top classes and sites by bytes.
func (a *Attributor) figures(t *alloctrack.Tally) Figures {
	f := Figures{Allocations: t.Total.Allocations, Bytes: t.Total.Bytes, Estimated: t.Estimated,
		SampledAllocations: t.Sampled.Allocations, SampledBytes: t.Sampled.Bytes}
	for _, c := range t.TopClasses(0, true) {
		if len(f.TopClasses) < a.cfg.Top && (c.Count.Allocations > 0 || c.Count.Bytes > 0) {
			f.TopClasses = append(f.TopClasses, Class{Class: c.Class, Allocations: c.Count.Allocations, Bytes: c.Count.Bytes})
		}
	}
	for _, s := range t.TopSites(0, true) {
		if len(f.TopSites) < a.cfg.Top && (s.Count.Allocations > 0 || s.Count.Bytes > 0) {
			f.TopSites = append(f.TopSites, Site{ID: s.ID, Class: s.Class, AppFrame: s.AppFrame, Frames: s.Frames,
				Allocations: s.Count.Allocations, Bytes: s.Count.Bytes})
		}
	}
	return f
}

func addNote(t *Test, s string) {
	t.Partial = true
	if !slices.Contains(t.Notes, s) {
		t.Notes = append(t.Notes, s)
	}
}

// pairing is the marker tests of the run matched to its tests.
type pairing struct {
	mt   *markerTest
	p    *proc
	test int // index in Run.Tests, or -1: no test for it
}

// pairs matches the k-th started marker of each process to its k-th
// started: line (or, with no logcat line at all, the marker tests of all
// processes in turn to am's START statuses). When the first marker seen
// was not testRunStarted, tracking began late: the markers missed are the
// lines less the markers, counted when the process's run has ended (until
// then, the lines read by its latest report).
func (a *Attributor) pairs() (out []pairing, before map[int]bool) {
	before = map[int]bool{}
	match := func(mts []pairing, tests []int, off int) {
		for j := range min(off, len(tests)) {
			before[tests[j]] = true
		}
		for k := range mts {
			if j := k + off; j < len(tests) {
				mts[k].test = tests[j]
			}
			out = append(out, mts[k])
		}
	}
	var all []pairing
	for _, pid := range a.order {
		p := a.procs[pid]
		if p.listing {
			continue
		}
		var mts []pairing
		for _, mt := range p.ddm.tests {
			mts = append(mts, pairing{mt: mt, p: p, test: -1})
		}
		if a.sawEvents && p.ddm.reports > 0 {
			started := a.startedOf(p)
			match(mts, started, a.missed(p, len(started), len(mts)))
		} else {
			all = append(all, mts...)
		}
	}
	if !a.sawEvents {
		var seq []int
		for _, i := range a.statusSeq {
			if a.run.Tests[i].Outcome != Ignored {
				seq = append(seq, i)
			}
		}
		off := 0
		if len(a.order) > 0 && !a.procs[a.order[0]].ddm.runStarted {
			off = max(0, len(seq)-len(all))
		}
		match(all, seq, off)
	}
	return out, before
}

// startedOf is p's tests in order: its started: lines, or, when lines
// of the run's only test process were lost (fewer started: lines than
// am's START statuses), am's statuses, which lose nothing.
func (a *Attributor) startedOf(p *proc) []int {
	var seq []int
	for _, i := range a.statusSeq {
		if a.run.Tests[i].Outcome != Ignored {
			seq = append(seq, i)
		}
	}
	if !a.sawStatus || len(p.started) >= len(seq) {
		return p.started
	}
	for _, q := range a.procs {
		if q != p && !q.listing && len(q.ddm.tests) > 0 {
			return p.started
		}
	}
	return seq
}

// missed is how many of p's tests ran before its first marker seen.
func (a *Attributor) missed(p *proc, events, markers int) int {
	if p.ddm.runStarted {
		return 0
	}
	if !a.finished && !p.gone && (p.running || p.runs == 0) {
		events = min(events, p.ddm.eventsAtReport)
	}
	return max(0, events-markers)
}

// buildDDM gives each test the tally of its marker test, with its notes.
func (a *Attributor) buildDDM(r *Run) {
	pairs, before := a.pairs()
	bound := map[int]bool{}
	markers := 0
	for _, pair := range pairs {
		markers++
		i := pair.test
		if i < 0 {
			i = len(r.Tests)
			name := fmt.Sprintf("(unnamed test %d of pid %d)", markers, pair.p.pid)
			r.Tests = append(r.Tests, Test{Name: name, Outcome: Unfinished, PID: pair.p.pid})
			addNote(&r.Tests[i], noteUnnamed)
			r.Problems = append(r.Problems, fmt.Sprintf("pid %d: a test's markers are in its reports, but no runner line or status names it (lines lost): it is listed as %s", pair.p.pid, name))
		} else {
			bound[i] = true
		}
		t := &r.Tests[i]
		if t.PID == 0 {
			t.PID = pair.p.pid // named by am's status alone
		}
		t.Tally, t.Figures = pair.mt.tally, a.figures(pair.mt.tally)
		for _, n := range pair.mt.notes {
			addNote(t, n)
		}
		if !pair.mt.closed {
			a.unclosed(t, pair.p)
		}
	}
	tracked, anyMarker := false, false
	for _, p := range a.procs {
		tracked = tracked || p.ddm.reports > 0
		anyMarker = anyMarker || p.ddm.markers > 0
	}
	if tracked && !anyMarker {
		r.Problems = append(r.Problems, "no per-test figures: the reports hold no marker of AndroidX Test's LogRunListener (a runner that logs differently, -e log true, or a stack depth under 4): every allocation counts as between tests")
	}
	for i := range a.run.Tests {
		if bound[i] || !a.startedTest(i) {
			continue
		}
		a.unbound(&r.Tests[i], before[i], tracked && !anyMarker)
	}
}

// startedTest tells whether test i started (it has, or should have,
// markers).
func (a *Attributor) startedTest(i int) bool {
	m := &a.meta[i]
	return a.run.Tests[i].Outcome != Ignored && (m.started || (m.statusStart && !m.event))
}

// unclosed notes why a test has no finished marker.
func (a *Attributor) unclosed(t *Test, p *proc) {
	switch {
	case p.gone && !t.End.IsZero():
		addNote(t, noteStoppedEarly)
	case p.gone || t.Outcome == Crashed:
		addNote(t, noteDied)
	case a.finished:
		addNote(t, noteNoReport)
	}
}

// unbound notes why a started test has no marker test.
func (a *Attributor) unbound(t *Test, before, noMarkers bool) {
	p := a.procs[t.PID]
	switch {
	case noMarkers:
		addNote(t, noteNoMarkers)
	case before:
		addNote(t, noteRanBefore)
	case p == nil && a.sawEvents, p != nil && p.ddm.reports == 0 && (p.gone || a.finished):
		addNote(t, noteNotTracked)
	case p != nil && p.gone:
		addNote(t, noteStoppedEarly)
	case a.finished:
		addNote(t, noteNoReport)
	}
}

// buildDumps gives each test its share of the dumps.
func (a *Attributor) buildDumps(r *Run) {
	bound := a.cfg.DumpInterval.Seconds()
	for i := range a.run.Tests {
		t := &r.Tests[i]
		if !a.startedTest(i) {
			if a.meta[i].failedOnly && t.Method != "" && a.finished {
				addNote(t, noteFailedOnly) // not a class-level failure
			}
			continue
		}
		t.BoundaryErrorSeconds = bound
		if tl := a.dumped[i]; tl != nil {
			t.Tally, t.Figures = tl, a.figures(tl)
		}
		t.Estimated = true
		p := a.procs[t.PID]
		switch {
		case p == nil || p.dumps == 0:
			if p != nil && (p.gone || a.finished) {
				addNote(t, noteNotTracked)
			}
		case p.gone && t.End.IsZero() && t.Outcome == Crashed:
			addNote(t, noteDied)
		case !t.Start.IsZero() && t.Start.Before(p.firstFrom):
			addNote(t, noteDumpBefore)
		case p.gone && t.End.IsZero() && a.meta[i].open:
			// Only a test still running misses a part: heapprofd's
			// last dump of a process that ended holds all it sampled
			// (a dump ends at its newest sample, often before the end
			// of a test that ended; one whose finished: line was lost
			// gets boundNotes' note).
			addNote(t, noteDumpAfter)
		}
		if p != nil && p.inGap(a.start(i), a.end(i)) {
			addNote(t, noteDumpGap)
		}
		a.boundNotes(t, i, p)
	}
}

// boundNotes says, of a test whose started: or finished: line was not
// read, what bounds its share of the dumps instead (heapprofd: the lines'
// times are its boundaries). A test ended by am's status whose line has
// not come yet gets its note once its process is gone or the run ends.
func (a *Attributor) boundNotes(t *Test, i int, p *proc) {
	m := &a.meta[i]
	switch {
	case t.PID == 0 && !m.event && a.finished:
		addNote(t, noteNoLines)
		return
	case !t.Start.IsZero():
	case !m.startBound.IsZero():
		addNote(t, fmt.Sprintf(noteStartBound, m.startBy))
	case m.started:
		addNote(t, noteNoStartTime)
	}
	if !t.End.IsZero() || t.Outcome == Crashed || m.open || !(m.lost || m.statusEnd) {
		return
	}
	switch {
	case !m.endBound.IsZero():
		addNote(t, fmt.Sprintf(noteEndBound, m.endBy))
	case m.lost:
		addNote(t, noteNoEnd)
	case p != nil && p.gone:
		addNote(t, fmt.Sprintf(noteEndBound, "its process's end"))
	case a.finished:
		addNote(t, fmt.Sprintf(noteEndBound, "the end of the recording"))
	}
}

// findListing finds the orchestrator's listing process when no logcat
// line named it: the first process whose reports hold markers, when it
// shows more tests than one (each later process runs one) or the reports
// show more tests than am started.
func (a *Attributor) findListing() {
	if !a.cfg.Orchestrator || a.listed || a.sawEvents {
		return
	}
	marked := 0
	var first *proc
	for _, pid := range a.order {
		p := a.procs[pid]
		marked += len(p.ddm.tests)
		if first == nil && len(p.ddm.tests) > 0 {
			first = p
		}
	}
	if first != nil && (len(first.ddm.tests) > 1 || marked > len(a.statusSeq)) {
		a.listed, first.listing = true, true
	}
}
