package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// testCmd is `alloctrack test`: run an instrumentation suite and record
// what each test allocated.
type testCmd struct {
	cmd     *kingpin.CmdClause
	log     *logFlags
	adbAddr *string
	serial  *string
	out     *string
	flags   *testRunFlags
	wait    *time.Duration
	argv    *[]string
}

// testRunFlags are the flags `test` and `capture --tests` share.
type testRunFlags struct {
	window, requestTimeout, reportTimeout *time.Duration
	timeout, settle                       *time.Duration
	top                                   *int
	budget, junit, apk                    *string
	pprof                                 *bool
	gate                                  *gateFlags
}

func addTestRunFlags(cmd *kingpin.CmdClause, capture bool) *testRunFlags {
	f := cmd.Flag
	t := &testRunFlags{
		settle: f("settle", "At the end of a run, how long to wait for the app's processes to end and logcat to give their last lines; without am (capture --tests), how long no process of the app may run after a run finished before the recording ends.").Default("5s").Duration(),
		junit:  f("junit", "Write the JUnit XML report of the tests to this file instead of junit.xml in --out.").String(),
		pprof:  f("pprof", "Also write one pprof profile per test, as tests/NNN.pb.gz in --out.").Bool(),
		apk:    f("apk", "The APK file of the app under test: its version is recorded (for baseline add and check), and a run whose installed app has another version is refused before it starts.").String(),
	}
	if !capture { // capture has its own (--duration is its timeout)
		t.timeout = f("timeout", "Give up on a run that has not finished after this long: what was collected is written, tracking is turned off, the app is force-stopped; exit status 4.").Default("1h").Duration()
		t.window = f("window", "The tracker's longest window in a test run: it also cycles after every finished test.").Default("30s").Duration()
		t.requestTimeout = f("request.timeout", "Timeout of the JDWP handshake, HELO, and the REAQ probe.").Default("5s").Duration()
		t.reportTimeout = f("report.timeout", "Timeout of a REAL (allocation report) request.").Default("30s").Duration()
		t.top = f("top", "Classes and sites listed per test and in summary.json.").Default("10").Int()
		t.budget = f("budget", "Check the run against a budget file (YAML; tests: rules judge each test): exit status 3 if it is exceeded, 5 if a rule matched nothing, 4 if a test a rule matched is partial (unless --allow-partial).").String()
		t.gate = addGateFlags(cmd)
	}
	return t
}

func newTestCmd(app *kingpin.Application) *testCmd {
	c := &testCmd{cmd: app.Command("test", "Run an instrumentation suite (`-- am instrument -w -r ... PKG/RUNNER`) and record what each test allocated: tests.json, junit.xml, instrument.txt, logcat.txt and the usual capture files in --out. Exit status 6 when a test failed.")}
	f := c.cmd.Flag
	c.log = addLogFlags(c.cmd)
	c.adbAddr = f("adb.address", "adb server address host:port. Default: $ADB_SERVER_SOCKET (tcp:host:port), $ANDROID_ADB_SERVER_PORT, 127.0.0.1:5037.").String()
	c.serial = f("serial", "Device serial (as `adb devices` lists it); may be left out when only one device is attached.").String()
	c.out = f("out", "Directory to write into (created; must not hold a capture already).").Short('o').Required().String()
	c.wait = waitFlag(c.cmd)
	c.flags = addTestRunFlags(c.cmd, false)
	c.argv = c.cmd.Arg("command", "The instrumentation command, after --: am instrument -w -r [-e KEY VALUE ...] PKG/RUNNER.").Required().Strings()
	return c
}

