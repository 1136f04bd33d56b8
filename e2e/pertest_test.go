package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/internal/realtest"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// The suite under test: a seeded suite for the farm's first app.
const (
	proofPkg  = "com.example.app1.test"
	proofApp  = "com.example.app1"
	proofComp = proofPkg + "/" + sim.AndroidJUnitRunner
)

// proofDelay is the runner's -e delay_msec of these runs: the pause after
// each finished test in which alloctrack reads the finished: line (logcat
// through adbd and the adb server) and cycles the tracker (three DDM
// round trips through the adb server). See TestPerTestProof.
const proofDelay = "200"

// testRun is one `alloctrack test` process.
type testRun struct {
	args           []string
	out            string // its --out directory
	stdout, stderr bytes.Buffer
	code           int
	err            error
	done           chan struct{}
}

// startTest starts the binary's `alloctrack test` on serial of the adb
// server at addr, writing to out, with am's arguments amArgs; it is killed
// at cleanup if still running.
func startTest(t *testing.T, addr, serial, out string, flags []string, amArgs ...string) *testRun {
	t.Helper()
	args := append([]string{"test", "--adb.address", addr, "--serial", serial, "--out", out}, flags...)
	args = append(append(args, "--", "am", "instrument", "-w", "-r"), amArgs...)
	r := &testRun{args: args, out: out, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 4*testwait.Bound)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = &r.stdout, &r.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		defer cancel()
		r.err = cmd.Wait()
		var ee *exec.ExitError
		if errors.As(r.err, &ee) {
			r.code = ee.ExitCode()
		}
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func (r *testRun) wait() { <-r.done }

func (r *testRun) say() string {
	return fmt.Sprintf("alloctrack %s: exit %d (%v)\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.err, &r.stdout, &r.stderr)
}

// tests reads the run's tests.json.
func (r *testRun) tests(t *testing.T) *pertest.Run {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.out, "tests.json"))
	if err != nil {
		t.Fatalf("%v\n%s", err, r.say())
	}
	var run pertest.Run
	if err := json.Unmarshal(b, &run); err != nil {
		t.Fatal(err)
	}
	return &run
}

// suiteSpec is a device's seeded suite of n tests with odd names.
func suiteSpec(api, n int) sim.SeedSpec {
	return sim.SeedSpec{Tests: n, Seed: uint64(api), OddNames: true}
}

