package main

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/instrument"
)

func TestAmCommand(t *testing.T) {
	const runner = "com.example.test/androidx.test.runner.AndroidJUnitRunner"
	const orch = "androidx.test.orchestrator/androidx.test.orchestrator.AndroidTestOrchestrator"
	for _, tt := range []struct {
		argv          string
		instr, target string
		err           string
	}{
		{"am instrument -w -r -e delay_msec 500 " + runner, runner, runner, ""},
		{"am instrument -w -r -e targetInstrumentation " + runner + " " + orch, orch, runner, ""},
		{"am instrument -r " + runner, "", "", "needs -w"},
		{"am instrument -w " + runner, "", "", "needs -w"},
		{"am instrument -w -r -e log true " + runner, "", "", "-e log true"},
		{"am instrument -w -r -e class a.B", "", "", "must end with the instrumentation"},
		{"adb shell am instrument -w -r " + runner, "", "", "must be `am instrument"},
	} {
		instr, target, err := amCommand(strings.Fields(tt.argv))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.argv, err, tt.err)
			}
			continue
		}
		if err != nil || instr != tt.instr || target != tt.target {
			t.Errorf("%s: %q %q %v, want %q %q", tt.argv, instr, target, err, tt.instr, tt.target)
		}
	}
}

func TestParseInstrumentations(t *testing.T) {
	out := "instrumentation:com.example.test/androidx.test.runner.AndroidJUnitRunner (target=com.example)\r\n" +
		"instrumentation:androidx.test.orchestrator/.AndroidTestOrchestrator (target=androidx.test.orchestrator)\r\n" +
		"garbage\r\n"
	got := parseInstrumentations(out)
	want := []instrumentation{{"com.example.test/androidx.test.runner.AndroidJUnitRunner", "com.example"},
		{"androidx.test.orchestrator/.AndroidTestOrchestrator", "androidx.test.orchestrator"}}
	if !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
	if c := expandComponent("a.b/.C"); c != "a.b/a.b.C" {
		t.Errorf("expand: %q", c)
	}
}

func TestLogcatArgs(t *testing.T) {
	for api, want := range map[int]string{
		19: "logcat -v threadtime -s TestRunner",
		21: "logcat -v threadtime -T 1 -s TestRunner",
		24: "logcat -v threadtime -v year -v zone -T 1 -s TestRunner",
		31: "logcat -v threadtime,epoch,nsec -T 1 -s TestRunner",
	} {
		if got := strings.Join(logcatArgs(api), " "); got != want {
			t.Errorf("API %d: %q, want %q", api, got, want)
		}
		if slices.Contains(logcatArgs(api), "-c") {
			t.Errorf("API %d: logcat clears the device's log", api)
		}
	}
}

// TestTestExitPrecedence: 4 (a cut run) before 6 (failed tests); am
// unable to start the run is 6.
func TestTestExitPrecedence(t *testing.T) {
	failed := &pertest.Run{Complete: true, Tests: []pertest.Test{{Name: "a(C)", Outcome: pertest.Passed}, {Name: "b(C)", Outcome: pertest.Failed}}}
	passed := &pertest.Run{Complete: true, Tests: []pertest.Test{{Name: "a(C)", Outcome: pertest.Passed}}}
	for _, tt := range []struct {
		name string
		res  offline.RunRecord
		code int
		msg  string
	}{
		{"ok", offline.RunRecord{Run: passed}, exitOK, ""},
		{"failed", offline.RunRecord{Run: failed}, exitTestsFailed, "b(C) failed"},
		{"crashed process", offline.RunRecord{Run: passed, Am: instrument.Result{Values: map[string]string{"shortMsg": "Process crashed."}}}, exitTestsFailed, "crashed"},
		{"gone and failed", offline.RunRecord{Run: failed, Gone: errors.New("offline")}, exitInsufficient, "went away"},
		{"stopped", offline.RunRecord{Run: passed, Stopped: true}, exitInsufficient, "stopped"},
		{"cut", offline.RunRecord{Run: passed, AmErr: fmt.Errorf("x: %w", instrument.ErrIncomplete)}, exitInsufficient, "ended before the run did"},
		{"not started", offline.RunRecord{Run: &pertest.Run{}, AmErr: &instrument.FailedError{Msg: "Unable to find instrumentation info"}}, exitTestsFailed, "could not start the run: Unable to find"},
	} {
		s := &testRunSpec{serial: "s1", argv: []string{"am"}}
		var stderr bytes.Buffer
		code := s.exitStatus(&tt.res, s.insufficient(&tt.res), "alloctrack test", &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
			t.Errorf("%s: exit %d %q, want %d with %q", tt.name, code, stderr.String(), tt.code, tt.msg)
		}
	}
}

func TestTestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"test", "--out", t.TempDir(), "--", "am", "instrument", "-w", "pkg/R"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "-r (the status blocks") {
		t.Fatalf("exit %d, %q", code, stderr.String())
	}
}

func TestCaptureTestsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"capture", "--tests", "--pid", "123"},
		{"capture", "--tests", "--package", "com.example.app", "--pid", "123"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append(args, "--out", t.TempDir()), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--package") {
			t.Errorf("%q: exit %d, %q", args, code, stderr.String())
		}
	}
}
