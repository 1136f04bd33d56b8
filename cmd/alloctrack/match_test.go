package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/hproftest"
)

// TestBudgetRuleMatchingNothing: a rule that matches nothing (the issue's
// "byte" for byte[]; here "float" for float[]) fails the check with exit 5,
// naming the rule and what it matches in part, in classes:, sites: and
// heap: alike; optional: true makes it a warning.
func TestBudgetRuleMatchingNothing(t *testing.T) {
	dump := filepath.Join(t.TempDir(), "leaky.hprof")
	if err := os.WriteFile(dump, hproftest.LeakyDump(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rule, input, want string
	}{
		{"classes: [{match: float, max_bytes: 1000000%s}]\n", realReport, "budget rule classes[0] 'float' matched no class (names match whole: see docs/offline.md#matching-names; it matches part of float[])"},
		{"sites: [{match: 'MainActivity', max_bytes: 1000000%s}]\n", realReport, "budget rule sites[0] 'MainActivity' matched no frame"},
		{"heap:\n  classes: [{match: 'com\\.example', max_instances: 1000%s}]\n", dump, "budget rule heap.classes[0] 'com\\.example' matched no class"},
	} {
		_, errOut, code := runCmd(t, "report", "--budget", writeBudget(t, fmt.Sprintf(c.rule, "")), c.input)
		if code != exitUnmatched || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "within budget") {
			t.Errorf("%s: exit %d, want %d saying %q; stderr:\n%s", c.rule, code, exitUnmatched, c.want, errOut)
		}
		_, errOut, code = runCmd(t, "report", "--budget", writeBudget(t, fmt.Sprintf(c.rule, ", optional: true")), c.input)
		if code != exitOK || !strings.Contains(errOut, "warning: "+c.want) || !strings.Contains(errOut, "optional: true, so not a failure") || !strings.Contains(errOut, "within budget") {
			t.Errorf("%s optional: exit %d; stderr:\n%s", c.rule, code, errOut)
		}
	}
	// Over budget wins over a rule that matched nothing.
	b := writeBudget(t, "total: {max_allocations: 10}\nclasses: [{match: float, max_bytes: 1}]\n")
	if _, errOut, code := runCmd(t, "report", "--budget", b, realReport); code != exitBudget || !strings.Contains(errOut, "matched no class") {
		t.Errorf("over budget and unmatched: exit %d; stderr:\n%s", code, errOut)
	}
}

// TestOneNameRule: --class and a budget's classes: select the same
// allocations for the same expression, and so do --frame and sites:
// (a frame by its method or as shown with file and line, whole).
func TestOneNameRule(t *testing.T) {
	count := func(args ...string) uint64 {
		out, _, _ := runCmd(t, append([]string{"report", "--format", "json"}, append(args, realReport)...)...)
		var s jsonSummary
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return s.Allocations
	}
	// What a rule with limit 0 measures: over it, or "matched no".
	budgeted := func(kind, expr string) uint64 {
		b := writeBudget(t, fmt.Sprintf("%s: [{match: '%s', max_allocations: 0, optional: true}]\n", kind, expr))
		_, errOut, _ := runCmd(t, "report", "--budget", b, realReport)
		if strings.Contains(errOut, "matched no") {
			return 0
		}
		var n uint64
		fmt.Sscanf(errOut[strings.LastIndex(errOut, "': ")+3:], "%d", &n)
		return n
	}
	for _, c := range []struct {
		kind, flag, expr string
		want             uint64
	}{
		{"classes", "--class", `android\.os\.Message`, 4000},
		{"classes", "--class", `float\[\]`, 20},
		{"classes", "--class", `float`, 0},
		{"classes", "--class", `Message`, 0},
		{"classes", "--class", `.*Message`, 4000},
		{"sites", "--frame", `.*MainActivity\$4\.onClick`, 4000},
		{"sites", "--frame", `MainActivity\$4\.onClick`, 0},
	} {
		if got, b := count(c.flag, c.expr), budgeted(c.kind, c.expr); got != c.want || b != c.want {
			t.Errorf("%s %s: %d allocations, %s: %d; want %d", c.flag, c.expr, got, c.kind, b, c.want)
		}
	}
}

// TestFilterKeepingNothingSaysSo: --class that keeps nothing (the issue's
// "byte", which names no class whole) says so, not a silent empty report.
func TestFilterKeepingNothingSaysSo(t *testing.T) {
	_, errOut, code := runCmd(t, "report", "--class", "float", realReport)
	if code != exitOK || !strings.Contains(errOut, "--class and --frame kept no allocation (names match whole") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if _, errOut, _ := runCmd(t, "report", "--class", `float\[\]`, realReport); errOut != "" {
		t.Errorf("a filter that keeps something: stderr %q", errOut)
	}
}

// TestBudgetOfDumpAndAllocations: a report of a heap dump and allocations
// judges both; the verdict that wins is the worse (over budget over a rule
// that matched nothing), where a heap verdict used to hide the
// allocations'.
func TestBudgetOfDumpAndAllocations(t *testing.T) {
	dump := filepath.Join(t.TempDir(), "leaky.hprof")
	if err := os.WriteFile(dump, hproftest.LeakyDump(), 0o644); err != nil {
		t.Fatal(err)
	}
	b := writeBudget(t, "total: {max_allocations: 10}\nheap:\n  classes: [{match: 'com\\.example', max_instances: 1000}]\n")
	_, errOut, code := runCmd(t, "report", "--budget", b, dump, realReport)
	if code != exitBudget || !strings.Contains(errOut, "matched no class") || !strings.Contains(errOut, "total: 5000 allocations exceeds the limit 10") {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitBudget, errOut)
	}
}
