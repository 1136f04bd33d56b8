package sim

import (
	"fmt"
	"net/http"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// SuiteRequest is the body of POST devices/{serial}/suites: a seeded
// suite (SeedSpec's fields), or the orchestrator's APK.
type SuiteRequest struct {
	TestPackage   string `json:"test_package"`
	Runner        string `json:"runner"`
	RunnerVersion string `json:"runner_version"`
	Target        string `json:"target"`
	StartDelay    string `json:"start_delay"` // a Go duration; "" is 200ms
	Orchestrator  bool   `json:"orchestrator"`
	Tests         int    `json:"tests"`
	Seed          uint64 `json:"seed"`
	Classes       int    `json:"classes"`
	Allocations   int    `json:"allocations"`
	ObjectBytes   uint32 `json:"object_bytes"`
	Duration      string `json:"duration"` // each test's, a Go duration
	Steps         int    `json:"steps"`
	FailEvery     int    `json:"fail_every"`
	IgnoreEvery   int    `json:"ignore_every"`
	AssumeEvery   int    `json:"assume_every"`
	ErrorEvery    int    `json:"error_every"`
	CrashAt       int    `json:"crash_at"`
	OddNames      bool   `json:"odd_names"`
}

// Suite builds the suite the request describes.
func (q SuiteRequest) Suite() (Suite, error) {
	if q.Orchestrator {
		return OrchestratorSuite(), nil
	}
	dur := func(name, s string) (time.Duration, error) {
		if s == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%s %q: not a duration such as 50ms", name, s)
		}
		return d, nil
	}
	d, err := dur("duration", q.Duration)
	if err != nil {
		return Suite{}, err
	}
	sd, err := dur("start_delay", q.StartDelay)
	if err != nil {
		return Suite{}, err
	}
	if q.Tests < 0 || q.Tests > 100000 {
		return Suite{}, fmt.Errorf("tests %d: not between 0 and 100000", q.Tests)
	}
	s := SeededSuite(q.TestPackage, q.Target, SeedSpec{Tests: q.Tests, Seed: q.Seed, Classes: q.Classes, Allocations: q.Allocations,
		ObjectBytes: q.ObjectBytes, Duration: d, Steps: q.Steps, FailEvery: q.FailEvery, IgnoreEvery: q.IgnoreEvery,
		AssumeEvery: q.AssumeEvery, ErrorEvery: q.ErrorEvery, CrashAt: q.CrashAt, OddNames: q.OddNames})
	if q.Runner != "" {
		s.Runner = q.Runner
	}
	if q.RunnerVersion != "" {
		s.RunnerVersion = q.RunnerVersion
	}
	s.StartDelay = sd
	return s, nil
}

// TestView is a test of a run as GET devices/{serial}/runs shows it.
type TestView struct {
	Name      string           `json:"name"`
	Outcome   pertest.Outcome  `json:"outcome"`
	PID       int              `json:"pid"`
	Allocated alloctrack.Count `json:"allocated"`
	Reported  alloctrack.Count `json:"reported"`
}

// RunView is a run as GET devices/{serial}/runs shows it.
type RunView struct {
	Component string           `json:"component"`
	PIDs      []int            `json:"pids"`
	Done      bool             `json:"done"`
	Between   alloctrack.Count `json:"between"`
	Tests     []TestView       `json:"tests"`
}

// suiteRoutes adds the test-run endpoints to the control API.
func (f *Farm) suiteRoutes(mux *http.ServeMux) {
	device := func(w http.ResponseWriter, r *http.Request) *Device {
		d := f.Device(r.PathValue("serial"))
		if d == nil {
			writeError(w, http.StatusNotFound, fmt.Errorf("%w: %q", ErrNoDevice, r.PathValue("serial")))
		}
		return d
	}
	mux.HandleFunc("POST /devices/{serial}/suites", func(w http.ResponseWriter, r *http.Request) {
		var q SuiteRequest
		if !readJSON(w, r, &q) {
			return
		}
		d := device(w, r)
		if d == nil {
			return
		}
		s, err := q.Suite()
		if err == nil {
			err = d.InstallSuite(s)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]any{"component": s.Component(), "target": s.Target, "tests": len(s.Tests)})
	})
	mux.HandleFunc("GET /devices/{serial}/runs", func(w http.ResponseWriter, r *http.Request) {
		d := device(w, r)
		if d == nil {
			return
		}
		out := []RunView{}
		for _, run := range d.TestRuns() {
			rt := run.Truth()
			v := RunView{Component: rt.Component, PIDs: rt.PIDs, Done: rt.Done, Between: rt.Between.Total, Tests: []TestView{}}
			for _, t := range rt.Tests {
				v.Tests = append(v.Tests, TestView{t.Name, t.Outcome, t.PID, t.Allocated.Total, t.Reported.Total})
			}
			out = append(out, v)
		}
		writeJSON(w, http.StatusOK, out)
	})
}
