package pertest

import (
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/instrument"
)

// testMeta is what the Attributor knows of a test beyond what it shows.
type testMeta struct {
	event       bool // a started:, ignored: or finished: line named it
	started     bool // it is in its process's list of started tests
	statusStart bool // am's START status named it
	statusEnd   bool // am's end status named it
	failedOnly  bool // only a failed: line named it so far
	open        bool // started and not ended (by the lines or statuses)
	lost        bool // a started: came before its finished:
	// endBound: a test whose finished: line was not read ends, at the
	// latest, at its process's next line (endBy says which); startBound:
	// one whose started: line was not read starts, at the earliest, at
	// its process's line before (startBy). Zero: no such line.
	endBound, startBound time.Time
	endBy, startBy       string
}

// proc is one process of the run: its runner lines and its reports.
type proc struct {
	// leanNext: started[:leanNext] have lean tallies (Config.Lean).
	leanNext int

	pid     int
	started []int // tests whose started: it logged (or inferred), in order
	open    int   // the test it is running, or -1
	runs    int   // run started: lines
	running bool  // a run started and did not finish
	gone    bool
	listing bool      // the orchestrator's listing process
	last    time.Time // the latest time of its lines
	// mark is the time of its latest line that begins or ends a test or
	// a run (not failed:, which comes inside a test); markBy names it.
	mark    time.Time
	markBy  string
	ddm     ddmState
	dumps   int
	pending []pendingDump
	// firstFrom and lastTo bound the dumps fed.
	firstFrom, lastTo time.Time
	// gaps are spans between its dumps that no dump covers (a new
	// heapprofd session: the process was not sampled meanwhile).
	gaps []span
}

type span struct{ from, to time.Time }

// maxGaps bounds the gaps kept of a process (a session every 30 min).
const maxGaps = 64

// inGap tells whether a test from s to e (zero: not known) overlaps a
// span its process was not sampled in.
func (p *proc) inGap(s, e time.Time) bool {
	for _, g := range p.gaps {
		if !s.IsZero() && s.Before(g.to) && (e.IsZero() || e.After(g.from)) {
			return true
		}
	}
	return false
}

func (a *Attributor) proc(pid int) *proc {
	p := a.procs[pid]
	if p == nil {
		p = &proc{pid: pid, open: -1}
		p.ddm.state = unknown
		a.procs[pid] = p
		a.order = append(a.order, pid)
	}
	return p
}

// newTest appends a test and returns its index.
func (a *Attributor) newTest(name string, pid int) int {
	class, method, _ := instrument.SplitName(name)
	a.run.Tests = append(a.run.Tests, Test{Name: name, Class: class, Method: method, Outcome: Unfinished, PID: pid})
	a.meta = append(a.meta, testMeta{})
	i := len(a.run.Tests) - 1
	a.byName[name] = append(a.byName[name], i)
	return i
}

// find returns the first test named name that ok accepts, or -1.
func (a *Attributor) find(name string, ok func(m *testMeta) bool) int {
	for _, i := range a.byName[name] {
		if ok(&a.meta[i]) {
			return i
		}
	}
	return -1
}

// lastNamed returns the latest test named name, or -1.
func (a *Attributor) lastNamed(name string) int {
	if ix := a.byName[name]; len(ix) > 0 {
		return ix[len(ix)-1]
	}
	return -1
}

func (a *Attributor) event(pid int, at time.Time, ev instrument.RunnerEvent) {
	if ev.Kind == instrument.NotRunner || ev.Kind == instrument.InException {
		return
	}
	p := a.proc(pid)
	if at.After(p.last) {
		p.last = at
	}
	if ev.Kind == instrument.RunStarted && a.cfg.Orchestrator && !a.listed {
		a.listed, p.listing = true, true
	}
	if p.listing {
		return
	}
	a.sawEvents = true
	switch ev.Kind {
	case instrument.RunStarted:
		a.runStarted(p, ev)
	case instrument.TestStarted:
		a.testStarted(p, at, ev.Name)
	case instrument.TestFinished:
		a.testFinished(p, at, ev.Name)
	case instrument.TestFailed, instrument.TestAssumptionFailed:
		a.testFailed(p, at, ev)
	case instrument.TestIgnored:
		a.testIgnored(p, at, ev.Name)
	case instrument.Exception:
		if i := a.lastNamed(ev.Name); i >= 0 && a.run.Tests[i].Failure == "" {
			a.run.Tests[i].Failure = a.failure(ev.Trace)
		}
	case instrument.RunFinished:
		a.runFinished(p, at)
	}
	if k := ev.Kind; k != instrument.TestFailed && k != instrument.TestAssumptionFailed && k != instrument.Exception && !at.IsZero() {
		p.mark, p.markBy = at, markName(ev)
	}
}

