package offline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// TestBudgetBadRegexAsTyped: a regular expression that does not compile is
// quoted as the file has it, with the reason in words, never in the
// anchored form the class rules compile.
func TestBudgetBadRegexAsTyped(t *testing.T) {
	_, err := offline.ParseBudget("b.yaml", []byte("classes: [{match: 'android\\.os(', max_bytes: 1}]\n"))
	if !errors.Is(err, offline.ErrBudget) {
		t.Fatalf("error %v, want a budget error", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, `b.yaml: classes[0] match 'android\.os(' is not a regular expression: missing closing )`) || strings.Contains(msg, "^(?:") {
		t.Errorf("error %q", msg)
	}
}

// TestBudgetUnknownKeys: an unknown key, or a value of the wrong kind, is
// named with its line and place in the budget and the keys valid there,
// never a Go type.
func TestBudgetUnknownKeys(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"total:\n  max_allocs: 5\n", `b.yaml: line 2: unknown key "max_allocs" in total; valid keys: max_allocations_per_second, max_bytes_per_second, max_allocations, max_bytes`},
		{"classes:\n  - match: x\n    maxbytes: 1\n", `line 3: unknown key "maxbytes" in classes[0]; valid keys: match, optional, max_allocations_per_second, max_bytes_per_second, max_allocations, max_bytes`},
		{"heap:\n  classes: [{match: x, max_instance: 1}]\n", `line 2: unknown key "max_instance" in heap.classes[0]; valid keys: match, heap, optional, max_instances, max_bytes, max_retained_bytes`},
		{"totals: {max_bytes: 1}\n", `line 1: unknown key "totals" in the budget's top level; valid keys: total, classes, sites, tests, heap`},
		{"total: {max_bytes: abc}\n", `line 1: total.max_bytes must be a whole number of 0 or more, not "abc"`},
		{"total: {max_bytes: -1}\n", `line 1: total.max_bytes must be a whole number of 0 or more, not "-1"`},
		{"classes: {match: x}\n", `line 1: classes must be a list of rules`},
		{"sites: [{match: x, max_bytes: 1, optional: maybe}]\n", `line 1: sites[0].optional must be true or false, not "maybe"`},
	} {
		_, err := offline.ParseBudget("b.yaml", []byte(c.yaml))
		if !errors.Is(err, offline.ErrBudget) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "offline.") || strings.Contains(err.Error(), "uint64") {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
}