// proofFarm is a farm of one device per level in apis (its first app the
// suite's target), each with the seeded suite of spec(api) and the
// orchestrator installed, attached to a real adb server.
func proofFarm(t *testing.T, apis []int, cfg func(int, *sim.DeviceConfig), spec func(api int) sim.Suite) *rig {
	t.Helper()
	fc := sim.FarmConfig{Devices: len(apis), AppsPerDevice: 2, APIs: apis, Workload: quietWorkload(), Device: cfg}
	return attachFarm(t, fc, func(f *sim.Farm) {
		for _, d := range f.Devices() {
			for _, s := range []sim.Suite{spec(d.Config().API), sim.OrchestratorSuite()} {
				if err := d.InstallSuite(s); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// checkTruth compares every test of run with the device's truth of its
// last run: the same tests in order, with the outcome and exactly the
// allocations and bytes its body made (Allocated, which here equals what
// the VM reported), none partial; between tests what the VM reported
// outside the tests; the total the tests plus between. It returns the
// sum of the tests' allocations.
func checkTruth(t *testing.T, d *sim.Device, run *pertest.Run) uint64 {
	t.Helper()
	truth, ok := d.RunTruth(-1)
	if !ok {
		t.Fatal("no run on the device")
	}
	if len(run.Tests) != len(truth.Tests) {
		t.Fatalf("%d tests recorded, the device ran %d (problems %q)", len(run.Tests), len(truth.Tests), run.Problems)
	}
	var sum pertest.Figures
	for i, tt := range truth.Tests {
		got, want := run.Tests[i], tt.Allocated.Total
		if tt.Reported.Total != want {
			t.Errorf("test %d %s: the VM reported %+v of the %+v its body allocated", i, tt.Name, tt.Reported.Total, want)
		}
		if got.Name != tt.Name || got.Outcome != tt.Outcome || got.Partial || got.Allocations != want.Allocations || got.Bytes != want.Bytes {
			t.Errorf("test %d: %s %s partial %v %d allocations %d bytes %q; truth %s %s %d %d",
				i, got.Name, got.Outcome, got.Partial, got.Allocations, got.Bytes, got.Notes, tt.Name, tt.Outcome, want.Allocations, want.Bytes)
		}
		sum.Allocations += got.Allocations
		sum.Bytes += got.Bytes
	}
	if b := truth.BetweenReported.Total; run.Between.Allocations != b.Allocations || run.Between.Bytes != b.Bytes {
		t.Errorf("between tests %d/%d, the VM reported %d/%d", run.Between.Allocations, run.Between.Bytes, b.Allocations, b.Bytes)
	}
	if sum.Allocations+run.Between.Allocations != run.Total.Allocations || sum.Bytes+run.Between.Bytes != run.Total.Bytes {
		t.Errorf("total %d/%d is not the tests' %d/%d plus between %d/%d", run.Total.Allocations, run.Total.Bytes,
			sum.Allocations, sum.Bytes, run.Between.Allocations, run.Between.Bytes)
	}
	if !run.Complete {
		t.Errorf("the run is not complete: %q", run.Problems)
	}
	return sum.Allocations
}

// runAll runs `alloctrack test` on every device of r at once with am's
// arguments amArgs, waits for all, and checks each against its device's
// truth and junit.xml with junitparser.
func runAll(t *testing.T, r *rig, py string, amArgs ...string) {
	t.Helper()
	start := time.Now()
	runs := map[*sim.Device]*testRun{}
	for _, d := range r.farm.Devices() {
		out := filepath.Join(t.TempDir(), "run")
		runs[d] = startTest(t, r.adb.Addr(), r.serial[d.Serial()], out, nil, amArgs...)
	}
	for _, c := range runs {
		c.wait()
	}
	for d, c := range runs {
		if c.code != 0 {
			t.Errorf("API %d: %s", d.Config().API, c.say())
			continue
		}
		run := c.tests(t)
		sum := checkTruth(t, d, run)
		if len(run.Problems) > 0 {
			t.Errorf("API %d: problems %q", d.Config().API, run.Problems)
		}
		truth, _ := d.RunTruth(-1)
		checkJUnitParser(t, py, filepath.Join(c.out, "junit.xml"), run)
		t.Logf("API %d: %d tests, %d processes, %d allocations in tests, %d between (%d allocated between)",
			d.Config().API, len(run.Tests), len(truth.PIDs), sum, run.Between.Allocations, truth.Between.Total.Allocations)
	}
	t.Logf("%d runs at once took %v", len(runs), time.Since(start).Round(100*time.Millisecond))
}

// TestPerTestProof is issue 34's proof: through Debian's adb server, a
// simulated suite of 100 tests (odd names) on each of four devices of API
// 19, 23, 29 and 30, run on all four at once (each run interleaved with
// the others): every test's allocations and bytes equal the simulator's
// truth; then the same under Android Test Orchestrator (a process per
// test). junit.xml of each run reads in junitparser with every test.
//
// -e delay_msec 200: after each finished: line the host must read it
// (logcat, adbd, the adb server) and cycle the tracker (REAL, REAE 0,
// REAE 1 through the adb server) before the next test allocates, and
// read the last report before am force-stops the process. On a loaded
// two-core machine, with the race detector and four runs at once, 100
// showed no partial test in our runs but leaves less margin than we want
// for a test that must never fail by chance; 200 doubles it for 10 s more
// per run.
func TestPerTestProof(t *testing.T) {
	py := junitPython(t)
	r := proofFarm(t, []int{19, 23, 29, 30}, nil, func(api int) sim.Suite {
		return sim.SeededSuite(proofPkg, proofApp, suiteSpec(api, 100))
	})
	t.Run("instrumentation", func(t *testing.T) {
		runAll(t, r, py, "-e", "delay_msec", proofDelay, proofComp)
	})
	t.Run("orchestrator", func(t *testing.T) {
		runAll(t, r, py, "-e", "delay_msec", proofDelay, "-e", "targetInstrumentation", proofComp,
			sim.OrchestratorPackage+"/"+sim.OrchestratorRunner)
	})
	r.checkTrackingOff(t)
}

// junitPython returns Debian's python3 with junitparser, or skips (fails
// under CI).
func junitPython(t *testing.T) string {
	t.Helper()
	py := realtest.Program(t, "python3", "python3-junitparser", "/usr/bin")
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		py = "/usr/bin/python3" // Debian's, where apt installs the module
	}
	if out, err := exec.Command(py, "-c", "import junitparser").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s cannot import junitparser (install python3-junitparser): %v\n%s", py, err, out)
		}
		t.Skipf("%s cannot import junitparser; install the Debian package python3-junitparser to run this test", py)
	}
	return py
}

// readCases prints each testcase junitparser reads as class#name and
// its result kinds.
const readCases = `
import json, sys
from junitparser import JUnitXml, Failure, Error, Skipped
out = []
for suite in JUnitXml.fromfile(sys.argv[1]):
    for case in suite:
        out.append([case.classname + "#" + case.name, [type(r).__name__ for r in case.result]])
json.dump(out, sys.stdout)
`

// checkJUnitParser has junitparser read the junit.xml at path and checks
// that it holds every test of run, once, by class and method, passed.
func checkJUnitParser(t *testing.T, py, path string, run *pertest.Run) {
	t.Helper()
	out, err := exec.Command(py, "-c", readCases, path).Output()
	if err != nil {
		t.Fatalf("junitparser on %s: %v", path, err)
	}
	var cases [][2]json.RawMessage
	if err := json.Unmarshal(out, &cases); err != nil {
		t.Fatalf("junitparser's output: %v\n%s", err, out)
	}
	got := map[string]int{}
	for _, c := range cases {
		var name string
		var results []string
		json.Unmarshal(c[0], &name)
		json.Unmarshal(c[1], &results)
		got[name]++
		if len(results) > 0 {
			t.Errorf("junitparser: %s has results %v, want passed", name, results)
		}
	}
	if len(cases) != len(run.Tests) {
		t.Errorf("junitparser read %d testcases, the run has %d tests", len(cases), len(run.Tests))
	}
	for _, tt := range run.Tests {
		if k := tt.Class + "#" + tt.Method; got[k] != 1 {
			t.Errorf("junitparser read %s %d times", k, got[k])
		}
	}
}

// oneDevice is a farm of one device of api with suite installed, and its
// run of `alloctrack test` with -e delay_msec.
func oneDevice(t *testing.T, api int, cfg func(int, *sim.DeviceConfig), suite sim.Suite) (*rig, *sim.Device) {
	t.Helper()
	r := proofFarm(t, []int{api}, cfg, func(int) sim.Suite { return suite })
	return r, r.farm.Devices()[0]
}

func (r *rig) startTest(t *testing.T, d *sim.Device, flags []string, amArgs ...string) *testRun {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run")
	if amArgs == nil {
		amArgs = []string{"-e", "delay_msec", proofDelay, proofComp}
	}
	return startTest(t, r.adb.Addr(), r.serial[d.Serial()], out, flags, amArgs...)
}

// TestPerTestStartedTwice: a suite that runs a test twice (two tests of
// one name, as a parameterized test whose parameters print alike): each
// run is a test of its own, exact, and the run says the name came twice.
func TestPerTestStartedTwice(t *testing.T) {
	s := sim.SeededSuite(proofPkg, proofApp, suiteSpec(29, 6))
	s.Tests[4].Class, s.Tests[4].Method = s.Tests[1].Class, s.Tests[1].Method
	r, d := oneDevice(t, 29, nil, s)
	c := r.startTest(t, d, nil)
	c.wait()
	if c.code != 0 {
		t.Fatal(c.say())
	}
	run := c.tests(t)
	checkTruth(t, d, run)
	name := s.Tests[1].Name()
	if run.Tests[1].Name != name || run.Tests[4].Name != name {
		t.Errorf("tests 1 and 4: %s and %s, want %s twice", run.Tests[1].Name, run.Tests[4].Name, name)
	}
	if !strings.Contains(c.stderr.String(), "test "+name+" started twice") {
		t.Errorf("the run does not say %s started twice:\n%s", name, c.say())
	}
}

// runnerLines logs, as pid, the TestRunner lines of a passing run of the
// tests names, with the layout's I priority.
func runnerLines(d *sim.Device, pid int, names ...string) {
	log := func(msg string) { d.Log(sim.LogEntry{PID: pid, Priority: 'I', Tag: "TestRunner", Msg: msg}) }
	log(fmt.Sprintf("run started: %d tests", len(names)))
	for _, n := range names {
		log("started: " + n)
		log("finished: " + n)
	}
	log(fmt.Sprintf("run finished: %d tests, 0 failed, 0 ignored", len(names)))
}

// TestPerTestOtherRunnerLines: runner lines of other processes in the
// log are no test of this run: an earlier run's (before this one) are
// skipped silently; those of an app older than the run and of an app
// started during it (running tests of its own) are counted and named by
// pid; every test of the run is exact.
func TestPerTestOtherRunnerLines(t *testing.T) {
	for _, api := range []int{19, 30} { // 4.4 has no -T: it reads the whole buffer
		t.Run(fmt.Sprint("API ", api), func(t *testing.T) {
			r, d := oneDevice(t, api, nil, sim.SeededSuite(proofPkg, proofApp, suiteSpec(api, 10)))
			older := r.vm(t, d.Serial(), "com.example.app2").PID()
			runnerLines(d, 777, "earlier(com.example.Old)") // a run of a process long gone
			c := r.startTest(t, d, nil)
			testwait.Until(t, 10*time.Millisecond, "the run's first test", func() (bool, string) {
				b, _ := os.ReadFile(filepath.Join(c.out, "logcat.txt"))
				return strings.Contains(string(b), "started: test001("), string(b)
			})
			fresh, err := r.farm.AddApp(d.Serial(), sim.AppConfig{Package: "com.example.other", Workload: quietWorkload()})
			if err != nil {
				t.Fatal(err)
			}
			runnerLines(d, older, "older(com.example.app2.OtherTest)")
			runnerLines(d, fresh.PID(), "fresh[0](com.example.other.T)", "fresh[1](com.example.other.T)")
			c.wait()
			if c.code != 0 {
				t.Fatal(c.say())
			}
			run := c.tests(t)
			checkTruth(t, d, run)
			p := strings.Join(run.Problems, "; ")
			for _, want := range []string{
				"runner lines were left out: ",
				fmt.Sprintf("6 of pids %d, not %s (another app or run)", fresh.PID(), proofApp),
				fmt.Sprintf("4 of pids %d, processes never tracked", older),
			} {
				if !strings.Contains(p, want) || !strings.Contains(c.stderr.String(), want) {
					t.Errorf("the run does not say %q: %s", want, c.say())
				}
			}
			if strings.Contains(p, "777") || len(run.Problems) != 1 {
				t.Errorf("problems %q", run.Problems)
			}
		})
	}
}

// TestPerTestLogcatLost: a chatty app fills a small log buffer during the
// run, so that runner lines are pruned before logcat reads them (logd
// says nothing of it). The run says lines were lost; am's statuses still
// give every test, by name, with its outcome; nothing collected is lost
// (the run's total is what the VM reported); the markers in the reports
// still split the tests exactly.
func TestPerTestLogcatLost(t *testing.T) {
	const n = 20
	small := func(_ int, c *sim.DeviceConfig) { c.LogBufferSize = 600 }
	r, d := oneDevice(t, 29, small, sim.SeededSuite(proofPkg, proofApp, suiteSpec(29, n)))
	chatty := r.vm(t, d.Serial(), "com.example.app2").PID()
	c := r.startTest(t, d, nil)
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() { // the chatty app: each line fills most of the buffer
		defer close(flooded)
		msg := strings.Repeat("chatter ", 60)
		for {
			select {
			case <-stop:
				return
			default:
				d.Log(sim.LogEntry{PID: chatty, Priority: 'D', Tag: "Chatty", Msg: msg})
			}
		}
	}()
	c.wait()
	close(stop)
	<-flooded
	truth, _ := d.RunTruth(-1)
	run := c.tests(t)
	t.Logf("logcat lost %d lines; exit %d; %d problems", d.LogcatGap(), c.code, len(run.Problems))
	if d.LogcatGap() == 0 || !strings.Contains(c.stderr.String(), "lines lost from logcat") {
		t.Errorf("the run does not say lines were lost: %s", c.say())
	}
	if len(run.Tests) != n {
		t.Fatalf("%d tests, want %d: %s", len(run.Tests), n, c.say())
	}
	var reported uint64
	for i, tt := range truth.Tests {
		got := run.Tests[i]
		if got.Name != tt.Name || got.Outcome != tt.Outcome {
			t.Errorf("test %d: %s %s, truth %s %s", i, got.Name, got.Outcome, tt.Name, tt.Outcome)
		}
		reported += tt.Reported.Total.Allocations
	}
	reported += truth.BetweenReported.Total.Allocations
	if run.Total.Allocations != reported {
		t.Errorf("the run's total is %d allocations, the VM reported %d", run.Total.Allocations, reported)
	}
	checkTruth(t, d, run)
}

// hangingSuite is a seeded suite of three tests whose second never ends.
func hangingSuite(api int) sim.Suite {
	s := sim.SeededSuite(proofPkg, proofApp, suiteSpec(api, 3))
	s.Tests[1].Duration = time.Hour
	return s
}

// waitLogcat waits until the run's logcat.txt holds want.
func waitLogcat(t *testing.T, c *testRun, want string) {
	t.Helper()
	testwait.Until(t, 10*time.Millisecond, "logcat.txt holding "+want, func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(c.out, "logcat.txt"))
		return strings.Contains(string(b), want), string(b)
	})
}

