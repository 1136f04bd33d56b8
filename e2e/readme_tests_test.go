package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/internal/adbtest"
)

// readmeTestsScript returns the README's per-test recipe (the block
// between the ci-tests markers) as it stands, on free ports.
func readmeTestsScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	const open, end = "<!-- ci-tests -->\n```sh\n", "```\n<!-- /ci-tests -->"
	i, j := strings.Index(readme, open), strings.Index(readme, end)
	if i < 0 || j < i {
		t.Fatal("README.md has no ci-tests block")
	}
	script := readme[i+len(open) : j]
	script = strings.ReplaceAll(script, "15037", strconv.Itoa(adbtest.FreePort(t)))
	return strings.ReplaceAll(script, "15038", strconv.Itoa(adbtest.FreePort(t)))
}

// TestReadmeTestsRecipe runs the README's per-test recipe as it stands:
// the suite runs, every one of its 20 tests is recorded whole, and the
// report judges the run.
func TestReadmeTestsRecipe(t *testing.T) {
	dir, out, err := runCIScript(t, readmeTestsScript(t))
	if err != nil {
		t.Fatalf("the README's per-test recipe failed: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "run", "tests.json"))
	if err != nil {
		t.Fatal(err)
	}
	var run pertest.Run
	if err := json.Unmarshal(b, &run); err != nil {
		t.Fatal(err)
	}
	if len(run.Tests) != 20 || !run.Complete {
		t.Fatalf("%d tests, complete %v; want the suite's 20:\n%s", len(run.Tests), run.Complete, out)
	}
	for _, tt := range run.Tests {
		if tt.Outcome != pertest.Passed || tt.Partial || tt.Allocations == 0 {
			t.Errorf("%s: %s, partial %v %q, %d allocations", tt.Name, tt.Outcome, tt.Partial, tt.Notes, tt.Allocations)
		}
	}
	if !strings.Contains(out, "within budget") {
		t.Errorf("the report did not judge the run:\n%s", out)
	}
}