// amCommand checks the instrumentation command and returns its
// instrumentation (PKG/RUNNER) and the one whose target app runs the tests
// (Orchestrator's -e targetInstrumentation, else the same).
func amCommand(argv []string) (instr, target string, err error) {
	if len(argv) < 3 || argv[0] != "am" || argv[1] != "instrument" {
		return "", "", fmt.Errorf("the command must be `am instrument -w -r ... PKG/RUNNER`, got %q", strings.Join(argv, " "))
	}
	if !slices.Contains(argv, "-w") || !slices.Contains(argv, "-r") {
		return "", "", fmt.Errorf("am instrument needs -w (else it prints nothing and returns at once) and -r (the status blocks read per test)")
	}
	instr = argv[len(argv)-1]
	if strings.HasPrefix(instr, "-") || !strings.Contains(instr, "/") {
		return "", "", fmt.Errorf("the command must end with the instrumentation PKG/RUNNER, got %q", instr)
	}
	target = instr
	for i := 2; i+2 < len(argv); i++ {
		if argv[i] == "-e" && argv[i+1] == "targetInstrumentation" {
			target = argv[i+2]
		}
		if argv[i] == "-e" && argv[i+1] == "log" && argv[i+2] == "true" {
			return "", "", fmt.Errorf("-e log true turns the runner's TestRunner lines off: no test could be told apart in a report")
		}
	}
	return instr, target, nil
}

func (c *testCmd) run(stdout, stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "alloctrack test: "+format+"\n", args...)
		return code
	}
	instr, target, err := amCommand(*c.argv)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	spec, code, msg := c.flags.spec(*c.out)
	if code != exitOK {
		return fail(code, "%s", msg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code, msg = spec.attach(ctx, c.log, *c.adbAddr, *c.serial, *c.wait, stderr)
	if spec.log != nil {
		defer spec.log.Sync()
	}
	if code != exitOK {
		return fail(code, "%s", msg)
	}
	pkg, note, err := instrumentationTarget(ctx, spec.client, spec.serial, target, spec.cfg.RequestTimeout)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	if note != "" {
		fmt.Fprintf(stderr, "alloctrack test: %s\n", note)
	}
	spec.pkg, spec.instr, spec.argv = pkg, instr, *c.argv
	return spec.record(ctx, "alloctrack test", stdout, stderr)
}

// attach opens the run's logger (s.log) and finds its device through
// the adb server at addr ("": the default), waiting up to wait for it:
// s.client, s.serial, s.model and s.api. The caller syncs s.log.
func (s *testRunSpec) attach(ctx context.Context, lf *logFlags, addr, serial string, wait time.Duration, stderr io.Writer) (int, string) {
	log, _, err := lf.newLogger(stderr)
	if err != nil {
		return exitUsage, err.Error()
	}
	s.log = log
	if addr == "" {
		addr = adb.DefaultAddress()
	}
	s.client = adb.NewClient(addr)
	var code int
	var msg string
	s.serial, s.model, s.api, _, code, msg = lookupWaiting(ctx, wait, func() (string, string, int, int, int, string) {
		sr, m, a, code, msg := lookupTestDevice(ctx, s.client, addr, serial, s.cfg)
		return sr, m, a, 0, code, msg
	})
	return code, msg
}

// spec checks the shared flags and returns a run's spec with them.
func (t *testRunFlags) spec(out string) (*testRunSpec, int, string) {
	switch {
	case (t.timeout != nil && *t.timeout <= 0) || *t.settle <= 0:
		return nil, exitUsage, "--timeout and --settle must be positive"
	case t.window != nil && (*t.window <= 0 || *t.requestTimeout <= 0 || *t.reportTimeout <= 0):
		return nil, exitUsage, "--window, --request.timeout and --report.timeout must be positive"
	case t.top != nil && *t.top < 1:
		return nil, exitUsage, "--top must be at least 1"
	}
	s := &testRunSpec{out: out, settle: *t.settle, junit: *t.junit, pprof: *t.pprof}
	var err error
	if s.build, err = readAppBuild(*t.apk); err != nil {
		return nil, exitUsage, err.Error()
	}
	if t.window != nil {
		s.timeout = *t.timeout
		s.cfg = ddm.Config{Window: *t.window, RequestTimeout: *t.requestTimeout, ReportTimeout: *t.reportTimeout}
		s.top, s.gate = *t.top, t.gate
		if *t.budget != "" {
			bud, err := offline.ReadBudget(*t.budget)
			if err != nil {
				return nil, exitUsage, err.Error()
			}
			s.budget = bud
		}
	}
	s.cfg.Fill()
	return s, exitOK, ""
}