// checkCut checks a run cut during its second test: exit 4 saying why
// (why), the first test exact, the second unfinished, the run not
// complete.
func checkCut(t *testing.T, d *sim.Device, c *testRun, why string) *pertest.Run {
	t.Helper()
	c.wait()
	if c.code != 4 || !strings.Contains(c.stderr.String(), why) {
		t.Fatalf("want exit 4 saying %q: %s", why, c.say())
	}
	run := c.tests(t)
	truth, _ := d.RunTruth(-1)
	if len(run.Tests) < 2 || run.Complete || run.Tests[1].Outcome != pertest.Unfinished {
		t.Fatalf("tests %+v, complete %v", run.Tests, run.Complete)
	}
	if got, want := run.Tests[0], truth.Tests[0].Allocated.Total; got.Outcome != pertest.Passed || got.Partial || got.Allocations != want.Allocations || got.Bytes != want.Bytes {
		t.Errorf("first test %s partial %v %d/%d, truth %d/%d", got.Outcome, got.Partial, got.Allocations, got.Bytes, want.Allocations, want.Bytes)
	}
	return run
}

// noTrackingOn fails t for every live process of d left tracking.
func noTrackingOn(t *testing.T, d *sim.Device) {
	t.Helper()
	for _, vm := range d.VMs() {
		if vm.Alive() && vm.Tracking() {
			t.Errorf("pid %d (%s) left tracking", vm.PID(), vm.ProcessName())
		}
	}
}

