package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// Runner classes and versions of AndroidX Test (sheet 8).
const (
	AndroidJUnitRunner = "androidx.test.runner.AndroidJUnitRunner"
	// SupportJUnitRunner is the runner of the older support library,
	// whose listeners live in android.support.test.internal.runner.listener.
	SupportJUnitRunner  = "android.support.test.runner.AndroidJUnitRunner"
	OrchestratorPackage = "androidx.test.orchestrator"
	OrchestratorRunner  = "androidx.test.orchestrator.AndroidTestOrchestrator"
)

// Suite is an installed test APK: its instrumentation and its tests.
type Suite struct {
	TestPackage string // e.g. com.example.test
	Runner      string // the instrumentation class, e.g. AndroidJUnitRunner
	// RunnerVersion is androidx.test:runner's version, "1.5" or older
	// (three E entries per exception) or "1.6" and newer (two); "" is 1.6.
	RunnerVersion string
	Target        string // the package under test, whose process runs the tests
	Tests         []SuiteTest
	// StartDelay is how long the fresh process takes from its start to
	// the runner's run started (Application.onCreate, the runner's set-up):
	// 200 ms when zero, none when negative.
	StartDelay time.Duration
	// Orchestrator makes this the Android Test Orchestrator's APK (see
	// OrchestratorSuite): it runs another instrumentation's tests, one
	// process per test (sheet 15).
	Orchestrator bool
}

// SuiteTest is one test of a suite and what its body does.
type SuiteTest struct {
	Class  string // fully qualified, e.g. com.example.CalcTest
	Method string // any characters, e.g. "add[0: f(1), \"x\"]"
	// Outcome: pertest.Passed (or ""), Failed, Errored, Ignored,
	// AssumptionFailed or Crashed.
	Outcome pertest.Outcome
	// Allocs is what the body allocates, spread evenly over Steps steps
	// across Duration (an ignored test allocates nothing; a crashing one
	// the first half of its steps).
	Allocs   []TestAlloc
	Duration time.Duration
	Steps    int // 4 when zero
	// Trace is the failure's stack trace ("\n"-terminated); a default
	// one naming the test is made when empty.
	Trace string
	// LoseStarted, LoseFinished: logcat loses the test's started: or
	// finished: line, as one pruned from a full buffer before any reader
	// read it (the listener still builds it; am's statuses are printed as
	// usual). A flood of another app does the same at random
	// (DeviceConfig.LogBufferSize); these lose one line for certain.
	LoseStarted, LoseFinished bool
}

// TestAlloc is Count allocations of Size bytes each, of class Class (a
// descriptor such as "[B" or "Lcom/example/Data;"), at the test's own
// site Line in the test method.
type TestAlloc struct {
	Class string
	Size  uint32
	Count int
	Line  int16
}

// Name is the test as the runner names it: method(class).
func (t SuiteTest) Name() string { return t.Method + "(" + t.Class + ")" }

// Amount is what the test's body allocates when it runs to its end.
func (t SuiteTest) Amount() alloctrack.Count {
	var c alloctrack.Count
	for _, a := range t.Allocs {
		c.Allocations += uint64(a.Count)
		c.Bytes += uint64(a.Count) * uint64(a.Size)
	}
	return c
}

// Component is the instrumentation's component, TESTPKG/RUNNER.
func (s *Suite) Component() string { return s.TestPackage + "/" + s.Runner }

func (s *Suite) oldExceptions() bool {
	return s.RunnerVersion != "" && versionLess(s.RunnerVersion, "1.6")
}

