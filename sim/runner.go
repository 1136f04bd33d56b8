package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// runOpts are the runner's arguments (-e KEY VALUE) that shape a run.
type runOpts struct {
	delay   time.Duration // delay_msec: after run started and each finished test
	logOnly bool          // log true: no LogRunListener, tests not run
	list    bool          // listTestsForOrchestrator: tests logged, not run
	record  bool          // the tests are the run's (not a listing)
	relayed bool          // run by the orchestrator: a crash is relayed by it
}

// procRun is one process's part of a run: its runner's counts.
type procRun struct {
	r       *instrRun
	p       *testProc
	between int32
	rp      *resultPrinter
	o       runOpts
	run     int
	failed  int
	ignored int
}

const tagRunner = "TestRunner"

// runTests runs the suite's tests idx in the process as the runner does
// (sheet 8-11) and tells whether the process crashed.
func (pr *procRun) runTests(idx []int) (crashed bool) {
	p, log := pr.p, !pr.o.logOnly
	if log {
		p.log('I', tagRunner, p.listener(callRunStarted, fmt.Sprintf("run started: %d tests", len(idx))))
		p.printer(callRunStarted)
		if !p.sleep(pr.o.delay) {
			return true
		}
	}
	for _, i := range idx {
		if !pr.runOne(i) {
			return true
		}
	}
	if log {
		p.log('I', tagRunner, p.listener(callRunFinished, fmt.Sprintf("run finished: %d tests, %d failed, %d ignored", pr.run, pr.failed, pr.ignored)))
		p.printer(callRunFinished)
	}
	return !p.alive()
}

// runOne runs test i: false if the process died during it.
func (pr *procRun) runOne(i int) bool {
	p, t := pr.p, &pr.p.suite.Tests[i]
	log, dry := !pr.o.logOnly, pr.o.logOnly || pr.o.list
	outcome := t.Outcome
	if outcome == "" || dry && outcome != pertest.Ignored {
		outcome = pertest.Passed
	}
	at := time.Now()
	if outcome == pertest.Ignored {
		if log {
			at = p.log('I', tagRunner, p.listener(callIgnored, "ignored: "+t.Name()))
		}
		pr.newRecord(t, at)
		p.printer(callIgnored)
		pr.rp.ignored(t)
		pr.ignored++
		return true
	}
	if log {
		at = p.logLost(t.LoseStarted, p.listener(callStarted, "started: "+t.Name()))
	}
	rec := pr.newRecord(t, at)
	p.printer(callStarted)
	pr.rp.started(t)
	if !dry && !pr.body(i, rec, outcome) {
		return false
	}
	trace := traceOf(t, outcome)
	pr.failure(t, outcome, trace, log)
	at = time.Now()
	if log {
		at = p.logLost(t.LoseFinished, p.listener(callFinished, "finished: "+t.Name()))
	}
	pr.r.tr.endTest(rec, outcome, at)
	p.printer(callFinished)
	pr.rp.finished(t, outcome, trace)
	pr.run++
	return p.sleep(pr.o.delay)
}

// newRecord starts the truth of test t, begun at start: a segment of its
// own, listed in the run unless this is a listing.
func (pr *procRun) newRecord(t *SuiteTest, start time.Time) *testRecord {
	p := pr.p
	rec := &testRecord{name: t.Name(), class: t.Class, method: t.Method, pid: p.vm.PID(), proc: p.truth, start: start, seg: p.truth.newSegment()}
	if t.Outcome == pertest.Ignored {
		rec.outcome, rec.end = pertest.Ignored, start
	}
	if pr.o.record {
		pr.r.tr.addTest(rec)
	}
	return rec
}

// body runs test i's body in its own segment; a crashing test crashes
// the process half way (sheet 11). False if the process died.
func (pr *procRun) body(i int, rec *testRecord, outcome pertest.Outcome) bool {
	p, t := pr.p, &pr.p.suite.Tests[i]
	steps := stepsOf(t)
	last := steps
	if outcome == pertest.Crashed {
		last = steps / 2
	}
	p.truth.setSegment(rec.seg)
	ok := p.body(i, 0, last)
	p.truth.setSegment(pr.between)
	if ok && outcome != pertest.Crashed {
		return true
	}
	pr.r.tr.endTest(rec, pertest.Crashed, time.Now())
	if ok {
		pr.crash(t)
	}
	return false
}

// failure logs a failed test's lines and its exception in the runner
// version's style (sheet 8), with the status printer's allocations.
func (pr *procRun) failure(t *SuiteTest, o pertest.Outcome, trace string, log bool) {
	p := pr.p
	call, prefix := callFailure, "failed: "
	switch o {
	case pertest.Failed, pertest.Errored:
		pr.failed++
	case pertest.AssumptionFailed:
		call, prefix = callAssumption, "assumption failed: "
	default:
		return
	}
	if log {
		p.log('E', tagRunner, p.listener(call, prefix+t.Name()))
		if p.suite.oldExceptions() {
			p.log('E', tagRunner, "----- begin exception -----")
			p.log('E', tagRunner, trace)
		} else {
			p.log('E', tagRunner, "----- begin exception -----\n"+trace)
		}
		p.log('E', tagRunner, "----- end exception -----")
	}
	p.printer(call)
}

// crash is an uncaught exception in test t: the runner reports it (unless
// the orchestrator will), logs it, the process dies (sheet 11).
func (pr *procRun) crash(t *SuiteTest) {
	p := pr.p
	trace := traceOf(t, pertest.Crashed)
	if !pr.o.relayed {
		pr.rp.crashed(t, trace)
	}
	thread := "Instr: " + p.suite.Runner
	p.log('E', "MonitoringInstr", fmt.Sprintf("Exception encountered by: Thread[%s,5,main]. Dumping thread state to outputs and pining for the fjords.", thread))
	p.log('E', "AndroidJUnitRunner", "An unhandled exception was thrown by the app.")
	p.logBuf('E', "AndroidRuntime", fmt.Sprintf("FATAL EXCEPTION: %s\nProcess: %s, PID: %d\n%s", thread, p.suite.Target, p.vm.PID(), trace), "crash", p.tid)
	p.stop()
}

// traceOf is test t's stack trace for outcome o: its own, or a default
// one naming it.
func traceOf(t *SuiteTest, o pertest.Outcome) string {
	if t.Trace != "" {
		return t.Trace
	}
	method, _, _ := strings.Cut(t.Method, "[")
	file := t.Class[strings.LastIndexByte(t.Class, '.')+1:]
	at := fmt.Sprintf("\tat %s.%s(%s.java:30)\n", t.Class, method, file)
	switch o {
	case pertest.Failed:
		return "java.lang.AssertionError: expected:<1> but was:<2>\n\tat org.junit.Assert.fail(Assert.java:89)\n" + at
	case pertest.Errored:
		return "java.lang.NullPointerException: simulated error\n" + at
	case pertest.AssumptionFailed:
		return "org.junit.AssumptionViolatedException: got: <false>, expected: is <true>\n\tat org.junit.Assume.assumeTrue(Assume.java:68)\n" + at
	case pertest.Crashed:
		return fmt.Sprintf("java.lang.IllegalStateException: simulated crash\n\tat %s.lambda$%s$0(%s.java:33)\n", t.Class, method, file)
	}
	return ""
}
