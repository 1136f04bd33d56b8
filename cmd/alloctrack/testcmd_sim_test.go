package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

const (
	suitePkg  = "com.example.app1.test"
	suiteApp  = "com.example.app1"
	suiteComp = suitePkg + "/" + sim.AndroidJUnitRunner
)

// suiteFarm is one simulated device of api with a seeded suite installed,
// served through backend; it returns the farm, the adb address and the
// device's serial at that server.
func suiteFarm(t *testing.T, api int, backend captureBackend, spec sim.SeedSpec) (*sim.Farm, string, string) {
	t.Helper()
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{api}, Workload: quietCaptureWorkload()})
	if err := f.Devices()[0].InstallSuite(sim.SeededSuite(suitePkg, suiteApp, spec)); err != nil {
		t.Fatal(err)
	}
	addr, serials := backend.serve(t, f)
	return f, addr, serials[f.Devices()[0].Serial()]
}

// testRunOf runs `alloctrack test` in-process.
func testRunOf(args ...string) *captureRun {
	c := &captureRun{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.code = run(append([]string{"test"}, args...), &c.stdout, &c.stderr)
	}()
	return c
}

func readTests(t *testing.T, dir string) *pertest.Run {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "tests.json"))
	if err != nil {
		t.Fatal(err)
	}
	var run pertest.Run
	if err := json.Unmarshal(b, &run); err != nil {
		t.Fatal(err)
	}
	return &run
}

