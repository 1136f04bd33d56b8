package offline_test

import "testing"

// TestJudgeRelativeSplitsTheLevel: rules of different increases are
// judged in separate gates, each at the level times its share of the
// series, so two rules together are stricter than one alone.
func TestJudgeRelativeSplitsTheLevel(t *testing.T) {
	tests := map[string]float64{"testA(com.example.T)": 10000, "testB(com.example.T)": 5000, "testC(com.example.T)": 8000}
	base := testRuns(t, tests, nil)
	nw := testRuns(t, tests, map[string]float64{"testC(com.example.T)": 1.04})
	one := relBudget(t, "tests:\n  - match: 'testC.*'\n    relative: {increase: 1%, of: allocations}\n")
	two := relBudget(t, "tests:\n  - match: 'testC.*'\n    relative: {increase: 1%, of: allocations}\n  - match: 'test[AB].*'\n    relative: {increase: 20%}\n")
	v1, err := one.JudgeRelative(base, nw)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := two.JudgeRelative(base, nw)
	if err != nil {
		t.Fatal(err)
	}
	if !v1[0].Breach || v2[0].Breach || len(v2) != 5 {
		t.Errorf("alone: %s\nwith 4 more series: %s (of %d); want a breach alone, none at a fifth of the level", v1[0], v2[0], len(v2))
	}
}
