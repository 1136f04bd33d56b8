package exporter_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/exporter"
)

// testsFixture: an app running a test after two ended, one that ran
// tests and runs none now, and one that never ran any.
func testsFixture(name string) alloctrack.Snapshot {
	return alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{
		{AppStatus: alloctrack.AppStatus{Serial: "s1", Package: "com.example.a", State: alloctrack.StateTracking},
			Tests: alloctrack.AppTests{Seen: true, Allocations: 1200, Bytes: 64000,
				Outcomes: map[string]uint64{"passed": 1, "failed": 1},
				Recent:   []alloctrack.TestSummary{{Name: "a(x.T)", Outcome: "passed"}, {Name: "b(x.T)", Outcome: "failed"}},
				Current:  &alloctrack.TestSummary{Name: name, Class: "x.T", Outcome: "unfinished"}}},
		{AppStatus: alloctrack.AppStatus{Serial: "s1", Package: "com.example.b", State: alloctrack.StateExited},
			Tests: alloctrack.AppTests{Seen: true, Outcomes: map[string]uint64{"crashed": 1}}},
		{AppStatus: alloctrack.AppStatus{Serial: "s1", Package: "com.example.c", State: alloctrack.StateTracking}},
	}}
}

// The test families: one info series for the running test, counters by
// outcome and of what tests allocated, none with a test name, none for
// an app that never ran a test.
func TestTestFamilies(t *testing.T) {
	c := exporter.NewCollector(fixedSource{testsFixture("c(x.T)")})
	want := `
# HELP alloctrack_test_info The test an app runs now, 1 while it runs (one series per app at most; none between tests): test is the name as the runner gives it, method(class), cut to 256 bytes.
# TYPE alloctrack_test_info gauge
alloctrack_test_info{class="x.T",package="com.example.a",serial="s1",test="c(x.T)"} 1
# HELP alloctrack_test_allocations_total Allocations counted inside the app's tests, between each test's started and finished (the running test's so far included); DDM apps only.
# TYPE alloctrack_test_allocations_total counter
alloctrack_test_allocations_total{package="com.example.a",serial="s1"} 1200
alloctrack_test_allocations_total{package="com.example.b",serial="s1"} 0
# HELP alloctrack_test_allocated_bytes_total Bytes of the allocations counted inside the app's tests; see alloctrack_test_allocations_total.
# TYPE alloctrack_test_allocated_bytes_total counter
alloctrack_test_allocated_bytes_total{package="com.example.a",serial="s1"} 64000
alloctrack_test_allocated_bytes_total{package="com.example.b",serial="s1"} 0
`
	want += "# HELP alloctrack_tests_total Tests of the app's instrumentation runs that ended, by outcome (passed, failed, error, ignored, assumption_failed, crashed, unfinished).\n# TYPE alloctrack_tests_total counter\n"
	for _, app := range []string{"a", "b"} {
		for _, o := range exporter.TestOutcomes {
			n := map[string]map[string]int{"a": {"passed": 1, "failed": 1}, "b": {"crashed": 1}}[app][string(o)]
			want += `alloctrack_tests_total{outcome="` + string(o) + `",package="com.example.` + app + `",serial="s1"} ` + string(rune('0'+n)) + "\n"
		}
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "alloctrack_test_info", "alloctrack_tests_total",
		"alloctrack_test_allocations_total", "alloctrack_test_allocated_bytes_total"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// A test name with any bytes (invalid UTF-8, 1 MB) is a valid label
// value of at most 256 bytes, and the scrape goes on.
func TestTestInfoHostileName(t *testing.T) {
	for _, name := range []string{"t\xff\xfe(x.T)", strings.Repeat("é", 1<<19), "a\"b\\c\n}{(x.T)"} {
		c := exporter.NewCollector(fixedSource{testsFixture(name)})
		if n := testutil.CollectAndCount(c, "alloctrack_test_info"); n != 1 {
			t.Errorf("%d info series for a name of %d bytes", n, len(name))
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("gathering with a name of %d bytes: %v", len(name), err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "alloctrack_test_info" {
				continue
			}
			for _, l := range mf.GetMetric()[0].GetLabel() {
				if l.GetName() == "test" && (len(l.GetValue()) > 256 || !strings.HasPrefix(name, l.GetValue()) && !strings.Contains(l.GetValue(), "\uFFFD")) {
					t.Errorf("test label %q for name %q", l.GetValue(), name[:min(len(name), 40)])
				}
			}
		}
	}
}

// A heapprofd app's tests count into the estimated families, never the
// exact ones (their figures are estimates).
func TestTestFamiliesHeapprofd(t *testing.T) {
	snap := alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{
		{AppStatus: alloctrack.AppStatus{Serial: "s1", Package: "com.example.h", State: alloctrack.StateTracking, Backend: alloctrack.BackendHeapprofd},
			Tests: alloctrack.AppTests{Seen: true, Allocations: 900, Bytes: 40960, Outcomes: map[string]uint64{"passed": 2}}},
	}}
	c := exporter.NewCollector(fixedSource{snap})
	want := `
# HELP alloctrack_test_estimated_allocations_total Estimate: allocations inside the tests of a heapprofd app (Android 12+), its dumps split among its tests by device time (each test's boundary error on its page); not exact.
# TYPE alloctrack_test_estimated_allocations_total counter
alloctrack_test_estimated_allocations_total{package="com.example.h",serial="s1"} 900
# HELP alloctrack_test_estimated_allocated_bytes_total Estimate: bytes allocated inside the tests of a heapprofd app; see alloctrack_test_estimated_allocations_total.
# TYPE alloctrack_test_estimated_allocated_bytes_total counter
alloctrack_test_estimated_allocated_bytes_total{package="com.example.h",serial="s1"} 40960
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "alloctrack_test_allocations_total", "alloctrack_test_allocated_bytes_total",
		"alloctrack_test_estimated_allocations_total", "alloctrack_test_estimated_allocated_bytes_total"); err != nil {
		t.Fatal(err)
	}
}