// markName says which line a bound is, for a test's note.
func markName(ev instrument.RunnerEvent) string {
	switch ev.Kind {
	case instrument.RunStarted:
		return "its process's run started: line"
	case instrument.RunFinished:
		return "its process's run finished: line"
	}
	return "its process's line " + ev.Kind.String() + ": " + ev.Name
}

func (a *Attributor) runStarted(p *proc, ev instrument.RunnerEvent) {
	for _, pid := range a.order {
		if q := a.procs[pid]; q != p && q.running && !q.gone {
			a.problem("pid %d started a run while pid %d's run was going: two runs interleaved (another run of the same package?); their tests are kept apart by pid", p.pid, q.pid)
		}
	}
	if p.runs > 0 {
		a.problem("pid %d started a second run: its tests are counted after the first run's", p.pid)
	}
	p.runs++
	p.running = true
	a.run.Complete = false
	if a.run.Expected == 0 && !a.sawStatus {
		a.run.Expected = ev.Tests
	}
}

func (a *Attributor) runFinished(p *proc, at time.Time) {
	if p.open >= 0 {
		a.lost(p, p.open, at, "run finished:")
	}
	p.running = false
	if !a.sawStatus {
		a.run.Complete = true
	}
}

// lost ends test i of p, which a line that cannot follow it (what, at
// at) has shown was never finished in the lines read: that line bounds
// its end.
func (a *Attributor) lost(p *proc, i int, at time.Time, what string) {
	a.problem("pid %d: %s came while %s was running, with no finished: line for it (lines lost from logcat, or its process restarted)", p.pid, what, a.run.Tests[i].Name)
	m := &a.meta[i]
	m.lost, m.open = true, false
	if !at.IsZero() && a.run.Tests[i].End.IsZero() {
		m.endBound, m.endBy = at, "its process's line "+what
	}
	p.open = -1
}

func (a *Attributor) testStarted(p *proc, at time.Time, name string) {
	if p.open >= 0 {
		a.lost(p, p.open, at, "started: "+name)
	}
	i := a.find(name, func(m *testMeta) bool { return !m.event && m.statusStart })
	if i < 0 {
		if j := a.find(name, func(m *testMeta) bool { return m.started }); j >= 0 {
			a.problem("test %s started twice (pid %d, then pid %d): each start is kept as a test of its own", name, a.run.Tests[j].PID, p.pid)
		}
		i = a.newTest(name, p.pid)
	}
	t, m := &a.run.Tests[i], &a.meta[i]
	t.PID, t.Start = p.pid, at
	m.event, m.started, m.open = true, true, !m.statusEnd
	p.started = append(p.started, i)
	p.open = i
}

func (a *Attributor) testFinished(p *proc, at time.Time, name string) {
	i := p.open
	if i < 0 || a.run.Tests[i].Name != name {
		if i >= 0 {
			a.lost(p, i, at, "finished: "+name)
		}
		i = a.inferStart(p, name)
	}
	t, m := &a.run.Tests[i], &a.meta[i]
	t.End = at
	if t.Outcome == Unfinished {
		t.Outcome = Passed
	}
	m.open = false
	p.open = -1
}

// inferStart makes the test of a finished: line whose started: line was
// not read: it did start (JUnit finishes only started tests), so it takes
// its place among the process's started tests.
func (a *Attributor) inferStart(p *proc, name string) int {
	a.problem("pid %d: finished: %s came with no started: line for it (lines lost from logcat)", p.pid, name)
	i := a.find(name, func(m *testMeta) bool { return m.failedOnly && !m.started })
	if i < 0 {
		i = a.find(name, func(m *testMeta) bool { return !m.event && m.statusStart })
	}
	if i < 0 {
		i = a.newTest(name, p.pid)
	}
	m := &a.meta[i]
	m.event, m.started, m.failedOnly, m.lost = true, true, false, true
	if m.startBound.IsZero() { // (a failed: line's time is not its start)
		a.boundStart(p, i)
	}
	a.run.Tests[i].PID = p.pid
	p.started = append(p.started, i)
	return i
}

func (a *Attributor) testFailed(p *proc, at time.Time, ev instrument.RunnerEvent) {
	outcome := Failed
	if ev.Kind == instrument.TestAssumptionFailed {
		outcome = AssumptionFailed
	}
	i := p.open
	if i < 0 || a.run.Tests[i].Name != ev.Name {
		// A failure of a test that did not start: a class-level one
		// (@BeforeClass), or a started: line lost.
		i = a.find(ev.Name, func(m *testMeta) bool { return m.failedOnly })
		if i < 0 {
			i = a.failedOnly(p, at, ev.Name)
		}
	}
	if a.run.Tests[i].Outcome == Unfinished || a.run.Tests[i].Outcome == Passed {
		a.run.Tests[i].Outcome = outcome
	}
}

