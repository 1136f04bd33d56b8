package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// ptest is a test of a run: its name, outcome, allocations, bytes and
// seconds.
func ptest(name string, o pertest.Outcome, n, b uint64, secs float64) pertest.Test {
	i := strings.LastIndexByte(name, '(')
	method, class := name[:i], strings.TrimSuffix(name[i+1:], ")")
	return pertest.Test{Name: name, Class: class, Method: method, Outcome: o, DurationSeconds: secs, Figures: pertest.Figures{Allocations: n, Bytes: b}}
}

// testRun is a complete DDM run of four tests, one of them failed.
func testRun() *pertest.Run {
	r := &pertest.Run{Serial: "emulator-5554", API: 29, Package: "com.example.app", Backend: "ddm", Complete: true,
		Boundary: "exact (DDM): the runner's own allocations mark each test",
		Tests: []pertest.Test{
			ptest("testOpen(com.example.MainTest)", pertest.Passed, 120, 4800, 1.25),
			ptest("testSave(com.example.MainTest)", pertest.Failed, 10, 64000, 0.5),
			ptest("testLater(com.example.MainTest)", pertest.Ignored, 0, 0, 0),
			ptest("test[0: a(b)](com.example.ParamTest)", pertest.Passed, 7, 700, 2),
		},
		Between: pertest.Figures{Allocations: 1000, Bytes: 20000},
	}
	for _, t := range r.Tests {
		r.Total.Allocations += t.Allocations
		r.Total.Bytes += t.Bytes
	}
	r.Total.Allocations += r.Between.Allocations
	r.Total.Bytes += r.Between.Bytes
	return r
}

// writeTestRun writes run as DIR/tests.json and returns DIR.
func writeTestRun(t *testing.T, run *pertest.Run) string {
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

// report --by test lists each test, the most bytes first, with its
// outcome, figures, duration and notes, then what fell between tests and
// the total; tests.json itself reads the same; json has the tests in the
// same order.
func TestReportByTest(t *testing.T) {
	run := testRun()
	crash := ptest("testCrash(com.example.MainTest)", pertest.Crashed, 50, 5000, 0.75)
	crash.Partial, crash.Notes = true, []string{"its process died before the test's end was reported"}
	run.Tests = append(run.Tests, crash)
	dir := writeTestRun(t, run)
	out, errOut, code := runCmd(t, "report", "--by", "test", dir)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "report-by-test.txt", strings.ReplaceAll(out, dir, "DIR"))
	file := filepath.Join(dir, offline.TestsFile)
	if out2, _, code := runCmd(t, "report", "--by", "test", file); code != exitOK || strings.ReplaceAll(out2, file, dir) != out {
		t.Errorf("tests.json itself: exit %d\n%s", code, out2)
	}
	js, errOut, code := runCmd(t, "report", "--by", "test", "--format", "json", dir)
	var got struct {
		Runs []struct {
			Input string
			pertest.Run
		}
	}
	if err := json.Unmarshal([]byte(js), &got); code != exitOK || err != nil || len(got.Runs) != 1 {
		t.Fatalf("json: exit %d %s %v\n%s", code, errOut, err, js)
	}
	var order []string
	for _, tt := range got.Runs[0].Tests {
		order = append(order, tt.Method)
	}
	if strings.Join(order, " ") != "testSave testCrash testOpen test[0: a(b)] testLater" || got.Runs[0].Input != dir || !got.Runs[0].Tests[1].Partial {
		t.Errorf("json: input %q, tests %q", got.Runs[0].Input, order)
	}
	// Without --by test, tests.json is not an allocation input.
	if _, errOut, code := runCmd(t, "report", file); code != exitUsage || !strings.Contains(errOut, "report it with --by test") {
		t.Errorf("report tests.json: exit %d %q", code, errOut)
	}
	if _, errOut, code := runCmd(t, "report", "--by", "test", t.TempDir()); code != exitFailure || !strings.Contains(errOut, "holds no tests.json") {
		t.Errorf("report --by test of a directory without a run: exit %d %q", code, errOut)
	}
}

