package sim

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// API levels where am instrument's options change (sheet 14).
const (
	apiAmAbi           = 25 // --abi (7.1)
	apiAmSortedKeys    = 26 // Instrument.java sorts a status's keys; -m
	apiAmHiddenAPI     = 28 // -f, --no-hidden-api-checks
	apiAmIsolated      = 29 // --no-isolated-storage
	apiAmTestAPIAccess = 30 // --no-test-api-access
	apiAmNoRestart     = 34 // --no-restart
)

// amInstrumentOpts are am instrument's arguments.
type amInstrumentOpts struct {
	wait, raw, noRestart bool
	args                 map[string]string // -e KEY VALUE
	component            string
}

// parseInstrument reads am instrument's arguments as the device's version
// has them. A message for stderr (with am's exit status) means am stops.
func parseInstrument(api int, argv []string) (o amInstrumentOpts, msg string, code int) {
	o.args = map[string]string{}
	withArg := map[string]int{"-e": 2, "-p": 1, "--user": 1, "--abi": 1}
	since := map[string]int{"-r": 0, "-w": 0, "-e": 0, "-p": 0, "--user": 0, "--no_window_animation": 0,
		"--no-window-animation": 0, "--abi": apiAmAbi, "-m": apiAmSortedKeys, "-f": apiAmHiddenAPI,
		"--no-hidden-api-checks": apiAmHiddenAPI, "--no-isolated-storage": apiAmIsolated,
		"--no-test-api-access": apiAmTestAPIAccess, "--no-restart": apiAmNoRestart}
	i := 0
	for ; i < len(argv) && strings.HasPrefix(argv[i], "-"); i++ {
		a := argv[i]
		v, known := since[a]
		if !known || api < v {
			return o, "Error: Unknown option: " + a + "\n", 0
		}
		if n := withArg[a]; i+n >= len(argv) {
			return o, fmt.Sprintf("Error: Argument expected after %q\n", a), 0
		}
		switch a {
		case "-r":
			o.raw = true
		case "-w":
			o.wait = true
		case "--no-restart":
			o.noRestart = true
		case "-e":
			o.args[argv[i+1]] = argv[i+2]
		case "-m", "-f":
			return o, "sim: am instrument: protobuf output (-m, -f) is not simulated\n", 1
		}
		i += withArg[a]
	}
	if i >= len(argv) {
		return o, "Error: Argument expected after \"instrument\"\n", 0
	}
	o.component = argv[i]
	if pkg, cls, ok := strings.Cut(o.component, "/"); ok && strings.HasPrefix(cls, ".") {
		o.component = pkg + "/" + pkg + cls
	}
	return o, "", 0
}

// instrRun is one am instrument run in progress.
type instrRun struct {
	d     *Device
	s     *Suite
	o     amInstrumentOpts
	out   *amOut
	tr    *TestRun
	delay time.Duration
}

// amInstrument runs am instrument, printing as the run goes (sheet 12-14).
func (d *Device) amInstrument(argv []string, stdout, stderr io.Writer) int {
	api := d.cfg.API
	o, msg, code := parseInstrument(api, argv[2:])
	if msg != "" {
		io.WriteString(stderr, msg)
		return code
	}
	out := &amOut{w: stdout, raw: o.raw, sorted: api >= apiAmSortedKeys}
	s := d.suite(o.component)
	if s == nil {
		return d.instrumentMissing(o, out, stderr)
	}
	r := &instrRun{d: d, s: s, o: o, out: out, tr: newTestRun(s.Component())}
	if ms, err := strconv.Atoi(o.args["delay_msec"]); err == nil && ms > 0 {
		r.delay = time.Duration(ms) * time.Millisecond
	}
	d.tests.mu.Lock()
	d.tests.runs = append(d.tests.runs, r.tr)
	d.tests.mu.Unlock()
	if !o.wait {
		// Without -w am returns at once and prints nothing (sheet 13).
		out.w = io.Discard
		go r.run()
		return 0
	}
	r.run()
	return 0
}

// instrumentMissing is am's answer for an instrumentation that is not
// installed (sheet 14).
func (d *Device) instrumentMissing(o amInstrumentOpts, out *amOut, stderr io.Writer) int {
	if o.wait {
		out.status(codeError, map[string]string{"id": "ActivityManagerService",
			"Error": "Unable to find instrumentation info for: ComponentInfo{" + o.component + "}"})
	}
	frames := "\tat com.android.commands.am.Am.runInstrument(Am.java:1093)\n\tat com.android.commands.am.Am.onRun(Am.java:371)\n"
	if d.cfg.API >= apiAmSortedKeys {
		frames = "\tat com.android.commands.am.Instrument.run(Instrument.java:519)\n\tat com.android.commands.am.Am.runInstrument(Am.java:202)\n\tat com.android.commands.am.Am.onRun(Am.java:128)\n"
	}
	io.WriteString(stderr, "android.util.AndroidException: INSTRUMENTATION_FAILED: "+o.component+"\n"+frames+
		"\tat com.android.internal.os.BaseCommand.run(BaseCommand.java:60)\n\tat com.android.commands.am.Am.main(Am.java:100)\n"+
		"\tat com.android.internal.os.RuntimeInit.nativeFinishInit(Native Method)\n")
	return 1
}

