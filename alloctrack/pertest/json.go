package pertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// FileName is the name of a run's file in a capture directory.
const FileName = "tests.json"

// Marshal returns run as indented JSON (the tests.json layout). Tallies
// are not written.
func Marshal(run *Run) ([]byte, error) {
	b, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("pertest: writing the run: %w", err)
	}
	return append(b, '\n'), nil
}

// Unmarshal reads a run written by Marshal. Unknown fields are an error,
// so that a file of another kind is not taken for a run; a run without
// its "tests" or "backend" is one too.
func Unmarshal(b []byte) (*Run, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var raw struct {
		Run
		Tests *[]Test `json:"tests"`
	}
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("pertest: not a run: %w", err)
	}
	if raw.Tests == nil || raw.Backend == "" {
		return nil, fmt.Errorf("pertest: not a run: no \"tests\" or no \"backend\"")
	}
	run := raw.Run
	run.Tests = *raw.Tests
	return &run, nil
}

// Write writes run to path as Marshal does.
func Write(path string, run *Run) error {
	b, err := Marshal(run)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("pertest: %w", err)
	}
	return nil
}

// Read reads a run from path (a tests.json).
func Read(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pertest: %w", err)
	}
	run, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return run, nil
}
