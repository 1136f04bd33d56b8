package pertest

import (
	"strings"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// The runner's listener classes: their records are the runner's own, and
// LogRunListener's mark the boundaries (docs/test-runs.md#attribution).
const (
	listenerX       = "androidx.test.internal.runner.listener."
	listenerSupport = "android.support.test.internal.runner.listener."
	logRunListener  = "LogRunListener"
)

// Methods of LogRunListener that open and close a test.
const (
	mRunStarted  = "testRunStarted"
	mStarted     = "testStarted"
	mFinished    = "testFinished"
	mRunFinished = "testRunFinished"
	mFailure     = "testFailure"
	mAssumption  = "testAssumptionFailure"
)

// markerState is where a process's allocation order stands.
type markerState int

const (
	unknown markerState = iota // tracking just began: not known yet
	between                    // outside every test
	inTest                     // inside marker test cur
)

// ddmState follows one process's reports in allocation order.
type ddmState struct {
	reports int
	state   markerState
	cur     int // the open marker test (inTest)
	// The last marker record: its method and thread, and whether a record
	// of that thread that is not the runner's came since (a new group).
	lastMethod string
	lastThread uint16
	broke      bool
	markers    int // marker groups seen
	// eventsAtReport: the started: lines of the process read when its
	// latest report came.
	eventsAtReport int
	runStarted     bool // the first marker group seen was testRunStarted
	tests          []*markerTest
}

// markerTest is a test as the markers show it: the k-th started marker
// group of its process (or one inferred from a finished group).
type markerTest struct {
	tally  *alloctrack.Tally
	closed bool // its finished marker was seen
	// Why its figures miss a part, in words (Test.Notes).
	notes []string
}

func (mt *markerTest) note(s string) {
	for _, n := range mt.notes {
		if n == s {
			return
		}
	}
	mt.notes = append(mt.notes, s)
}

// Notes of marker tests.
const (
	noteBeforeTracking = "began before tracking was on: its first allocations are not counted"
	noteCrossed        = "crossed a tracker cycle: allocations made while the VM sent its report, before tracking was on again, were lost (the runner's -e delay_msec lets the cycle fall between tests)"
	noteOverflow       = "a report it spans overflowed: the report's oldest allocations were lost"
	noteNoStart        = "its start marker was not seen (lost with an overflowed report, or a stack too shallow): its allocations before its finished marker count as between tests"
	noteNoFinish       = "its finished marker was not seen: what it allocated after its last seen record may count as between tests or the next test"
)

// classes says, per entry of a report's class table, whether a class is
// LogRunListener (2), another class of the runner's listener packages
// (1), or neither (0).
func listenerClasses(r *allocreport.Report) []uint8 {
	out := make([]uint8, len(r.Classes))
	for i, c := range r.Classes {
		rest, ok := strings.CutPrefix(c, listenerX)
		if !ok {
			rest, ok = strings.CutPrefix(c, listenerSupport)
		}
		switch {
		case !ok:
		case rest == logRunListener:
			out[i] = 2
		default:
			out[i] = 1
		}
	}
	return out
}

// classify returns whether record i is the runner's own and, for a
// LogRunListener record, the listener method it was allocated in.
func classify(r *allocreport.Report, kinds []uint8, i int) (own bool, method string) {
	for _, f := range r.Stack(&r.Allocations[i]).All() {
		if int(f.Class) >= len(kinds) {
			continue
		}
		switch kinds[f.Class] {
		case 2:
			return true, tableName(r.Methods, f.Method)
		case 1:
			own = true
		}
	}
	return own, ""
}

// segment gathers, for one report, the records of each destination.
type segment struct {
	between []int32
	prefix  []int32 // records before the first marker of a late-tracked process
	tests   map[int][]int32
	touched map[int]bool // marker tests with records, or open, in the report
	// maxDepth is the deepest stack of the report: the depth stacks
	// were cut at, if any was.
	maxDepth int
}

// report splits r at the listener's marker records and counts each part
// into its test, or between tests.
func (a *Attributor) report(p *proc, r *allocreport.Report, overflowed bool) {
	d := &p.ddm
	d.reports++
	d.eventsAtReport = len(p.started)
	seg := &segment{tests: map[int][]int32{}, touched: map[int]bool{}}
	if d.state == inTest {
		seg.touched[d.cur] = true
		if d.reports > 1 {
			d.tests[d.cur].note(noteCrossed)
		}
	}
	kinds := listenerClasses(r)
	n := len(r.Allocations)
	for i := range r.Allocations {
		seg.maxDepth = max(seg.maxDepth, int(r.Allocations[i].Depth))
	}
	if p.listing {
		kinds = nil // no test runs in it: all between tests
	}
	for k := range n {
		i := k
		if a.cfg.API >= 24 {
			i = n - 1 - k // ART 7+ writes newest first
		}
		a.record(d, r, kinds, i, seg)
	}
	if d.state == unknown {
		// No marker in the first report: its records are taken as
		// between tests.
		seg.between = append(seg.between, seg.prefix...)
		seg.prefix = nil
		d.state = between
	}
	if overflowed {
		a.problem("pid %d: a report overflowed (%d records): its oldest allocations were lost", p.pid, n)
		for k := range seg.touched {
			d.tests[k].note(noteOverflow)
		}
	}
	a.count(d, r, seg)
	a.leanMarkers(d, seg.touched)
}

// record places record i.
func (a *Attributor) record(d *ddmState, r *allocreport.Report, kinds []uint8, i int, seg *segment) {
	own, method := classify(r, kinds, i)
	thread := r.Allocations[i].Thread
	if method != "" {
		if method != d.lastMethod || thread != d.lastThread || d.broke {
			a.marker(d, method, seg)
		}
		d.lastMethod, d.lastThread, d.broke = method, thread, false
	} else if !own && thread == d.lastThread && int(r.Allocations[i].Depth) < seg.maxDepth {
		// A whole stack with no listener frame: the group is over. (A
		// stack cut at the report's depth may be the listener's own,
		// its frame cut off: that ends nothing.)
		d.broke = true
	}
	switch {
	case own:
		seg.between = append(seg.between, int32(i))
	case d.state == unknown:
		seg.prefix = append(seg.prefix, int32(i))
	case d.state == inTest:
		seg.tests[d.cur] = append(seg.tests[d.cur], int32(i))
		seg.touched[d.cur] = true
	default:
		seg.between = append(seg.between, int32(i))
	}
}

// marker handles the first record of a group of marker records.
func (a *Attributor) marker(d *ddmState, method string, seg *segment) {
	first := d.markers == 0
	d.markers++
	if first && method == mRunStarted {
		d.runStarted = true
	}
	switch method {
	case mStarted:
		a.closeMissing(d, seg)
		d.cur = a.openMarker(d, seg)
		d.state = inTest
	case mFinished:
		k := d.cur
		switch d.state {
		case unknown:
			k = a.openMarker(d, seg)
			d.tests[k].note(noteBeforeTracking)
			seg.tests[k] = append(seg.tests[k], seg.prefix...)
			seg.prefix = nil
		case between:
			k = a.openMarker(d, seg)
			d.tests[k].note(noteNoStart)
		}
		d.tests[k].closed = true
		d.state = between
	case mFailure, mAssumption:
		if d.state == unknown {
			k := a.openMarker(d, seg)
			d.tests[k].note(noteBeforeTracking)
			seg.tests[k] = append(seg.tests[k], seg.prefix...)
			seg.prefix = nil
			d.cur, d.state = k, inTest
		}
	default: // testRunStarted, testRunFinished, testIgnored
		a.closeMissing(d, seg)
		d.state = between
	}
}

// closeMissing ends the open marker test, whose finished marker was not
// seen, and gives the records of a late-tracked prefix to between tests.
func (a *Attributor) closeMissing(d *ddmState, seg *segment) {
	switch d.state {
	case inTest:
		d.tests[d.cur].note(noteNoFinish)
	case unknown:
		seg.between = append(seg.between, seg.prefix...)
		seg.prefix = nil
	}
}

func (a *Attributor) openMarker(d *ddmState, seg *segment) int {
	d.tests = append(d.tests, &markerTest{tally: alloctrack.NewTally()})
	k := len(d.tests) - 1
	seg.touched[k] = true
	return k
}

// count adds each part of the report to its tally, and all to the total.
func (a *Attributor) count(d *ddmState, r *allocreport.Report, seg *segment) {
	rs := newReportSites(r)
	add := func(t *alloctrack.Tally, idx []int32) {
		if len(idx) > 0 {
			t.Add(rs.window(idx))
		}
	}
	add(a.between, seg.between)
	for k, idx := range seg.tests {
		add(d.tests[k].tally, idx)
	}
	if len(r.Allocations) > 0 {
		all := make([]int32, len(r.Allocations))
		for i := range all {
			all[i] = int32(i)
		}
		add(a.total, all)
	}
}
