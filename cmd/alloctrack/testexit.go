package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/instrument"
)

// insufficient says why a run holds less than a whole run ("" when it is
// whole): the device went away, it was stopped, am's output broke off,
// or (without am) no run finished.
func (s *testRunSpec) insufficient(res *offline.RunRecord) string {
	if _, ok := errors.AsType[*instrument.FailedError](res.AmErr); ok {
		return "" // am could not start the run: a failure (6), not a cut
	}
	switch {
	case res.Gone != nil:
		return fmt.Sprintf("%s went away during the run (%v): the tests after it are missing", s.serial, res.Gone)
	case res.Stopped:
		return fmt.Sprintf("the run was stopped before it finished (%s, or interrupted)", s.timeoutFlag())
	case s.argv != nil && res.AmErr != nil:
		return fmt.Sprintf("am instrument's output ended before the run did: %v", res.AmErr)
	case s.argv == nil && !res.Run.Complete:
		return "no run finished while recording"
	}
	return ""
}

// failedTests says why the run failed ("" when it did not): a test failed,
// errored or crashed, or am could not run the suite.
func failedTests(res *offline.RunRecord) string {
	if fe, ok := errors.AsType[*instrument.FailedError](res.AmErr); ok {
		return "am could not start the run: " + fe.Msg
	}
	var bad []string
	for _, t := range res.Run.Tests {
		switch t.Outcome {
		case pertest.Failed, pertest.Errored, pertest.Crashed:
			bad = append(bad, fmt.Sprintf("%s %s", t.Name, t.Outcome))
		}
	}
	if len(bad) > 0 {
		more := ""
		if len(bad) > 5 {
			bad, more = bad[:5], fmt.Sprintf(" and %d more", len(bad)-5)
		}
		return fmt.Sprintf("%d tests did not pass: %s%s", len(bad), strings.Join(bad, ", "), more)
	}
	if res.Am.Crashed() {
		return "am reports the instrumentation process crashed: " + res.Am.Values["shortMsg"]
	}
	return ""
}

// exitStatus is the run's exit status, by precedence: 4 (insufficient),
// 6 (tests failed), then the budget's 3 or 5.
func (s *testRunSpec) exitStatus(res *offline.RunRecord, why, who string, stderr io.Writer) int {
	if why != "" {
		fmt.Fprintf(stderr, "%s: %s; not judged (exit status %d)\n", who, why, exitInsufficient)
		return exitInsufficient
	}
	code := s.judgeBudget(res.Run, who, stderr)
	if failed := failedTests(res); failed != "" {
		fmt.Fprintf(stderr, "%s: %s (exit status %d)\n", who, failed, exitTestsFailed)
		code = worstExit(code, exitTestsFailed)
	}
	return code
}

// judgeBudget judges the run against --budget: its allocation limits on
// the whole capture, its tests: rules on each test.
func (s *testRunSpec) judgeBudget(run *pertest.Run, who string, stderr io.Writer) int {
	if s.budget == nil {
		return exitOK
	}
	code := exitOK
	if s.budget.HasAllocationLimits() {
		code = checkCaptureBudget(stderr, s.out, s.budget, s.gate)
	}
	if s.budget.HasTestLimits() {
		tr := &offline.TestRun{Name: s.out, Path: filepath.Join(s.out, offline.TestsFile), Run: run}
		code = worstExit(code, judgeTests(stderr, who, s.budget, []*offline.TestRun{tr}, s.gate))
	}
	return code
}

// worstExit is the one of two exit statuses said first: 1, then 4, 6, 3, 5.
func worstExit(a, b int) int {
	for _, c := range []int{exitFailure, exitUsage, exitInsufficient, exitTestsFailed, exitBudget, exitUnmatched} {
		if a == c || b == c {
			return c
		}
	}
	return exitOK
}

// testOutputs writes junit.xml (to --junit, default DIR/junit.xml) and,
// with --pprof, a profile per test (DIR/tests/NNN.pb.gz), from run, which
// holds each test's Tally (tests.json does not). It reports false when
// one could not be written.
func (s *testRunSpec) testOutputs(run *pertest.Run, who string, stderr io.Writer) bool {
	path := s.junit
	if path == "" {
		path = filepath.Join(s.out, "junit.xml")
	}
	var buf bytes.Buffer
	err := pertest.WriteJUnit(&buf, run)
	if err == nil {
		err = offline.WriteFileAtomic(path, buf.Bytes())
	}
	if err == nil && s.pprof {
		_, err = pertest.WriteTestProfiles(s.out, run)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", who, err)
		return false
	}
	return true
}

// lookupTestDevice finds the device (serial, or the only one attached)
// and its API level (capture.go's lookupDevice, bounded by two request
// timeouts). A non-zero code comes with a message.
func lookupTestDevice(ctx context.Context, client *adb.Client, addr, wantSerial string, cfg ddm.Config) (serial, model string, api, code int, msg string) {
	lookup, cancel := context.WithTimeout(ctx, 2*cfg.RequestTimeout)
	defer cancel()
	return lookupDevice(lookup, client, addr, wantSerial)
}

// instrumentationTarget asks the device (`pm list instrumentation`) which
// app instrumentation instr (PKG/RUNNER, or PKG/.RUNNER) runs in. An
// instrumentation not installed is no error here: am reports it (sheet
// 14), with note saying what is installed.
func instrumentationTarget(ctx context.Context, client *adb.Client, serial, instr string, timeout time.Duration) (pkg, note string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*timeout)
	defer cancel()
	out, err := client.Shell(ctx, serial, "pm", "list", "instrumentation")
	if err != nil {
		return "", "", fmt.Errorf("listing the instrumentations of %s: %w", serial, err)
	}
	list := parseInstrumentations(out)
	want := expandComponent(instr)
	var have []string
	for _, in := range list {
		if expandComponent(in.component) == want {
			return in.target, "", nil
		}
		have = append(have, in.component)
	}
	return "", fmt.Sprintf("pm list instrumentation on %s has no %s (installed: %s)", serial, instr, strings.Join(have, ", ")), nil
}

type instrumentation struct{ component, target string }

// parseInstrumentations reads `pm list instrumentation`:
//
//	instrumentation:com.example.test/androidx.test.runner.AndroidJUnitRunner (target=com.example)
func parseInstrumentations(out string) []instrumentation {
	var list []instrumentation
	for _, line := range strings.Split(strings.ReplaceAll(out, "\r", ""), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "instrumentation:")
		if !ok {
			continue
		}
		comp, tail, _ := strings.Cut(rest, " ")
		target, ok := strings.CutPrefix(strings.TrimSpace(tail), "(target=")
		if !ok {
			continue
		}
		list = append(list, instrumentation{component: comp, target: strings.TrimSuffix(target, ")")})
	}
	return list
}

// expandComponent writes PKG/.Cls as PKG/PKG.Cls, as Android reads it.
func expandComponent(c string) string {
	pkg, cls, ok := strings.Cut(c, "/")
	if ok && strings.HasPrefix(cls, ".") {
		return pkg + "/" + pkg + cls
	}
	return c
}
