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

// summaryRun writes a run directory holding only a summary.json of meta.
func summaryRun(t *testing.T, meta offline.CaptureMeta) string {
	t.Helper()
	dir := t.TempDir()
	b, _ := json.Marshal(offline.Summary{CaptureMeta: meta})
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBaselineAddList: add keeps --keep runs per key and says what it
// pruned; list shows each key with its runs; a run that does not record
// its app's version is refused, naming what is missing.
func TestBaselineAddList(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := offline.CaptureMeta{Model: "Pixel 7", API: 33, Package: "com.example", AppVersion: "1.4", AppVersionCode: 14}
	runs := gateRuns(t, m, 100, 50)[:3]
	out, stderr, code := runCmd(t, append([]string{"baseline", "add", "--store", store, "--keep", "2"}, runs...)...)
	if code != exitOK || strings.Count(out, "added ") != 3 || !strings.Contains(out, "pruned "+filepath.Join(store, "Pixel_7_api33_com.example_1.4_14", "000001")) {
		t.Fatalf("add: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = runCmd(t, "baseline", "list", "--store", store)
	want := "Pixel 7, API 33, com.example 1.4 (14): 2 runs\n"
	if code != exitOK || !strings.HasPrefix(out, want) || !strings.Contains(out, "000003") || strings.Contains(out, "000001") {
		t.Errorf("list: exit %d\n%s%s; want it to start %q, runs 2 and 3", code, out, stderr, want)
	}
	m.AppVersion, m.AppVersionCode = "", 0
	_, stderr, code = runCmd(t, "baseline", "add", "--store", store, summaryRun(t, m))
	if code != exitFailure || !strings.Contains(stderr, "records no app_version") {
		t.Errorf("a run without its app version: exit %d, %q", code, stderr)
	}
}

// gateRuns writes five run directories of meta, each with a summary.json
// and a tests.json whose two tests allocate about a and b (±3 % from run
// to run).
func gateRuns(t *testing.T, meta offline.CaptureMeta, a, b float64) []string {
	t.Helper()
	var out []string
	for _, n := range []float64{1.00, 1.03, 0.97, 1.02, 0.98} {
		dir := summaryRun(t, meta)
		run := pertest.Run{Package: meta.Package, Backend: "ddm", Complete: true, Expected: 2}
		for name, v := range map[string]float64{"testA(com.example.T)": a, "testB(com.example.T)": b} {
			x := uint64(v * n)
			method, _, _ := strings.Cut(name, "(")
			run.Tests = append(run.Tests, pertest.Test{Name: name, Class: "com.example.T", Method: method, Outcome: pertest.Passed,
				DurationSeconds: 1, Figures: pertest.Figures{Allocations: x, Bytes: 16 * x}})
		}
		js, _ := json.Marshal(run)
		if err := os.WriteFile(filepath.Join(dir, offline.TestsFile), js, 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, dir)
	}
	return out
}

// TestBaselineCheck: check judges new runs against the store's runs of
// their key: exit 0 for the same build, 3 naming a +40 % test with its
// interval, 4 refusing runs of another app version (never compared), and
// 3 for an absolute limit beside the relative rule.
func TestBaselineCheck(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	m := offline.CaptureMeta{Model: "Pixel 7", API: 30, Package: "com.example", AppVersion: "1.4", AppVersionCode: 14}
	if _, stderr, code := runCmd(t, append([]string{"baseline", "add", "--store", store}, gateRuns(t, m, 10000, 5000)...)...); code != exitOK {
		t.Fatalf("add: %d %s", code, stderr)
	}
	budget := filepath.Join(dir, "budget.yaml")
	os.WriteFile(budget, []byte("tests:\n  - match: '.*'\n    relative: {increase: 10%, of: allocations}\n"), 0o644)
	check := func(runs []string) (string, string, int) {
		return runCmd(t, append([]string{"baseline", "check", "--store", store, "--budget", budget}, runs...)...)
	}
	out, stderr, code := check(gateRuns(t, m, 10000, 5000))
	if code != exitOK || strings.Contains(out, "BREACH") || !strings.Contains(out, "baseline: 5 runs of Pixel 7, API 30, com.example 1.4 (14)") {
		t.Errorf("same build: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = check(gateRuns(t, m, 14000, 5000))
	if code != exitBudget || !strings.Contains(out, "tests[0] '.*' on testA(com.example.T): allocations: median 10000 → 14000, ×1.400 (interval ×1.") ||
		!strings.Contains(out, "BREACH") || !strings.Contains(out, "testB(com.example.T): allocations: median 5000 → 5000, ×1.000 (interval ×0.9") {
		t.Errorf("+40 %%: exit %d\n%s%s", code, out, stderr)
	}
	other := m
	other.AppVersion, other.AppVersionCode = "1.5", 15
	out, stderr, code = check(gateRuns(t, other, 14000, 5000))
	if code != exitInsufficient || strings.Contains(out, "BREACH") || !strings.Contains(stderr, "app version 1.4 ≠ 1.5") {
		t.Errorf("another app version: exit %d\n%s%s", code, out, stderr)
	}
	cut := gateRuns(t, m, 10000, 5000)
	tj := filepath.Join(cut[2], offline.TestsFile)
	b, _ := os.ReadFile(tj)
	os.WriteFile(tj, []byte(strings.Replace(string(b), `"complete":true`, `"complete":false`, 1)), 0o644)
	out, stderr, code = check(cut)
	if code != exitInsufficient || !strings.Contains(stderr, "the test run did not finish") {
		t.Errorf("a run that did not finish: exit %d\n%s%s", code, out, stderr)
	}
	os.WriteFile(budget, []byte("tests:\n  - match: '.*'\n    relative: {increase: 10%}\n    max_allocations: 9000\n"), 0o644)
	out, stderr, code = check(gateRuns(t, m, 10000, 5000))
	if code != exitBudget || !strings.Contains(out, "over budget: tests[0] '.*' on testA(com.example.T): 10") || strings.Contains(out, "BREACH") {
		t.Errorf("absolute limit: exit %d\n%s%s", code, out, stderr)
	}
}

// TestReportSaysRelativeIsNotItsJob: report --budget with relative rules
// says that it leaves them to baseline check, rather than seeming to pass
// them.
func TestReportSaysRelativeIsNotItsJob(t *testing.T) {
	dir := t.TempDir()
	budget := filepath.Join(dir, "budget.yaml")
	os.WriteFile(budget, []byte("tests:\n  - match: '.*'\n    relative: {increase: 10%}\n"), 0o644)
	m := offline.CaptureMeta{Model: "Pixel 7", API: 30, Package: "com.example", AppVersion: "1.4"}
	_, stderr, _ := runCmd(t, "report", "--by", "test", "--budget", budget, gateRuns(t, m, 100, 50)[0])
	if !strings.Contains(stderr, "relative: rules are judged by alloctrack baseline check") {
		t.Errorf("stderr %q", stderr)
	}
}
