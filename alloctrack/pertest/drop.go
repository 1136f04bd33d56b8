package pertest

import (
	"slices"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// Taken tells a Lean Attributor that the caller has taken, for good, the
// run's tests before n (counted from the run's first test, Run.Dropped
// included): the daemon keeps their summaries. Once more than 2*Keep
// tests are held, it drops the leading tests taken that nothing fed later
// can change, keeping at least the last Keep, so that what a run keeps
// does not grow with its tests. Their figures stay in Run.DroppedSum and
// their outcomes in Run.DroppedOutcomes: the run's totals stay exact.
//
// Only a run of logcat lines (no am status: the daemon's) drops tests.
// A started test goes once nothing can add to it: through DDM, its
// finished marker counted and its process's markers paired one to one
// with its started: lines (none missed); through heapprofd, a dump after
// its end placed. A test that did not start (ignored, failed in
// @BeforeClass) goes once it ended (a finished: line for it, lines lost,
// then makes a test of its own). Each process keeps its last started test
// and the one it runs.
func (a *Attributor) Taken(n int) {
	keep := a.cfg.Keep
	if !a.cfg.Lean || keep <= 0 || a.sawStatus || a.finished || len(a.run.Tests) <= 2*keep {
		return
	}
	n = min(n-a.run.Dropped, len(a.run.Tests)-keep)
	for _, pid := range a.order {
		p := a.procs[pid]
		if p.open >= 0 {
			n = min(n, p.open)
		}
		if len(p.started) > 0 {
			n = min(n, p.started[len(p.started)-1])
		}
	}
	for i := range max(n, 0) {
		if !a.droppable(i) {
			n = i
			break
		}
	}
	if n = a.settledBefore(n); n > 0 {
		a.drop(n)
	}
}

// droppable tells whether test i has ended for good (its figures aside):
// no line can change a test no longer open. (A test whose finished: line
// was lost stays Unfinished: the caller decides whether it takes it.)
func (a *Attributor) droppable(i int) bool { return !a.meta[i].open }

// settledBefore lowers n to the first started test whose figures may
// still change; 0 when a process's started tests are not in the run's
// order.
func (a *Attributor) settledBefore(n int) int {
	for _, pid := range a.order {
		p := a.procs[pid]
		ok := a.settled(p)
		for j, i := range p.started {
			if i >= n {
				break
			}
			if j >= ok {
				n = i
				break
			}
		}
	}
	for _, pid := range a.order {
		if lead(a.procs[pid].started, n) < 0 {
			return 0
		}
	}
	return n
}

// settled is how many of p's leading started tests can no longer change:
// through heapprofd, those a dump after their end was placed for;
// through DDM, those whose finished marker is counted, its markers paired
// one to one with its started: lines.
func (a *Attributor) settled(p *proc) int {
	if p.listing {
		return 0
	}
	if a.cfg.Backend == alloctrack.BackendHeapprofd {
		// A test with no end time takes every later gap (buildDumps).
		k := 0
		for k < p.leanNext && !a.run.Tests[p.started[k]].End.IsZero() {
			k++
		}
		return k
	}
	d := &p.ddm
	if d.reports == 0 || a.missed(p, len(p.started), len(d.tests)) != 0 {
		return 0
	}
	k := 0
	for k < len(d.tests) && d.tests[k].closed {
		k++
	}
	return k
}

// lead is how many of ix are below n, all of them leading; -1 if not.
func lead(ix []int, n int) int {
	k := 0
	for k < len(ix) && ix[k] < n {
		k++
	}
	for _, i := range ix[k:] {
		if i < n {
			return -1
		}
	}
	return k
}

// drop removes the run's first n tests, which placesOK accepted: their
// figures go to Run.DroppedSum, and every index held moves down by n.
func (a *Attributor) drop(n int) {
	if a.run.DroppedOutcomes == nil {
		a.run.DroppedOutcomes = map[Outcome]int{}
	}
	for i := range n {
		a.run.DroppedOutcomes[a.run.Tests[i].Outcome]++
		if t := a.dumped[i]; t != nil && a.cfg.Backend == alloctrack.BackendHeapprofd {
			a.addDropped(t.Total.Allocations, t.Total.Bytes, t.Sampled.Allocations, t.Sampled.Bytes)
		}
	}
	for _, pid := range a.order {
		p := a.procs[pid]
		ds := lead(p.started, n)
		if a.cfg.Backend != alloctrack.BackendHeapprofd {
			for _, mt := range p.ddm.tests[:ds] {
				a.addDropped(mt.tally.Total.Allocations, mt.tally.Total.Bytes, mt.tally.Sampled.Allocations, mt.tally.Sampled.Bytes)
			}
			p.ddm.tests = slices.Delete(p.ddm.tests, 0, ds)
			p.ddm.cur -= ds
			p.ddm.eventsAtReport = max(0, p.ddm.eventsAtReport-ds)
		} else {
			p.leanNext -= ds
		}
		p.started = shift(slices.Delete(p.started, 0, ds), n)
		if p.open >= 0 {
			p.open -= n
		}
	}
	a.run.Tests = slices.Delete(a.run.Tests, 0, n)
	a.meta = slices.Delete(a.meta, 0, n)
	a.run.Tests, a.meta = slices.Clip(a.run.Tests), slices.Clip(a.meta)
	a.run.Dropped += n
	a.shiftIndexes(n)
}

// shiftIndexes moves the name index and the heapprofd tallies down by n,
// forgetting the tests dropped.
func (a *Attributor) shiftIndexes(n int) {
	for name, ix := range a.byName {
		if ix = shift(slices.DeleteFunc(ix, func(i int) bool { return i < n }), n); len(ix) == 0 {
			delete(a.byName, name)
		} else {
			a.byName[name] = ix
		}
	}
	dumped := make(map[int]*alloctrack.Tally, len(a.dumped))
	for i, t := range a.dumped {
		if i >= n {
			dumped[i-n] = t
		}
	}
	a.dumped = dumped
}

func shift(ix []int, n int) []int {
	for k := range ix {
		ix[k] -= n
	}
	return ix
}

func (a *Attributor) addDropped(allocs, bytes, sampledAllocs, sampledBytes uint64) {
	s := &a.run.DroppedSum
	s.Allocations += allocs
	s.Bytes += bytes
	s.SampledAllocations += sampledAllocs
	s.SampledBytes += sampledBytes
}
