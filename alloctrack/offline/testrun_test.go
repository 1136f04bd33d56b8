package offline_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// ptest is a test of a run: name, outcome, allocations, bytes, seconds.
func ptest(name string, o pertest.Outcome, n, b uint64, secs float64) pertest.Test {
	i := strings.LastIndexByte(name, '(')
	method, class := name[:i], strings.TrimSuffix(name[i+1:], ")")
	return pertest.Test{Name: name, Class: class, Method: method, Outcome: o, DurationSeconds: secs, Figures: pertest.Figures{Allocations: n, Bytes: b}}
}

// writeRun writes run as dir/tests.json and returns dir.
func writeRun(t *testing.T, run *pertest.Run) string {
	t.Helper()
	dir := t.TempDir()
	data, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, offline.TestsFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readRun(t *testing.T, path string) *offline.TestRun {
	t.Helper()
	r, err := offline.ReadTestRun(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A test run reads from its capture directory and from tests.json
// itself; what is not one says so, and a damaged file names the file,
// the byte or the test.
func TestReadTestRun(t *testing.T) {
	run := &pertest.Run{Package: "com.example.app", Backend: "ddm", Complete: true,
		Tests: []pertest.Test{ptest("a(p.A)", pertest.Passed, 10, 100, 1), ptest("b(p.A)", pertest.Failed, 20, 200, 2)}}
	dir := writeRun(t, run)
	for _, in := range []string{dir, filepath.Join(dir, offline.TestsFile)} {
		r := readRun(t, in)
		if len(r.Tests) != 2 || r.Tests[1].Bytes != 200 || r.Tests[1].Outcome != pertest.Failed || r.Path != filepath.Join(dir, offline.TestsFile) {
			t.Errorf("%s: read %+v", in, r.Run)
		}
	}
	empty := t.TempDir()
	if _, err := offline.ReadTestRun(empty); !errors.Is(err, offline.ErrNotTestRun) {
		t.Errorf("a directory without tests.json: %v", err)
	}
	bad := func(name, content string) string {
		p := filepath.Join(t.TempDir(), name)
		os.WriteFile(p, []byte(content), 0o644)
		return p
	}
	for _, c := range []struct{ path, want string }{
		{bad("x.alloc", "\x00\x00"), "not a test run"},
		{bad("s.json", `{"package": "x"}`), `without "tests"`},
		{bad("tests.json", `{"tests": [{"name": "a(p.A)", "outcome": "passed"},]}`), "at byte 52"},
		{bad("tests.json", `{"tests": [{"name": "a(p.A)", "outcome": "great"}]}`), `tests[0] a(p.A): unknown outcome "great"`},
		{bad("tests.json", `{"tests": [{"outcome": "passed"}]}`), "tests[0] has no name"},
	} {
		if _, err := offline.ReadTestRun(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.path, err, c.want)
		}
	}
}

// A run that did not finish, or holds no test, is short of a whole run;
// partial tests are named with their notes.
func TestTestRunShortfall(t *testing.T) {
	r := &offline.TestRun{Name: "run", Run: &pertest.Run{Complete: false, Problems: []string{"the device went away"}, Tests: []pertest.Test{ptest("a(p.A)", pertest.Unfinished, 1, 1, 1)}}}
	if sf := r.Shortfall(); sf == nil || sf.Empty || !strings.Contains(sf.Why, "did not finish") || !strings.Contains(sf.Why, "the device went away") {
		t.Errorf("unfinished: %v", sf)
	}
	r.Complete, r.Tests = true, nil
	if sf := r.Shortfall(); sf == nil || !sf.Empty {
		t.Errorf("no test: %v", sf)
	}
	p := ptest("b(p.A)", pertest.Crashed, 1, 1, 1)
	p.Partial, p.Notes = true, []string{"its process died"}
	r.Tests = []pertest.Test{ptest("a(p.A)", pertest.Passed, 1, 1, 1), p}
	if sf := r.Shortfall(); sf != nil {
		t.Errorf("a whole run: %v", sf)
	}
	if sf := r.PartialShortfall(); sf == nil || !strings.Contains(sf.Why, "b(p.A) (its process died) is partial") {
		t.Errorf("partial test: %v", sf)
	}
}

// A tests: rule limits each test it matches (by the runner's name or by
// pkg.Class.method, whole), on its own; ignored tests are not measured;
// a partial test's measurements say so; a rule that matches no test says
// so, with what it matches in part.
func TestMeasureTests(t *testing.T) {
	bud, err := offline.ParseBudget("b.yaml", []byte(`
tests:
  - match: 'p\.A\..*'
    max_bytes: 150
  - match: 'big\(p\.B\)'
    max_allocations: 5
    max_bytes_per_second: 10
  - match: 'p\.C\..*'
    max_bytes: 1
  - match: 'big'
    max_bytes: 1
    optional: true
`))
	if err != nil {
		t.Fatal(err)
	}
	crashed := ptest("big(p.B)", pertest.Crashed, 8, 100, 4)
	crashed.Partial, crashed.Notes = true, []string{"its process died"}
	run := &offline.TestRun{Name: "run", Run: &pertest.Run{Complete: true, Tests: []pertest.Test{
		ptest("a(p.A)", pertest.Passed, 10, 100, 1), ptest("b(p.A)", pertest.Failed, 20, 200, 2),
		ptest("c(p.A)", pertest.Ignored, 0, 0, 0), crashed,
	}}}
	var got []string
	for _, m := range bud.MeasureTests(run) {
		s := m.Rule + ": " + m.What + " " + strings.TrimSpace(m.Margin()[strings.LastIndex(m.Margin(), ":")+1:])
		if m.Exceeded() {
			s += " EXCEEDED"
		}
		if m.Partial != nil {
			s += " partial"
		}
		if m.Unmatched != nil {
			s += " unmatched near " + strings.Join(m.Unmatched.Near, ",") + " optional=" + map[bool]string{true: "yes", false: "no"}[m.Unmatched.Optional]
		}
		got = append(got, s)
	}
	want := []string{
		`tests[0] 'p\.A\..*' on a(p.A): bytes 100 bytes, limit 150 (67% of it)`,
		`tests[0] 'p\.A\..*' on b(p.A): bytes 200 bytes, limit 150 (133% of it) EXCEEDED`,
		`tests[1] 'big\(p\.B\)' on big(p.B): bytes per second 25 bytes per second, limit 10 (250% of it) EXCEEDED partial`,
		`tests[1] 'big\(p\.B\)' on big(p.B): allocations 8 allocations, limit 5 (160% of it) EXCEEDED partial`,
		`tests[2] 'p\.C\..*' in run: bytes 0 bytes, limit 1 (0% of it) unmatched near  optional=no`,
		`tests[3] 'big' in run: bytes 0 bytes, limit 1 (0% of it) unmatched near big(p.B) optional=yes`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("measurements:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !bud.HasTestLimits() || bud.HasAllocationLimits() {
		t.Errorf("a budget of tests only: HasTestLimits %v, HasAllocationLimits %v", bud.HasTestLimits(), bud.HasAllocationLimits())
	}
	for _, c := range []struct{ yaml, want string }{
		{"tests:\n  - match: 'a('\n    max_bytes: 1\n", "tests[0] match 'a(' is not a regular expression"},
		{"tests:\n  - match: 'a'\n", "tests[0] sets no limit"},
		{"tests:\n  - match: 'a'\n    max_heap: 1\n", `unknown key "max_heap" in tests[0]`},
	} {
		if _, err := offline.ParseBudget("b.yaml", []byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
}

// diff by test: added, removed, changed and unchanged tests, the largest
// increase in bytes first; a name run twice is compared occurrence by
// occurrence.
func TestCompareTests(t *testing.T) {
	base := &offline.TestRun{Name: "base", Run: &pertest.Run{Complete: true, Tests: []pertest.Test{
		ptest("same(p.A)", pertest.Passed, 10, 100, 1), ptest("grow(p.A)", pertest.Passed, 10, 100, 1),
		ptest("shrink(p.A)", pertest.Passed, 10, 1000, 1), ptest("gone(p.A)", pertest.Passed, 5, 50, 1),
		ptest("flaky(p.A)", pertest.Passed, 1, 10, 1),
	}}}
	nw := &offline.TestRun{Name: "new", Run: &pertest.Run{Complete: true, Tests: []pertest.Test{
		ptest("same(p.A)", pertest.Passed, 10, 100, 1), ptest("grow(p.A)", pertest.Passed, 30, 5000, 2),
		ptest("shrink(p.A)", pertest.Passed, 10, 10, 1), ptest("fresh(p.A)", pertest.Passed, 7, 700, 1),
		ptest("flaky(p.A)", pertest.Failed, 1, 10, 1), ptest("flaky(p.A)", pertest.Passed, 2, 20, 1),
	}}}
	d := offline.CompareTests(base, nw)
	var got []string
	for _, r := range d.Tests {
		got = append(got, r.Name+" "+r.Status)
	}
	want := []string{"grow(p.A) changed", "fresh(p.A) added", "flaky(p.A) #2 added", "flaky(p.A) changed", "same(p.A) unchanged", "gone(p.A) removed", "shrink(p.A) changed"}
	if !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
	if d.Added != 2 || d.Removed != 1 || d.Changed != 3 || d.Unchanged != 1 || d.Tests[0].Change.Bytes != 4900 || d.Tests[5].Change.Bytes != -50 {
		t.Errorf("counts %+v, first change %+v", d, d.Tests[0].Change)
	}
}