// failedOnly makes the test of a failed: line that no started: line
// named. When am's START status named it, it is that test, which did
// start (its started: line lost): its process's line before bounds its
// start. Otherwise it is a class-level failure, or a started: line lost
// with no status to tell.
func (a *Attributor) failedOnly(p *proc, at time.Time, name string) int {
	i := a.find(name, func(m *testMeta) bool { return !m.event && m.statusStart && !m.started })
	if i < 0 {
		i = a.newTest(name, p.pid)
		a.run.Tests[i].Start = at
	} else {
		a.boundStart(p, i)
	}
	a.meta[i].failedOnly = true
	a.run.Tests[i].PID, a.run.Tests[i].End = p.pid, at
	return i
}

// boundStart bounds the start of test i of p, whose started: line was not
// read, by p's line before, or else p's start.
func (a *Attributor) boundStart(p *proc, i int) {
	m := &a.meta[i]
	m.startBound, m.startBy = p.mark, p.markBy
	if p.mark.IsZero() {
		m.startBound, m.startBy = processStart, "its process's start"
	}
	a.run.Tests[i].Start = time.Time{}
}

func (a *Attributor) testIgnored(p *proc, at time.Time, name string) {
	i := a.find(name, func(m *testMeta) bool { return !m.event && m.statusStart })
	if i < 0 {
		i = a.newTest(name, p.pid)
	}
	t := &a.run.Tests[i]
	t.PID, t.Start, t.End, t.Outcome = p.pid, at, at, Ignored
	a.meta[i].event, a.meta[i].open = true, false
}

func statusName(ev instrument.Event) string {
	if ev.Method == "" {
		return ev.Class
	}
	return ev.Method + "(" + ev.Class + ")"
}

func (a *Attributor) status(ev instrument.Event) {
	a.sawStatus = true
	if ev.NumTests > 0 {
		a.run.Expected = ev.NumTests
	}
	switch ev.Kind {
	case instrument.Started:
		a.statusStarted(statusName(ev))
	case instrument.Ended:
		a.statusEnded(ev)
	case instrument.RunFailed:
		a.problem("am could not start the run: %s", firstLine(ev.Values["Error"]))
	}
}

func (a *Attributor) statusStarted(name string) {
	i := a.find(name, func(m *testMeta) bool { return !m.statusStart && m.event })
	if i < 0 {
		if a.find(name, func(m *testMeta) bool { return m.statusStart }) >= 0 {
			a.problem("am reported test %s started twice: each start is kept as a test of its own", name)
		}
		i = a.newTest(name, 0)
		a.meta[i].open = true
	}
	a.meta[i].statusStart = true
	a.statusSeq = append(a.statusSeq, i)
	a.statusOpen = i
}

func (a *Attributor) statusEnded(ev instrument.Event) {
	name := statusName(ev)
	i := a.statusOpen
	if i < 0 || a.run.Tests[i].Name != name {
		i = a.find(name, func(m *testMeta) bool { return m.statusStart && !m.statusEnd })
	}
	if i < 0 {
		a.problem("am reported the end of test %s, which it had not started", name)
		i = a.newTest(name, 0)
		a.meta[i].statusStart = true
	}
	t, m := &a.run.Tests[i], &a.meta[i]
	m.statusEnd, m.open = true, false
	a.statusOpen = -1
	t.Outcome = outcomeOf(ev)
	if ev.Stack != "" {
		t.Failure = a.failure(ev.Stack)
	} else if ev.Crashed {
		t.Failure = a.failure(ev.Values["stream"])
	}
}

func outcomeOf(ev instrument.Event) Outcome {
	if ev.Crashed {
		return Crashed
	}
	switch ev.Outcome {
	case instrument.Passed:
		return Passed
	case instrument.Failed:
		return Failed
	case instrument.Errored:
		return Errored
	case instrument.Ignored:
		return Ignored
	case instrument.AssumptionFailed:
		return AssumptionFailed
	}
	return Unfinished
}

func (a *Attributor) result(r instrument.Result) {
	a.run.Complete = r.HasCode
	if !r.Crashed() {
		return
	}
	a.problem("the instrumentation process crashed: %s", firstLine(r.Values["shortMsg"]+" "+r.Values["longMsg"]))
	for i := range a.run.Tests {
		if a.meta[i].open && a.run.Tests[i].Outcome == Unfinished {
			a.run.Tests[i].Outcome = Crashed
			a.meta[i].open = false
		}
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
