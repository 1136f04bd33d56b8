package supervisor

import (
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// appTests is one app's tests as the daemon keeps them: the last finished
// ones, the runs under way (one per process), and counters.
type appTests struct {
	mu       sync.Mutex
	max      int
	seen     bool
	recent   []*testEntry // oldest first, at most max
	runs     map[int]*liveRun
	outcomes map[string]uint64
	allocs   uint64
	bytes    uint64
}

type testEntry struct{ s alloctrack.TestSummary }

// liveRun is the run of one process under way.
type liveRun struct {
	done    int          // leading tests of the run that ended (counted)
	entries []*testEntry // the last of those, to refresh as reports come
	allocs  uint64       // figures of the run's tests already counted
	bytes   uint64
	current *alloctrack.TestSummary
	since   time.Time // when current was first seen
}

func newAppTests(max int) *appTests {
	return &appTests{max: max, runs: map[int]*liveRun{}, outcomes: map[string]uint64{}}
}

// update takes the latest state of process pid's run; final: the run is
// over (its open test ends unfinished). It returns how many leading tests
// of the run it has taken for good (Attributor.Taken): a Lean run drops
// them, Run.Dropped counting them, Run.DroppedSum adding up their figures.
func (a *appTests) update(pid int, run *pertest.Run, final bool) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = true
	lr := a.runs[pid]
	if lr == nil {
		lr = &liveRun{}
		a.runs[pid] = lr
	}
	a.refresh(lr, run)
	// A run drops only tests taken (update's result goes to Taken).
	lr.done = max(lr.done, run.Dropped)
	for lr.done < run.Dropped+len(run.Tests) {
		t := &run.Tests[lr.done-run.Dropped]
		if t.Outcome == pertest.Unfinished && !final {
			break
		}
		e := &testEntry{summarize(t)}
		a.recent = keepLast(append(a.recent, e), a.max)
		lr.entries = keepLast(append(lr.entries, e), a.max)
		a.outcomes[string(t.Outcome)]++
		lr.done++
	}
	a.current(lr, run, final)
	allocs, bytes := run.DroppedSum.Allocations, run.DroppedSum.Bytes
	for i := range run.Tests {
		allocs += run.Tests[i].Allocations
		bytes += run.Tests[i].Bytes
	}
	a.allocs += allocs - min(allocs, lr.allocs)
	a.bytes += bytes - min(bytes, lr.bytes)
	lr.allocs, lr.bytes = max(allocs, lr.allocs), max(bytes, lr.bytes)
	if final {
		delete(a.runs, pid)
	}
	return lr.done
}

// refresh summarises again the tests that ended earlier and the run still
// holds: their figures grow until the report that holds their end is read.
func (a *appTests) refresh(lr *liveRun, run *pertest.Run) {
	first := lr.done - len(lr.entries) - run.Dropped
	for i, e := range lr.entries {
		if j := first + i; j >= 0 && j < len(run.Tests) {
			e.s = summarize(&run.Tests[j])
		}
	}
}

// current sets the run's open test, if any.
func (a *appTests) current(lr *liveRun, run *pertest.Run, final bool) {
	i := lr.done - run.Dropped
	if final || i < 0 || i >= len(run.Tests) {
		lr.current = nil
		return
	}
	c := summarize(&run.Tests[i])
	if lr.current == nil || lr.current.Name != c.Name {
		lr.since = time.Now()
	}
	lr.current = &c
}

func keepLast[T any](s []T, n int) []T {
	if len(s) <= n {
		return s
	}
	return append(s[:0], s[len(s)-n:]...)
}

// snapshot copies the app's tests.
func (a *appTests) snapshot() alloctrack.AppTests {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := alloctrack.AppTests{Seen: a.seen, Allocations: a.allocs, Bytes: a.bytes, Outcomes: maps.Clone(a.outcomes), Runs: len(a.runs)}
	if len(a.recent) > 0 {
		out.Recent = make([]alloctrack.TestSummary, len(a.recent))
		for i, e := range a.recent {
			out.Recent[i] = e.s // its slices are never written to again
		}
	}
	var since time.Time
	for _, lr := range a.runs {
		// One test at a time: the one seen last, should two processes
		// of the app run tests at once.
		if lr.current != nil && (out.Current == nil || lr.since.After(since)) {
			c := *lr.current
			out.Current, since = &c, lr.since
		}
	}
	return out
}

// maxFailure bounds the failure text a kept test holds.
const maxFailure = 1 << 10

// summarize keeps what the daemon shows of a test.
func summarize(t *pertest.Test) alloctrack.TestSummary {
	s := alloctrack.TestSummary{Name: t.Name, Class: t.Class, Method: t.Method, Outcome: string(t.Outcome), PID: t.PID,
		Duration: time.Duration(t.DurationSeconds * float64(time.Second)), Allocations: t.Allocations, Bytes: t.Bytes,
		Estimated: t.Estimated, Partial: t.Partial, Notes: append([]string(nil), t.Notes...),
		BoundaryError: time.Duration(t.BoundaryErrorSeconds * float64(time.Second))}
	s.Failure, _, _ = strings.Cut(t.Failure, "\n")
	if len(s.Failure) > maxFailure {
		s.Failure = s.Failure[:maxFailure]
	}
	for _, c := range t.TopClasses {
		s.TopClasses = append(s.TopClasses, alloctrack.ClassCount{Class: c.Class, Count: alloctrack.Count{Allocations: c.Allocations, Bytes: c.Bytes}})
	}
	return s
}
