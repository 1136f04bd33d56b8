package offline

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// TestsSummary is the "tests" block of a test run's summary.json.
type TestsSummary struct {
	Total            int    `json:"total"`
	Passed           int    `json:"passed"`
	Failed           int    `json:"failed"`
	Errored          int    `json:"errored"`
	Ignored          int    `json:"ignored"`
	AssumptionFailed int    `json:"assumption_failed"`
	Crashed          int    `json:"crashed"`
	Unfinished       int    `json:"unfinished"`
	Partial          int    `json:"partial"`
	Complete         bool   `json:"complete"` // the run reached its end
	File             string `json:"file"`
}

// SummarizeTests counts run's tests by outcome.
func SummarizeTests(run *pertest.Run) *TestsSummary {
	ts := &TestsSummary{Total: len(run.Tests), Complete: run.Complete, File: TestsFile}
	for _, t := range run.Tests {
		switch t.Outcome {
		case pertest.Passed:
			ts.Passed++
		case pertest.Failed:
			ts.Failed++
		case pertest.Errored:
			ts.Errored++
		case pertest.Ignored:
			ts.Ignored++
		case pertest.AssumptionFailed:
			ts.AssumptionFailed++
		case pertest.Crashed:
			ts.Crashed++
		case pertest.Unfinished:
			ts.Unfinished++
		}
		if t.Partial {
			ts.Partial++
		}
	}
	return ts
}

// SetTests puts the tests block into the summary Close writes.
func (w *CaptureWriter) SetTests(ts *TestsSummary) { w.sum.Tests = ts }

// WriteTests writes run as TestsFile in dir.
func WriteTests(dir string, run *pertest.Run) error {
	b, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return fmt.Errorf("capture: encoding %s: %w", TestsFile, err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, TestsFile), append(b, '\n')); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}