// TestPerTestTimeout: through Debian's adb server, a run that never
// finishes is cut at --timeout: exit 4, the first test written exact,
// tracking off, the app force-stopped (which ends am).
func TestPerTestTimeout(t *testing.T) {
	r, d := oneDevice(t, 23, nil, hangingSuite(23)) // shell: with a PTY
	c := r.startTest(t, d, []string{"--timeout", "4s"})
	checkCut(t, d, c, "has not finished after --timeout 4s")
	noTrackingOn(t, d)
	for _, vm := range d.VMs() {
		if vm.ProcessName() == proofApp && vm.Alive() {
			t.Errorf("pid %d of the app still runs: the run was not stopped", vm.PID())
		}
	}
}

// TestPerTestDeviceGone: through Debian's adb server, the device goes
// away during the second test (its adbd connection drops, the server no
// longer lists it): exit 4 saying so, the first test written exact.
func TestPerTestDeviceGone(t *testing.T) {
	r, d := oneDevice(t, 30, nil, hangingSuite(30))
	c := r.startTest(t, d, nil)
	waitLogcat(t, c, "started: test002(")
	if err := r.farm.Disconnect(d.Serial()); err != nil {
		t.Fatal(err)
	}
	checkCut(t, d, c, "went away during the run")
}

// TestPerTestBudget: the binary, through Debian's adb server, with a
// tests: budget: the one test over its limit fails the run with exit 3
// naming it; the others pass their rule.
func TestPerTestBudget(t *testing.T) {
	r, d := oneDevice(t, 29, nil, sim.SeededSuite(proofPkg, proofApp, suiteSpec(29, 5)))
	bud := filepath.Join(t.TempDir(), "budget.yaml")
	rules := "tests:\n  - match: 'test004\\(.*\\)'\n    max_allocations: 10\n  - match: '.*'\n    max_allocations: 1000000\n"
	if err := os.WriteFile(bud, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	c := r.startTest(t, d, []string{"--budget", bud})
	c.wait()
	e := c.stderr.String()
	if c.code != 3 || !strings.Contains(e, "on test004(com.example.app1.") || strings.Contains(e, "on test001(") {
		t.Fatalf("want exit 3 naming test004 alone: %s", c.say())
	}
	checkTruth(t, d, c.tests(t))
}
