package offline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// TestsFile is the file of a capture directory that holds its test run
// (alloctrack test --out DIR): the pertest.Run, as JSON.
const TestsFile = "tests.json"

// ErrNotTestRun is wrapped by the error of ReadTestRun for an input that
// holds no test run.
var ErrNotTestRun = errors.New("not a test run")

// TestRun is a test run read from a capture directory's tests.json, or
// from such a file itself.
type TestRun struct {
	Name string // the input as given
	Path string // the tests.json read
	*pertest.Run
}

// TestRunPath returns the tests.json of path (a capture directory that
// holds one, or the file itself), or "" when path holds no test run: a
// directory without tests.json, or a file that is not a JSON object.
func TestRunPath(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	if st.IsDir() {
		p := filepath.Join(path, TestsFile)
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	head, err := fileHead(path)
	if err != nil || !bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n"), []byte("{")) {
		return ""
	}
	return path
}

// ReadTestRun reads the test run of path: a capture directory holding
// tests.json, or a tests.json file. An input that holds none is an error
// wrapping ErrNotTestRun; a file that does not decode, or a test with no
// name or an outcome alloctrack does not write, an error naming the file
// and the test.
func ReadTestRun(path string) (*TestRun, error) {
	p := TestRunPath(path)
	if p == "" {
		if st, err := os.Stat(path); err != nil {
			return nil, err
		} else if st.IsDir() {
			return nil, fmt.Errorf("%s: %w: the directory holds no %s (alloctrack test --out writes it)", path, ErrNotTestRun, TestsFile)
		}
		return nil, fmt.Errorf("%s: %w: not a %s (a JSON object with \"tests\")", path, ErrNotTestRun, TestsFile)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var run pertest.Run
	if err := json.Unmarshal(data, &run); err != nil {
		return nil, fmt.Errorf("%s: reading a test run: %v", p, jsonWhere(data, err))
	}
	var probe struct {
		Tests json.RawMessage `json:"tests"`
	}
	if json.Unmarshal(data, &probe); probe.Tests == nil {
		return nil, fmt.Errorf("%s: %w: a JSON object without \"tests\"", p, ErrNotTestRun)
	}
	known := map[pertest.Outcome]bool{pertest.Passed: true, pertest.Failed: true, pertest.Errored: true, pertest.Ignored: true,
		pertest.AssumptionFailed: true, pertest.Crashed: true, pertest.Unfinished: true}
	for i, t := range run.Tests {
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("%s: tests[%d] has no name", p, i)
		case !known[t.Outcome]:
			return nil, fmt.Errorf("%s: tests[%d] %s: unknown outcome %q", p, i, t.Name, t.Outcome)
		}
	}
	return &TestRun{Name: filepath.Clean(path), Path: p, Run: &run}, nil
}

// jsonWhere adds the byte offset to a JSON error that knows it.
func jsonWhere(data []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("%v at byte %d", err, se.Offset)
	case errors.As(err, &te):
		return fmt.Errorf("%v at byte %d", err, te.Offset)
	}
	return err
}

// Shortfall says why the run holds less than a whole run, or nil: it did
// not finish (no end of run was seen: am's run was cut, the device went
// away), or it holds no test (Empty).
func (r *TestRun) Shortfall() *ShortfallError {
	why := ""
	switch {
	case !r.Complete:
		why = "the test run did not finish (no end of run was seen)"
	case len(r.Tests) == 0:
		return &ShortfallError{Input: r.Name, Why: "the test run holds no test", Empty: true}
	default:
		return nil
	}
	if len(r.Problems) > 0 {
		why += ": " + strings.Join(r.Problems, "; ")
	}
	return &ShortfallError{Input: r.Name, Why: why}
}

// PartialShortfall says which tests of the run are partial, or nil.
func (r *TestRun) PartialShortfall() *ShortfallError {
	var names []string
	for _, t := range r.Tests {
		if t.Partial {
			names = append(names, partialWhy(t))
		}
	}
	switch len(names) {
	case 0:
		return nil
	case 1:
		return &ShortfallError{Input: r.Name, Why: "the test " + names[0] + " is partial"}
	}
	return &ShortfallError{Input: r.Name, Why: fmt.Sprintf("%d tests are partial: %s", len(names), strings.Join(names, ", "))}
}

// partialWhy names a partial test with its notes.
func partialWhy(t pertest.Test) string {
	if len(t.Notes) == 0 {
		return t.Name
	}
	return t.Name + " (" + strings.Join(t.Notes, "; ") + ")"
}
