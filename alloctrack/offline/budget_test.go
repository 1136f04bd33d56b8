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