// versionLess compares dotted versions numerically.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			fmt.Sscanf(as[i], "%d", &x)
		}
		if i < len(bs) {
			fmt.Sscanf(bs[i], "%d", &y)
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// OrchestratorSuite is the Android Test Orchestrator's APK.
func OrchestratorSuite() Suite {
	return Suite{TestPackage: OrchestratorPackage, Runner: OrchestratorRunner, Target: OrchestratorPackage, Orchestrator: true}
}

// SeedSpec describes a seeded suite (SeededSuite).
type SeedSpec struct {
	Tests int
	Seed  uint64
	// Classes is how many test classes the tests are spread over (5).
	Classes int
	// Allocations is each test's mean number of allocations (200), of
	// objects of about ObjectBytes each (64).
	Allocations int
	ObjectBytes uint32
	Duration    time.Duration // each test's (40 ms)
	Steps       int           // 4
	// FailEvery, IgnoreEvery, AssumeEvery and ErrorEvery make every n-th
	// test (from 1) fail, be ignored, fail an assumption, or error (0:
	// none); CrashAt crashes test n (from 1; 0: none).
	FailEvery, IgnoreEvery, AssumeEvery, ErrorEvery, CrashAt int
	// OddNames gives every third test a parameterized name with
	// parentheses, brackets, quotes and commas.
	OddNames bool
}

// SeededSuite builds a suite of spec.Tests tests with known, seeded
// amounts, for the test package testPkg, runner AndroidJUnitRunner
// version 1.6, and target package target.
func SeededSuite(testPkg, target string, spec SeedSpec) Suite {
	if spec.Classes <= 0 {
		spec.Classes = 5
	}
	if spec.Allocations <= 0 {
		spec.Allocations = 200
	}
	if spec.ObjectBytes == 0 {
		spec.ObjectBytes = 64
	}
	if spec.Duration == 0 {
		spec.Duration = 40 * time.Millisecond
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 0x7375697465))
	s := Suite{TestPackage: testPkg, Runner: AndroidJUnitRunner, RunnerVersion: "1.6", Target: target}
	classes := []string{"[B", "Ljava/util/ArrayList;", "[I", "L" + strings.ReplaceAll(target, ".", "/") + "/Data;", "Ljava/lang/String;"}
	for i := range spec.Tests {
		n := i + 1
		t := SuiteTest{
			Class:    fmt.Sprintf("%s.Suite%dTest", target, i*spec.Classes/max(spec.Tests, 1)),
			Method:   fmt.Sprintf("test%03d", n),
			Duration: spec.Duration,
			Steps:    spec.Steps,
		}
		if spec.OddNames && n%3 == 0 {
			t.Method = fmt.Sprintf("param%03d[%d: f(x), \"y,z\" (w)]", n, n)
		}
		left := spec.Allocations/2 + rng.IntN(spec.Allocations+1)
		for k := 0; left > 0; k++ {
			c := left
			if k < 2 {
				c = max(1, left*(1+rng.IntN(3))/4)
			}
			left -= c
			size := (spec.ObjectBytes/2 + uint32(rng.IntN(int(spec.ObjectBytes)+1)) + 7) &^ 7
			t.Allocs = append(t.Allocs, TestAlloc{Class: classes[rng.IntN(len(classes))], Size: max(size, 16), Count: c, Line: int16(20 + 3*k)})
		}
		t.Outcome = seededOutcome(spec, n)
		s.Tests = append(s.Tests, t)
	}
	return s
}

func seededOutcome(spec SeedSpec, n int) pertest.Outcome {
	every := func(e int) bool { return e > 0 && n%e == 0 }
	switch {
	case n == spec.CrashAt:
		return pertest.Crashed
	case every(spec.IgnoreEvery):
		return pertest.Ignored
	case every(spec.FailEvery):
		return pertest.Failed
	case every(spec.ErrorEvery):
		return pertest.Errored
	case every(spec.AssumeEvery):
		return pertest.AssumptionFailed
	}
	return pertest.Passed
}

// deviceTests holds a device's installed suites and its runs.
type deviceTests struct {
	mu      sync.Mutex
	suites  map[string]*Suite // by component
	runs    []*TestRun
	nextPID int
	// onStart, when set (by tests), sees each fresh test process before
	// it is listed: a host that is on it at once.
	onStart func(*VM)
	// onStop, when set (by tests), sees each test process just before
	// it is stopped.
	onStop func(*VM)
}

// ErrBadSuite is returned for a suite that cannot be installed.
var ErrBadSuite = errors.New("sim: bad suite")

