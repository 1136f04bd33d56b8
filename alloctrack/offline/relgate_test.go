package offline_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// noise is a run-to-run spread of about ±3 %, the same on every side, so
// that only the change told apart.
var noise = []float64{1.00, 1.03, 0.97, 1.02, 0.98}

// testRuns writes one tests.json per run with the tests' allocations
// (and bytes 16 times those), each times the run's noise and scale[name].
func testRuns(t *testing.T, allocs map[string]float64, scale map[string]float64) []string {
	t.Helper()
	var out []string
	for _, n := range noise {
		run := pertest.Run{Package: "com.example", Backend: "ddm", Complete: true, Expected: len(allocs)}
		for _, name := range []string{"testA(com.example.T)", "testB(com.example.T)", "testC(com.example.T)"} {
			a, ok := allocs[name]
			if !ok {
				continue
			}
			s := scale[name]
			if s == 0 {
				s = 1
			}
			v := uint64(a * n * s)
			method, _, _ := strings.Cut(name, "(")
			run.Tests = append(run.Tests, pertest.Test{Name: name, Class: "com.example.T", Method: method, Outcome: pertest.Passed,
				DurationSeconds: 1, Figures: pertest.Figures{Allocations: v, Bytes: 16 * v}})
		}
		p := filepath.Join(t.TempDir(), "tests.json")
		b, _ := json.Marshal(run)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func relBudget(t *testing.T, y string) *offline.Budget {
	t.Helper()
	b, err := offline.ParseBudget("budget.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestJudgeRelative: a +30 % test breaches a +10 % rule, an unchanged
// one and a +5 % one (significant, but below the increase) do not; the
// same build on both sides breaches nothing.
func TestJudgeRelative(t *testing.T) {
	tests := map[string]float64{"testA(com.example.T)": 10000, "testB(com.example.T)": 5000, "testC(com.example.T)": 8000}
	b := relBudget(t, "tests:\n  - match: '.*'\n    relative: {increase: 10%, level: 0.05, of: allocations}\n")
	base := testRuns(t, tests, nil)
	nw := testRuns(t, tests, map[string]float64{"testA(com.example.T)": 1.30, "testC(com.example.T)": 1.05})
	vs, err := b.JudgeRelative(base, nw)
	if err != nil {
		t.Fatal(err)
	}
	breaches := map[string]bool{}
	for _, v := range vs {
		t.Log(v)
		if strings.Contains(v.Rule, "testC") && (!v.Significant || v.Breach) {
			t.Errorf("+5 %%: %s; want significant, yet no breach of +10 %%", v)
		}
		if v.Breach {
			breaches[v.Rule] = true
			if v.Lo <= 1.1 || v.Hi < v.Lo || !strings.Contains(v.String(), "BREACH") {
				t.Errorf("breach %s: interval ×%.3f–×%.3f", v, v.Lo, v.Hi)
			}
		}
	}
	want := "tests[0] '.*' on testA(com.example.T)"
	if len(vs) != 3 || len(breaches) != 1 || !breaches[want] {
		t.Errorf("breaches %v of %d verdicts; want only %s", breaches, len(vs), want)
	}
	vs, err = b.JudgeRelative(base, testRuns(t, tests, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Breach || v.Significant {
			t.Errorf("A/A: %s", v)
		}
	}
}

// TestRelativeBudgetSyntax: relative: parses beside absolute limits, and
// bad values are errors naming where and what is wrong.
func TestRelativeBudgetSyntax(t *testing.T) {
	b := relBudget(t, "total: {max_bytes: 100, relative: {increase: 10%}}\nclasses:\n  - match: 'byte\\[\\]'\n    relative: {increase: '2.5 %', of: bytes}\n")
	if !b.HasRelative() || b.Total.Relative.Level != 0.05 || b.Classes[0].Relative.MinEffect() != 0.025 {
		t.Errorf("parsed %+v %+v", b.Total.Relative, b.Classes[0].Relative)
	}
	for y, want := range map[string]string{
		"tests: [{match: a, relative: {increase: 10}}]":            "tests[0].relative: increase must be a percentage",
		"tests: [{match: a, relative: {increase: 10%, level: 2}}]": "level must be above 0 and below 0.5",
		"tests: [{match: a, relative: {increase: 10%, of: heap}}]": "of must be allocations or bytes",
		"tests: [{match: a, relative: {increase: 10%, more: 1}}]":  `unknown key "more"`,
		"tests: [{match: a, relative: {increase: -5%}}]":           "increase must be a percentage above 0",
	} {
		if _, err := offline.ParseBudget("b.yaml", []byte(y)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v; want %q", y, err, want)
		}
	}
}