// selected lists the suite's tests the runner's class argument selects
// (CLASS or CLASS#METHOD, comma separated; a METHOD without its
// parameters selects every parameterized run of it), all without one.
func selected(s *Suite, class string) []int {
	var idx []int
	for i, t := range s.Tests {
		ok := class == ""
		base, _, _ := strings.Cut(t.Method, "[")
		for _, c := range strings.Split(class, ",") {
			cls, m, hasM := strings.Cut(c, "#")
			ok = ok || (cls == t.Class && (!hasM || m == t.Method || m == base))
		}
		if ok {
			idx = append(idx, i)
		}
	}
	return idx
}

// run runs the instrumentation: its own runner's, or the orchestrator's.
func (r *instrRun) run() {
	defer close(r.tr.done)
	if r.s.Orchestrator {
		r.orchestrate()
		return
	}
	d, s := r.d, r.s
	var p *testProc
	if r.o.noRestart {
		p = d.reuseTestProc(s)
	}
	if p == nil {
		if !r.o.noRestart {
			d.forceStop(s.Target) // "start instr" (sheet 12)
		}
		p = d.startTestProc(s)
	}
	between := r.tr.addProc(p.truth, false)
	if !p.sleep(startDelay(s)) {
		r.out.result(0, map[string]string{"shortMsg": "Process crashed."})
		return
	}
	idx := selected(s, r.o.args["class"])
	pr := &procRun{r: r, p: p, between: between, rp: newResultPrinter(r.out, "AndroidJUnitRunner", len(idx)),
		o: r.runOpts(true)}
	if pr.runTests(idx) {
		r.out.result(0, map[string]string{"shortMsg": "Process crashed."})
		return
	}
	text := pr.rp.text()
	if !r.o.noRestart {
		p.stop() // "finished inst": right after the result is queued (sheet 12)
	}
	r.out.result(-1, map[string]string{"stream": text})
}

func (r *instrRun) runOpts(record bool) runOpts {
	o := runOpts{delay: r.delay, logOnly: r.o.args["log"] == "true", list: r.o.args["listTestsForOrchestrator"] == "true", record: record}
	if o.logOnly {
		o.delay = 0 // no delay listener in a log-only run
	}
	return o
}

func startDelay(s *Suite) time.Duration {
	if s.StartDelay == 0 {
		return 200 * time.Millisecond
	}
	return max(s.StartDelay, 0)
}

// orchestrate runs the target instrumentation's tests as Android Test
// Orchestrator does (sheet 15): one process listing them, then one
// process per test, its statuses relayed to the host.
func (r *instrRun) orchestrate() {
	d := r.d
	ts := d.suite(r.o.args["targetInstrumentation"])
	if ts == nil {
		r.out.result(0, map[string]string{"stream": "\nsim: the orchestrator found no instrumentation " + strconv.Quote(r.o.args["targetInstrumentation"]) + " (-e targetInstrumentation)\n"})
		return
	}
	opid := d.newPID()
	d.AddProcess(opid, OrchestratorPackage)
	defer func() {
		d.mu.Lock()
		delete(d.procs, opid)
		d.mu.Unlock()
	}()
	idx := selected(ts, r.o.args["class"])
	d.forceStop(ts.Target)
	lp := d.startTestProc(ts)
	lb := r.tr.addProc(lp.truth, true)
	if lp.sleep(startDelay(ts)) {
		list := &procRun{r: r, p: lp, between: lb, rp: newResultPrinter(&amOut{w: io.Discard}, "AndroidJUnitRunner", len(idx)),
			o: runOpts{list: true}}
		list.runTests(idx)
	}
	lp.stop()
	rp := newResultPrinter(r.out, "AndroidTestOrchestrator", len(idx))
	for _, i := range idx {
		r.orchestrateOne(ts, i, rp)
	}
	r.out.result(-1, map[string]string{"stream": rp.text()})
}

// orchestrateOne runs test i in a process of its own; a crash is relayed
// as the test's failure and the run goes on.
func (r *instrRun) orchestrateOne(ts *Suite, i int, rp *resultPrinter) {
	d := r.d
	d.forceStop(ts.Target)
	p := d.startTestProc(ts)
	between := r.tr.addProc(p.truth, false)
	o := r.runOpts(true)
	o.relayed, o.list = true, false
	pr := &procRun{r: r, p: p, between: between, rp: rp, o: o}
	if p.sleep(startDelay(ts)) && !pr.runTests([]int{i}) {
		p.stop()
		return
	}
	t := &ts.Tests[i]
	if rp.bundle == nil || rp.bundle["test"] != t.Method || rp.bundle["class"] != t.Class {
		rp.started(t) // the process died before the test started
	}
	trace := fmt.Sprintf("java.lang.Throwable: Test instrumentation process crashed. Check %s#%s.txt for details\n", t.Class, t.Method)
	rp.finished(t, pertest.Failed, trace)
	p.stop()
}

// streamedCommand returns how to run a command line that prints as it
// runs (am instrument alone on its line), or nil: such lines go through
// runShellIO, whose output comes whole at the end.
func (d *Device) streamedCommand(line string) func(stdout, stderr io.Writer) int {
	cmds, err := splitShell(line)
	if err != nil || len(cmds) != 1 {
		return nil
	}
	argv := cmds[0].argv
	if len(argv) < 2 || argv[0] != "am" || argv[1] != "instrument" {
		return nil
	}
	return func(stdout, stderr io.Writer) int {
		d.mu.Lock()
		if len(d.shellLog) == maxTrace {
			d.shellLog = slices.Delete(d.shellLog, 0, 1)
		}
		d.shellLog = append(d.shellLog, argv)
		d.mu.Unlock()
		return d.amInstrument(argv, stdout, stderr)
	}
}