// A tests: budget judges each test it matches: over a limit is exit 3,
// naming the test; a rule that matches nothing 5 (unless optional); a
// partial test it matches, or a run that did not finish, 4 unless
// --allow-partial; 4 wins over 3. report without --by test judges the
// tests: rules on a capture directory's tests.json.
func TestTestBudgets(t *testing.T) {
	whole := writeTestRun(t, testRun())
	crashed := testRun()
	crashed.Tests[0].Partial, crashed.Tests[0].Notes = true, []string{"its process died"}
	partial := writeTestRun(t, crashed)
	unfinished := testRun()
	unfinished.Complete, unfinished.Problems = false, []string{"the device went away"}
	cut := writeTestRun(t, unfinished)
	for _, c := range []struct {
		name, budget, input string
		extra               []string
		code                int
		want                string
	}{
		{"within", "tests:\n  - match: '.*'\n    max_bytes: 64000\n", whole, nil, exitOK, "within budget (3 limits)"},
		{"over", "tests:\n  - match: 'com\\.example\\.MainTest\\..*'\n    max_bytes: 10000\n", whole, nil, exitBudget,
			`budget exceeded: tests[0] 'com\.example\.MainTest\..*' on testSave(com.example.MainTest): 64000 bytes exceeds the limit 10000 by 54000`},
		{"runner's name", "tests:\n  - match: 'test\\[0: a\\(b\\)\\]\\(com\\.example\\.ParamTest\\)'\n    max_allocations: 6\n", whole, nil, exitBudget,
			"on test[0: a(b)](com.example.ParamTest): 7 allocations exceeds the limit 6"},
		{"per second", "tests:\n  - match: '.*Open.*'\n    max_bytes_per_second: 3000\n", whole, nil, exitBudget, "3840 bytes per second exceeds the limit 3000"},
		{"unmatched", "tests:\n  - match: 'testSave'\n    max_bytes: 1\n", whole, nil, exitUnmatched, "matched no test (names match whole: see docs/offline.md#matching-names; it matches part of testSave(com.example.MainTest))"},
		{"optional", "tests:\n  - match: 'nothing'\n    max_bytes: 1\n    optional: true\n", whole, nil, exitOK, "optional: true, so not a failure"},
		{"partial", "tests:\n  - match: '.*'\n    max_bytes: 1\n", partial, nil, exitInsufficient, "the test testOpen(com.example.MainTest) (its process died) is partial; not judged (exit status 4"},
		{"partial allowed", "tests:\n  - match: '.*'\n    max_bytes: 1\n", partial, []string{"--allow-partial"}, exitBudget, "judged anyway (--allow-partial)"},
		{"partial unmatched", "tests:\n  - match: '.*Save.*'\n    max_bytes: 100000\n", partial, nil, exitOK, "within budget"},
		{"unfinished", "tests:\n  - match: '.*'\n    max_bytes: 100000\n", cut, nil, exitInsufficient, "did not finish (no end of run was seen): the device went away"},
		{"no test run", "tests:\n  - match: '.*'\n    max_bytes: 1\n", t.TempDir(), nil, exitFailure, "holds no tests.json"},
	} {
		bud := writeBudget(t, c.budget)
		args := append([]string{"report", "--by", "test", "--budget", bud, c.input}, c.extra...)
		_, errOut, code := runCmd(t, args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, want %d with %q; stderr:\n%s", c.name, code, c.code, c.want, errOut)
		}
	}
	// Without --by test: a capture directory's tests.json is judged (and
	// its allocations summarised).
	raw, err := os.ReadFile(realReport)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(whole, "1.alloc"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	bud := writeBudget(t, "tests:\n  - match: '.*'\n    max_bytes: 10000\n")
	if _, errOut, code := runCmd(t, "report", "--budget", bud, whole); code != exitBudget || !strings.Contains(errOut, "on testSave(com.example.MainTest)") {
		t.Errorf("report --budget DIR: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := runCmd(t, "report", "--budget", bud, realReport); code != exitUsage || !strings.Contains(errOut, "no input holds a test run") {
		t.Errorf("tests: rules and no test run: exit %d\n%s", code, errOut)
	}
	mixed := writeBudget(t, "total:\n  max_bytes: 1\ntests:\n  - match: '.*'\n    max_bytes: 1\n")
	if _, errOut, code := runCmd(t, "report", "--by", "test", "--budget", mixed, whole); code != exitUsage || !strings.Contains(errOut, "run report without --by test") {
		t.Errorf("--by test with total limits: exit %d\n%s", code, errOut)
	}
}

// diff --by test lists tests added, removed and changed, the largest
// increase in bytes first; a partial or unfinished run is not compared
// (4) unless --allow-partial.
func TestDiffByTest(t *testing.T) {
	base := writeTestRun(t, testRun())
	nr := testRun()
	nr.Tests[0].Bytes, nr.Tests[0].Allocations = 90000, 400 // testOpen regressed
	nr.Tests[1].Outcome = pertest.Passed                    // testSave passes now, same figures
	nr.Tests = append(nr.Tests[:3], ptest("testNew(com.example.MainTest)", pertest.Passed, 5, 500, 0.1))
	nw := writeTestRun(t, nr)
	out, errOut, code := runCmd(t, "diff", "--by", "test", base, nw)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "diff-by-test.txt", strings.ReplaceAll(strings.ReplaceAll(out, base, "BASE"), nw, "NEW"))
	js, _, code := runCmd(t, "diff", "--by", "test", "--format", "json", base, nw)
	var d offline.TestDiff
	if err := json.Unmarshal([]byte(js), &d); code != exitOK || err != nil || d.Added != 1 || d.Removed != 1 || d.Changed != 2 || d.Tests[0].Name != "testOpen(com.example.MainTest)" || d.Tests[0].Change.Bytes != 85200 {
		t.Errorf("json: exit %d %v %+v", code, err, d)
	}
	nr.Tests[0].Partial, nr.Tests[0].Notes = true, []string{"it crossed a tracker cycle"}
	partial := writeTestRun(t, nr)
	if _, errOut, code := runCmd(t, "diff", "--by", "test", base, partial); code != exitInsufficient || !strings.Contains(errOut, "testOpen(com.example.MainTest) (it crossed a tracker cycle) is partial") {
		t.Errorf("partial: exit %d %q", code, errOut)
	}
	if _, _, code := runCmd(t, "diff", "--by", "test", "--allow-partial", base, partial); code != exitOK {
		t.Errorf("partial allowed: exit %d", code)
	}
}

// The one exit-status list (alloctrack --help) has 6, tests failed, and
// the precedence 4, 6, 3, 5, which worse follows.
func TestExitStatusTestsFailed(t *testing.T) {
	_, help, _ := runCmd(t, "--help")
	help = strings.Join(strings.Fields(help), " ")
	if !strings.Contains(help, "6 tests failed") || !strings.Contains(help, "4, then 6, then 3, then 5") {
		t.Errorf("--help does not list exit status 6 and the precedence:\n%s", help)
	}
	for _, c := range [][3]int{
		{exitInsufficient, exitTestsFailed, exitInsufficient},
		{exitTestsFailed, exitBudget, exitTestsFailed},
		{exitBudget, exitTestsFailed, exitTestsFailed},
		{exitUnmatched, exitTestsFailed, exitTestsFailed},
		{exitBudget, exitUnmatched, exitBudget},
	} {
		if got := worse(c[0], c[1]); got != c[2] {
			t.Errorf("worse(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}
