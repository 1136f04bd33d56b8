package pertest_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/internal/realtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// The JUnit XML of a run with every outcome and names XML must escape
// (<, &, quotes) or cannot hold (U+0001, U+FFFE: written as U+FFFD) is
// exactly the golden file.
func TestWriteJUnitGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := pertest.WriteJUnit(&buf, sampleRun()); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "junit.golden.xml")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != string(want) {
		t.Errorf("JUnit XML differs from %s (go test -update rewrites it):\n%s", golden, got)
	}
}

// readJUnit is a Python program that reads a JUnit XML file with
// junitparser (Debian's python3-junitparser) and prints, for each
// testcase, its suite, name, classname, time, result and properties, as
// JSON.
const readJUnit = `
import json, sys
from junitparser import JUnitXml, Properties, Failure, Error, Skipped
out = []
for suite in JUnitXml.fromfile(sys.argv[1]):
    for case in suite:
        kinds = [{Failure: "failure", Error: "error", Skipped: "skipped"}[type(r)] for r in case.result]
        msgs = [r.message or "" for r in case.result]
        props = case.child(Properties)
        out.append({"suite": suite.name, "suite_tests": suite.tests, "suite_failures": suite.failures,
                    "suite_errors": suite.errors, "suite_skipped": suite.skipped,
                    "name": case.name, "classname": case.classname, "time": case.time,
                    "results": kinds, "messages": msgs,
                    "properties": {p.name: p.value for p in props} if props is not None else {}})
json.dump(out, sys.stdout)
`

type junitCase struct {
	Suite                                           string
	SuiteTests, SuiteFailures, SuiteErrors, SuiteSk int `json:"-"`
	Name, Classname                                 string
	Time                                            float64
	Results, Messages                               []string
	Properties                                      map[string]string
}

// junitparser returns Debian's python3 with junitparser, or skips (fails
// under CI).
func junitparser(t *testing.T) string {
	py := realtest.Program(t, "python3", "python3-junitparser", "/usr/bin")
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		py = "/usr/bin/python3" // Debian's, where apt installs the module
	}
	if out, err := exec.Command(py, "-c", "import junitparser").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s cannot import junitparser (install the Debian package python3-junitparser): %v\n%s", py, err, out)
		}
		t.Skipf("%s cannot import junitparser; install the Debian package python3-junitparser to run this test", py)
	}
	return py
}

// A real JUnit XML consumer, junitparser, reads every test of the run
// with its class, method, time, outcome and figures.
func TestJUnitReadByJunitparser(t *testing.T) {
	py := junitparser(t)
	t.Run("ddm", func(t *testing.T) { readBack(t, py, sampleRun()) })
	// heapprofd: estimates, with the samples and the boundary error.
	run := sampleRun()
	run.Backend = "heapprofd"
	for i := range run.Tests {
		tt := &run.Tests[i]
		tt.Estimated, tt.SampledAllocations, tt.SampledBytes, tt.BoundaryErrorSeconds = true, tt.Allocations/2, tt.Bytes/2, 0.25
	}
	t.Run("heapprofd", func(t *testing.T) { readBack(t, py, run) })
}

// readBack writes run as JUnit XML, has junitparser read it, and checks
// every test.
func readBack(t *testing.T, py string, run *pertest.Run) {
	path := filepath.Join(t.TempDir(), "junit.xml")
	var buf bytes.Buffer
	if err := pertest.WriteJUnit(&buf, run); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-c", readJUnit, path).Output()
	if err != nil {
		t.Fatalf("junitparser: %v", err)
	}
	var cases []junitCase
	if err := json.Unmarshal(out, &cases); err != nil {
		t.Fatalf("junitparser's output: %v\n%s", err, out)
	}
	if len(cases) != len(run.Tests) {
		t.Fatalf("junitparser read %d testcases, want %d", len(cases), len(run.Tests))
	}
	byName := map[string]junitCase{}
	for _, c := range cases {
		byName[c.Classname+"#"+c.Name] = c
	}
	for _, test := range run.Tests {
		checkCase(t, byName, test)
	}
}

// checkCase checks what junitparser read of one test.
func checkCase(t *testing.T, byName map[string]junitCase, test pertest.Test) {
	t.Helper()
	// XML 1.0 cannot hold U+0001 or U+FFFE: both read back as U+FFFD.
	method := strings.NewReplacer("\x01", "\ufffd", "\ufffe", "\ufffd").Replace(test.Method)
	c, ok := byName[test.Class+"#"+method]
	if !ok {
		t.Errorf("junitparser did not read %q", test.Name)
		return
	}
	want := map[pertest.Outcome]string{pertest.Failed: "failure", pertest.Errored: "error", pertest.Crashed: "error",
		pertest.Unfinished: "error", pertest.Ignored: "skipped", pertest.AssumptionFailed: "skipped"}[test.Outcome]
	if got := strings.Join(c.Results, ","); got != want {
		t.Errorf("%s: results %q, want %q", test.Name, got, want)
	}
	if c.Suite != test.Class || c.Time != float64(int(test.DurationSeconds*1000+0.5))/1000 {
		t.Errorf("%s: suite %q time %v, want %q %v", test.Name, c.Suite, c.Time, test.Class, test.DurationSeconds)
	}
	p := c.Properties
	if p[pertest.PropAllocations] != strconv.FormatUint(test.Allocations, 10) || p[pertest.PropBytes] != strconv.FormatUint(test.Bytes, 10) ||
		p[pertest.PropPartial] != strconv.FormatBool(test.Partial) || p[pertest.PropEstimated] != strconv.FormatBool(test.Estimated) ||
		p[pertest.PropBoundaryErrorSeconds] != strconv.FormatFloat(test.BoundaryErrorSeconds, 'f', -1, 64) {
		t.Errorf("%s: properties %v", test.Name, p)
	}
	if test.Estimated && (p[pertest.PropSampledAllocations] != strconv.FormatUint(test.SampledAllocations, 10) || p[pertest.PropSampledBytes] != strconv.FormatUint(test.SampledBytes, 10)) {
		t.Errorf("%s: sampled figures %v", test.Name, p)
	}
	if test.Partial && p[pertest.PropNotes] != strings.Join(test.Notes, "; ") {
		t.Errorf("%s: notes %q, want %q", test.Name, p[pertest.PropNotes], test.Notes)
	}
	if len(test.TopClasses) > 0 && p[pertest.PropTopClass] != test.TopClasses[0].Class {
		t.Errorf("%s: top class %q, want %q", test.Name, p[pertest.PropTopClass], test.TopClasses[0].Class)
	}
	if (test.Outcome == pertest.Crashed || test.Outcome == pertest.Unfinished) && !strings.Contains(c.Messages[0], test.Notes[0]) {
		t.Errorf("%s: error message %q does not hold the note %q", test.Name, c.Messages[0], test.Notes[0])
	}
}
