package sim

import (
	"slices"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// segCounts are per-segment, per-site counts of one process of a test
// run: segment 0 is "between tests", segment k the run's k-th test.
type segCounts map[int32]map[uint32]alloctrack.Count

func (s segCounts) add(seg int32, site, size uint32) {
	m := s[seg]
	if m == nil {
		m = map[uint32]alloctrack.Count{}
		s[seg] = m
	}
	c := m[site]
	c.Allocations++
	c.Bytes += uint64(size)
	m[site] = c
}

func (s segCounts) addAll(o segCounts) {
	for seg, m := range o {
		for site, c := range m {
			dst := s[seg]
			if dst == nil {
				dst = map[uint32]alloctrack.Count{}
				s[seg] = dst
			}
			v := dst[site]
			v.Allocations += c.Allocations
			v.Bytes += c.Bytes
			dst[site] = v
		}
	}
}

// segTruth is the ground truth of one process of a test run, kept by its
// VM under vm.mu: what each segment allocated (tracked or not), what of it
// the DDM tracker recorded, and what of it the VM's reports delivered (the
// last whole report of each tracking window, as Truth.Reported).
type segTruth struct {
	vm        *VM
	suite     *Suite // the suite whose runner the process runs
	cur       int32  // the segment allocations go to now
	last      int32  // the newest segment given out
	allocated segCounts
	tracked   segCounts
	repCur    segCounts // the current window's last report
	repClosed segCounts // closed windows' last reports
}

func newSegTruth(vm *VM) *segTruth {
	return &segTruth{vm: vm, allocated: segCounts{}, tracked: segCounts{}, repCur: segCounts{}, repClosed: segCounts{}}
}

// alloc counts one allocation in the current segment and returns it. Safe
// on nil (a process outside a test run).
func (t *segTruth) alloc(site, size uint32, tracking bool) int32 {
	if t == nil {
		return 0
	}
	t.allocated.add(t.cur, site, size)
	if tracking {
		t.tracked.add(t.cur, site, size)
	}
	return t.cur
}

func (t *segTruth) resetReported() {
	if t != nil {
		clear(t.repCur)
	}
}

// keepReported returns the current window's last report, for
// undoReported (nil on nil).
func (t *segTruth) keepReported() segCounts {
	if t == nil {
		return nil
	}
	kept := segCounts{}
	kept.addAll(t.repCur)
	return kept
}

// undoReported takes back a report that never reached the client: the
// window's last delivered report is kept again.
func (t *segTruth) undoReported(kept segCounts) {
	if t != nil {
		clear(t.repCur)
		t.repCur.addAll(kept)
	}
}

func (t *segTruth) report(seg int32, site, size uint32) {
	if t != nil {
		t.repCur.add(seg, site, size)
	}
}

func (t *segTruth) closeWindow() {
	if t != nil {
		t.repClosed.addAll(t.repCur)
		clear(t.repCur)
	}
}

// newSegment returns a segment no allocation went to yet.
func (t *segTruth) newSegment() int32 {
	t.vm.mu.Lock()
	defer t.vm.mu.Unlock()
	t.last++
	return t.last
}

// setSegment makes the process's next allocations segment seg's.
func (t *segTruth) setSegment(seg int32) {
	t.vm.mu.Lock()
	t.cur = seg
	t.vm.mu.Unlock()
}

// counts returns segment seg's allocated, tracked and reported counts.
func (t *segTruth) counts(seg int32) (allocated, tracked, reported Counts) {
	t.vm.mu.Lock()
	defer t.vm.mu.Unlock()
	p, depth := t.vm.prog, t.vm.cfg.Depth
	dense := func(ms ...map[uint32]alloctrack.Count) Counts {
		sites := make([]alloctrack.Count, len(p.sites))
		for _, m := range ms {
			for si, c := range m {
				sites[si].Allocations += c.Allocations
				sites[si].Bytes += c.Bytes
			}
		}
		return p.counts(sites, depth)
	}
	return dense(t.allocated[seg]), dense(t.tracked[seg]), dense(t.repClosed[seg], t.repCur[seg])
}

// TestTruth is what one test of a run allocated, exactly, and what of it
// the process's VM reported.
type TestTruth struct {
	Name, Class, Method string
	Outcome             pertest.Outcome
	PID                 int
	// Start and End are the device's realtime of the test's started: and
	// finished: lines (ignored: both; without the lines, -e log true: when
	// they would have been logged); a crashed test's End is its crash.
	Start, End time.Time
	// Allocated counts every allocation of the test's body, tracked or
	// not; Tracked those made while the DDM tracker was on; Reported those
	// in the VM's delivered reports (the last whole report of each
	// tracking window: what a host that read every report saw).
	Allocated, Tracked, Reported Counts
}

// RunTruth is the ground truth of an instrumentation run.
type RunTruth struct {
	Component string
	// PIDs are the run's processes in the order they started; with the
	// orchestrator, ListPID is the one that listed the tests.
	PIDs    []int
	ListPID int
	Tests   []TestTruth
	// Between counts what the runner and the process allocated outside
	// any test's body, the listener's own records included (the
	// attribution's "between tests"), likewise tracked and reported.
	Between, BetweenTracked, BetweenReported Counts
	// Done: the run ended (its result printed, or its process gone).
	Done bool
}

// TestRun is one `am instrument` run on a device.
type TestRun struct {
	component string
	done      chan struct{}

	mu      sync.Mutex
	tests   []*testRecord
	procs   []runProc
	pids    []int
	listPID int
}

// runProc is a process of a run and the segment of its allocations
// between tests.
type runProc struct {
	truth   *segTruth
	between int32
}

type testRecord struct {
	name, class, method string
	outcome             pertest.Outcome
	pid                 int
	seg                 int32
	proc                *segTruth
	start, end          time.Time
}

func newTestRun(component string) *TestRun {
	return &TestRun{component: component, done: make(chan struct{})}
}

// Done is closed when the run has ended.
func (r *TestRun) Done() <-chan struct{} { return r.done }

// addProc adds a process to the run and returns its between segment,
// which its allocations go to from now on.
func (r *TestRun) addProc(t *segTruth, list bool) int32 {
	between := t.newSegment()
	t.setSegment(between)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.procs = append(r.procs, runProc{t, between})
	r.pids = append(r.pids, t.vm.PID())
	if list {
		r.listPID = t.vm.PID()
	}
	return between
}

func (r *TestRun) addTest(tr *testRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tests = append(r.tests, tr)
}

// endTest records how a test ended, and when (its finished: line).
func (r *TestRun) endTest(tr *testRecord, o pertest.Outcome, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tr.outcome, tr.end = o, at
}

// Truth returns the run's ground truth so far.
func (r *TestRun) Truth() RunTruth {
	r.mu.Lock()
	tests := slices.Clone(r.tests)
	recs := make([]testRecord, len(tests))
	for i, t := range tests {
		recs[i] = *t
	}
	procs := slices.Clone(r.procs)
	rt := RunTruth{Component: r.component, PIDs: slices.Clone(r.pids), ListPID: r.listPID}
	r.mu.Unlock()
	select {
	case <-r.done:
		rt.Done = true
	default:
	}
	for _, t := range recs {
		a, tr, rep := t.proc.counts(t.seg)
		rt.Tests = append(rt.Tests, TestTruth{Name: t.name, Class: t.class, Method: t.method, Outcome: t.outcome,
			PID: t.pid, Start: t.start, End: t.end, Allocated: a, Tracked: tr, Reported: rep})
	}
	rt.Between, rt.BetweenTracked, rt.BetweenReported = newCounts(), newCounts(), newCounts()
	for _, p := range procs {
		a, tr, rep := p.truth.counts(p.between)
		mergeCounts(&rt.Between, a)
		mergeCounts(&rt.BetweenTracked, tr)
		mergeCounts(&rt.BetweenReported, rep)
	}
	return rt
}

func mergeCounts(dst *Counts, src Counts) {
	for k, v := range src.ByClass {
		addCount(dst.ByClass, k, v)
	}
	for k, v := range src.BySite {
		addCount(dst.BySite, k, v)
	}
	for k, v := range src.BySiteID {
		addCount(dst.BySiteID, k, v)
	}
	dst.Total.Allocations += src.Total.Allocations
	dst.Total.Bytes += src.Total.Bytes
}

// TestRuns lists the device's instrumentation runs, oldest first.
func (d *Device) TestRuns() []*TestRun {
	d.tests.mu.Lock()
	defer d.tests.mu.Unlock()
	return slices.Clone(d.tests.runs)
}

// RunTruth returns the truth of the device's i-th run (from 0; -1 is the
// newest), and false if there is no such run.
func (d *Device) RunTruth(i int) (RunTruth, bool) {
	runs := d.TestRuns()
	if i < 0 {
		i += len(runs)
	}
	if i < 0 || i >= len(runs) {
		return RunTruth{}, false
	}
	return runs[i].Truth(), true
}