// InstallSuite installs a test APK on the device (replacing one with the
// same component), so that `pm list instrumentation` lists it and `am
// instrument` runs it.
func (d *Device) InstallSuite(s Suite) error {
	if s.TestPackage == "" || s.Runner == "" || s.Target == "" {
		return fmt.Errorf("%w: test package, runner and target are required", ErrBadSuite)
	}
	for i, t := range s.Tests {
		if t.Class == "" || t.Method == "" {
			return fmt.Errorf("%w: test %d has no class or method", ErrBadSuite, i+1)
		}
		switch t.Outcome {
		case "", pertest.Passed, pertest.Failed, pertest.Errored, pertest.Ignored, pertest.AssumptionFailed, pertest.Crashed:
		default:
			return fmt.Errorf("%w: test %s: outcome %q", ErrBadSuite, t.Name(), t.Outcome)
		}
	}
	s.Tests = slices.Clone(s.Tests)
	d.tests.mu.Lock()
	defer d.tests.mu.Unlock()
	if d.tests.suites == nil {
		d.tests.suites = map[string]*Suite{}
	}
	d.tests.suites[s.Component()] = &s
	return nil
}

// Suites lists the installed suites by component.
func (d *Device) Suites() []Suite {
	d.tests.mu.Lock()
	defer d.tests.mu.Unlock()
	var out []Suite
	for _, s := range d.tests.suites {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Suite) int { return strings.Compare(a.Component(), b.Component()) })
	return out
}

// suite returns the suite of a component, given as PKG/CLASS or PKG/.CLASS.
func (d *Device) suite(component string) *Suite {
	pkg, cls, ok := strings.Cut(component, "/")
	if !ok {
		return nil
	}
	if strings.HasPrefix(cls, ".") {
		cls = pkg + cls
	}
	d.tests.mu.Lock()
	defer d.tests.mu.Unlock()
	return d.tests.suites[pkg+"/"+cls]
}

// pmCommand is pm as far as test runs need it: list instrumentation
// [TARGET], one line per instrumentation.
func (d *Device) pmCommand(argv []string) (out, errOut []byte, code int) {
	if len(argv) < 3 || argv[1] != "list" || argv[2] != "instrumentation" || len(argv) > 4 {
		return nil, []byte("sim: pm: only pm list instrumentation [TARGET-PACKAGE]\n"), 1
	}
	var b strings.Builder
	for _, s := range d.Suites() {
		if len(argv) == 4 && s.Target != argv[3] {
			continue
		}
		fmt.Fprintf(&b, "instrumentation:%s (target=%s)\n", s.Component(), s.Target)
	}
	return []byte(b.String()), nil, 0
}

// testSiteFrames are the frames below a test method: JUnit's reflective
// call and the runner.
var testSiteFrames = []allocreport.FrameName{
	{Class: "Ljava/lang/reflect/Method;", Method: "invoke", Line: -2},
	{Class: "Lorg/junit/runners/model/FrameworkMethod$1;", Method: "runReflectiveCall", File: "FrameworkMethod.java", Line: 59},
	{Class: "Lorg/junit/internal/runners/model/ReflectiveCallable;", Method: "run", File: "ReflectiveCallable.java", Line: 12},
	{Class: "Lorg/junit/runners/model/FrameworkMethod;", Method: "invokeExplosively", File: "FrameworkMethod.java", Line: 56},
	{Class: "Lorg/junit/internal/runners/statements/InvokeMethod;", Method: "evaluate", File: "InvokeMethod.java", Line: 17},
	{Class: "Lorg/junit/runners/ParentRunner$3;", Method: "evaluate", File: "ParentRunner.java", Line: 306},
	{Class: "Lorg/junit/runners/BlockJUnit4ClassRunner$1;", Method: "evaluate", File: "BlockJUnit4ClassRunner.java", Line: 100},
	{Class: "Lorg/junit/runners/ParentRunner;", Method: "runLeaf", File: "ParentRunner.java", Line: 366},
	{Class: "Lorg/junit/runners/BlockJUnit4ClassRunner;", Method: "runChild", File: "BlockJUnit4ClassRunner.java", Line: 103},
}

// testSite is the named site of a test's allocation a.
func testSite(t *SuiteTest, a TestAlloc) NamedSite {
	cls := "L" + strings.ReplaceAll(t.Class, ".", "/") + ";"
	method, _, _ := strings.Cut(t.Method, "[") // a parameterized test's Java method
	file := t.Class[strings.LastIndexByte(t.Class, '.')+1:]
	if i := strings.IndexByte(file, '$'); i >= 0 {
		file = file[:i]
	}
	top := allocreport.FrameName{Class: cls, Method: method, File: file + ".java", Line: a.Line}
	return NamedSite{Class: a.Class, Frames: append([]allocreport.FrameName{top}, testSiteFrames...)}
}