func readSummary(t *testing.T, dir string) offline.Summary {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s offline.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkExact checks every test of run against the device's truth of its
// last run: the same tests, in order, each with exactly what its body
// allocated, none partial; between tests what the VM reported of the
// rest; and the run's total is the tests plus between.
func checkExact(t *testing.T, d *sim.Device, run *pertest.Run) {
	t.Helper()
	truth, ok := d.RunTruth(-1)
	if !ok {
		t.Fatal("no run on the device")
	}
	if len(run.Tests) != len(truth.Tests) {
		t.Fatalf("%d tests recorded, the device ran %d (problems %q)", len(run.Tests), len(truth.Tests), run.Problems)
	}
	if b := truth.BetweenReported.Total; run.Between.Allocations != b.Allocations || run.Between.Bytes != b.Bytes {
		t.Errorf("between tests %d/%d, the VM reported %d/%d", run.Between.Allocations, run.Between.Bytes, b.Allocations, b.Bytes)
	}
	var sum pertest.Figures
	for i, tt := range truth.Tests {
		got := run.Tests[i]
		want := tt.Allocated.Total
		if got.Name != tt.Name || got.Outcome != tt.Outcome || got.Partial || got.Allocations != want.Allocations || got.Bytes != want.Bytes {
			t.Errorf("test %d: %s %s partial %v %d allocations %d bytes %q; truth %s %s %d %d",
				i, got.Name, got.Outcome, got.Partial, got.Allocations, got.Bytes, got.Notes, tt.Name, tt.Outcome, want.Allocations, want.Bytes)
		}
		sum.Allocations += got.Allocations
		sum.Bytes += got.Bytes
	}
	if sum.Allocations+run.Between.Allocations != run.Total.Allocations || sum.Bytes+run.Between.Bytes != run.Total.Bytes {
		t.Errorf("total %d/%d is not the tests' %d/%d plus between %d/%d", run.Total.Allocations, run.Total.Bytes,
			sum.Allocations, sum.Bytes, run.Between.Allocations, run.Between.Bytes)
	}
}

// checkJUnitAndProfiles checks junit.xml (one testcase per test, by the
// runner's names) and tests/NNN.pb.gz (one profile per test, holding its
// allocations).
func checkJUnitAndProfiles(t *testing.T, out string, run *pertest.Run) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "junit.xml"))
	if err != nil {
		t.Fatal(err)
	}
	var suites struct {
		Suites []struct {
			Cases []struct {
				Name      string `xml:"name,attr"`
				ClassName string `xml:"classname,attr"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &suites); err != nil {
		t.Fatalf("junit.xml: %v", err)
	}
	n := 0
	for _, s := range suites.Suites {
		n += len(s.Cases)
	}
	if n != len(run.Tests) {
		t.Errorf("junit.xml has %d testcases, the run %d tests", n, len(run.Tests))
	}
	for i, tt := range run.Tests {
		f, err := os.Open(filepath.Join(out, "tests", pertest.ProfileName(i)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", tt.Name, err)
		}
		var allocs int64
		for _, s := range p.Sample {
			allocs += s.Value[0]
		}
		if uint64(allocs) != tt.Allocations {
			t.Errorf("%s: profile holds %d allocations, the test %d", tt.Name, allocs, tt.Allocations)
		}
	}
}

// noTracking checks that no process of the device is left tracking.
func noTracking(t *testing.T, d *sim.Device) {
	t.Helper()
	for _, vm := range d.VMs() {
		if vm.Alive() && vm.Tracking() {
			t.Errorf("pid %d (%s) left tracking", vm.PID(), vm.ProcessName())
		}
	}
}

// TestTestCommandExactPerTest: `alloctrack test` runs a suite through an
// adb server and records every test exactly, on Android 4.4 (shell: with
// its PTY, logcat without -T), 6.0, 10 and 11; it writes the run's files
// and leaves nothing tracking.
func TestTestCommandExactPerTest(t *testing.T) {
	for _, tc := range []struct {
		api     int
		backend captureBackend
	}{{19, captureBackends[1]}, {23, captureBackends[0]}, {29, captureBackends[1]}, {30, captureBackends[0]}} {
		t.Run(fmt.Sprintf("API %d %s", tc.api, tc.backend.name), func(t *testing.T) {
			f, addr, serial := suiteFarm(t, tc.api, tc.backend, sim.SeedSpec{Tests: 12, Seed: uint64(tc.api), OddNames: true})
			out := filepath.Join(t.TempDir(), "run")
			c := testRunOf("--adb.address", addr, "--serial", serial, "--out", out, "--pprof", "--",
				"am", "instrument", "-w", "-r", "-e", "delay_msec", "100", suiteComp)
			c.wait(t, testwait.Bound)
			if c.code != exitOK {
				t.Fatalf("%s", c.say())
			}
			run := readTests(t, out)
			checkJUnitAndProfiles(t, out, run)
			checkExact(t, f.Devices()[0], run)
			if !run.Complete || len(run.Problems) > 0 {
				t.Errorf("complete %v, problems %q", run.Complete, run.Problems)
			}
			s := readSummary(t, out)
			if s.Tests == nil || s.Tests.Total != 12 || s.Tests.Passed != 12 || s.Tests.File != "tests.json" || s.Package != suiteApp {
				t.Errorf("summary's tests %+v, package %q", s.Tests, s.Package)
			}
			for name, want := range map[string]string{"instrument.txt": "INSTRUMENTATION_CODE: -1", "logcat.txt": "started: test001("} {
				b, err := os.ReadFile(filepath.Join(out, name))
				if err != nil || !strings.Contains(string(b), want) {
					t.Errorf("%s: %v, does not hold %q", name, err, want)
				}
			}
			noTracking(t, f.Devices()[0])
		})
	}
}

// TestTestCommandFailedTests: a failed test is exit status 6, naming it;
// the figures are written all the same.
func TestTestCommandFailedTests(t *testing.T) {
	f, addr, serial := suiteFarm(t, 29, captureBackends[1], sim.SeedSpec{Tests: 6, Seed: 3, FailEvery: 4})
	out := filepath.Join(t.TempDir(), "run")
	c := testRunOf("--adb.address", addr, "--serial", serial, "--out", out, "--",
		"am", "instrument", "-w", "-r", "-e", "delay_msec", "100", suiteComp)
	c.wait(t, testwait.Bound)
	if c.code != exitTestsFailed || !strings.Contains(c.stderr.String(), "test004(") {
		t.Fatalf("want exit 6 naming test004: %s", c.say())
	}
	checkExact(t, f.Devices()[0], readTests(t, out))
}

// TestTestCommandOrchestrator: with Android Test Orchestrator each test
// runs in a process of its own; every one is tracked, every test exact.
func TestTestCommandOrchestrator(t *testing.T) {
	f, addr, serial := suiteFarm(t, 28, captureBackends[1], sim.SeedSpec{Tests: 5, Seed: 9})
	d := f.Devices()[0]
	if err := d.InstallSuite(sim.OrchestratorSuite()); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "run")
	c := testRunOf("--adb.address", addr, "--serial", serial, "--out", out, "--",
		"am", "instrument", "-w", "-r", "-e", "delay_msec", "100", "-e", "targetInstrumentation", suiteComp,
		sim.OrchestratorPackage+"/"+sim.OrchestratorRunner)
	c.wait(t, testwait.Bound)
	if c.code != exitOK {
		t.Fatalf("%s", c.say())
	}
	truth, _ := d.RunTruth(-1)
	if len(truth.PIDs) != 6 || !strings.Contains(c.stdout.String(), "pids "+joinInts(truth.PIDs)) {
		t.Errorf("stdout %q; the run's pids %v (the listing process first)", c.stdout.String(), truth.PIDs)
	}
	checkExact(t, d, readTests(t, out))
}

// TestTestCommandMissingInstrumentation: am cannot start the run (sheet
// 14): exit 6, saying what am and pm said.
func TestTestCommandMissingInstrumentation(t *testing.T) {
	_, addr, serial := suiteFarm(t, 30, captureBackends[1], sim.SeedSpec{Tests: 2})
	out := filepath.Join(t.TempDir(), "run")
	c := testRunOf("--adb.address", addr, "--serial", serial, "--out", out, "--",
		"am", "instrument", "-w", "-r", "com.example.nope.test/"+sim.AndroidJUnitRunner)
	c.wait(t, testwait.Bound)
	e := c.stderr.String()
	if c.code != exitTestsFailed || !strings.Contains(e, "am could not start the run: Unable to find instrumentation info") ||
		!strings.Contains(e, "has no com.example.nope.test/") || !strings.Contains(e, "installed: "+suiteComp) {
		t.Fatalf("want exit 6 with am's and pm's word: %s", c.say())
	}
	if _, err := os.Stat(filepath.Join(out, "tests.json")); err != nil {
		t.Error(err)
	}
}

// TestTestCommandTimeout: a run that never finishes is cut at --timeout:
// exit 4, what was collected written, tracking off, the app force-stopped.
func TestTestCommandTimeout(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{29}, Workload: quietCaptureWorkload()})
	d := f.Devices()[0]
	s := sim.SeededSuite(suitePkg, suiteApp, sim.SeedSpec{Tests: 3, Seed: 5})
	s.Tests[1].Duration = time.Hour // hangs
	if err := d.InstallSuite(s); err != nil {
		t.Fatal(err)
	}
	addr, serials := captureBackends[1].serve(t, f)
	out := filepath.Join(t.TempDir(), "run")
	c := testRunOf("--adb.address", addr, "--serial", serials[d.Serial()], "--out", out, "--timeout", "3s", "--",
		"am", "instrument", "-w", "-r", "-e", "delay_msec", "100", suiteComp)
	c.wait(t, testwait.Bound)
	if c.code != exitInsufficient || !strings.Contains(c.stderr.String(), "--timeout 3s") {
		t.Fatalf("want exit 4 after --timeout: %s", c.say())
	}
	run := readTests(t, out)
	if len(run.Tests) < 2 || run.Tests[0].Outcome != pertest.Passed || run.Tests[1].Outcome != pertest.Unfinished || run.Complete {
		t.Errorf("tests %+v complete %v", run.Tests, run.Complete)
	}
	truth, _ := d.RunTruth(-1)
	if got, want := run.Tests[0].Allocations, truth.Tests[0].Allocated.Total.Allocations; got != want {
		t.Errorf("first test: %d allocations, truth %d", got, want)
	}
	noTracking(t, d)
	for _, vm := range d.VMs() {
		if vm.ProcessName() == suiteApp && vm.Alive() {
			t.Errorf("pid %d of the app still runs: the run was not stopped", vm.PID())
		}
	}
}

// TestTestCommandDeviceGone: the device leaves mid-run: exit 4 saying so,
// the tests before it written.
func TestTestCommandDeviceGone(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{30}, Workload: quietCaptureWorkload()})
	d := f.Devices()[0]
	s := sim.SeededSuite(suitePkg, suiteApp, sim.SeedSpec{Tests: 3, Seed: 6})
	s.Tests[1].Duration = time.Hour
	if err := d.InstallSuite(s); err != nil {
		t.Fatal(err)
	}
	addr, serials := captureBackends[1].serve(t, f)
	out := filepath.Join(t.TempDir(), "run")
	c := testRunOf("--adb.address", addr, "--serial", serials[d.Serial()], "--out", out, "--",
		"am", "instrument", "-w", "-r", "-e", "delay_msec", "100", suiteComp)
	testwait.Until(t, 10*time.Millisecond, "the second test running", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(out, "logcat.txt"))
		return strings.Contains(string(b), "started: test002("), string(b)
	})
	if err := f.Disconnect(d.Serial()); err != nil {
		t.Fatal(err)
	}
	c.wait(t, testwait.Bound)
	if c.code != exitInsufficient || !strings.Contains(c.stderr.String(), "went away during the run") {
		t.Fatalf("want exit 4, the device gone: %s", c.say())
	}
	run := readTests(t, out)
	if len(run.Tests) < 1 || run.Tests[0].Outcome != pertest.Passed {
		t.Errorf("tests %+v", run.Tests)
	}
}

// TestCaptureTests: capture --tests records a run someone else starts,
// from logcat and the app's processes alone, every test exact.
func TestCaptureTests(t *testing.T) {
	f, addr, serial := suiteFarm(t, 29, captureBackends[1], sim.SeedSpec{Tests: 6, Seed: 4})
	d := f.Devices()[0]
	out := filepath.Join(t.TempDir(), "run")
	c := startCapture("--adb.address", addr, "--serial", serial, "--out", out, "--tests", "--package", suiteApp,
		"--duration", strconv.Itoa(int(testwait.Bound.Seconds()))+"s", "--settle", "1s")
	testwait.Until(t, 10*time.Millisecond, "logcat followed", func() (bool, string) {
		_, err := os.Stat(filepath.Join(out, "logcat.txt"))
		return err == nil, fmt.Sprint(err)
	})
	am, err := d.OpenService("shell,v2,raw:am instrument -w -r -e delay_msec 100 " + suiteComp)
	if err != nil {
		t.Fatal(err)
	}
	defer am.Close()
	c.wait(t, testwait.Bound)
	if c.code != exitOK {
		t.Fatalf("%s", c.say())
	}
	checkExact(t, d, readTests(t, out))
	if _, err := os.Stat(filepath.Join(out, "instrument.txt")); err == nil {
		t.Error("instrument.txt written for a run alloctrack did not start")
	}
}

// TestTestCommandTestBudget: a tests: budget judges each test: one over
// its limit fails the run with exit 3 naming it.
func TestTestCommandTestBudget(t *testing.T) {
	_, addr, serial := suiteFarm(t, 30, captureBackends[1], sim.SeedSpec{Tests: 4, Seed: 2})
	dir := t.TempDir()
	bud := filepath.Join(dir, "budget.yaml")
	if err := os.WriteFile(bud, []byte("tests:\n  - match: 'test003\\(.*\\)'\n    max_bytes: 100\n  - match: '.*'\n    max_bytes: 100000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := testRunOf("--adb.address", addr, "--serial", serial, "--out", filepath.Join(dir, "run"), "--budget", bud, "--",
		"am", "instrument", "-w", "-r", "-e", "delay_msec", "100", suiteComp)
	c.wait(t, testwait.Bound)
	if c.code != exitBudget || !strings.Contains(c.stderr.String(), "on test003(com.example.app1.") {
		t.Fatalf("want exit 3 naming test003: %s", c.say())
	}
}
