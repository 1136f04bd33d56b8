package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/internal/hproftest"
	"github.com/alloctrack/alloctrack/internal/tialloctest"
	"github.com/alloctrack/alloctrack/sim"
)

// fakeCapture writes a capture directory holding the real report as its
// only window (unless noWindow) and the summary edit makes of a whole
// 10-second run (no summary.json when edit is nil and whole is false).
func fakeCapture(t *testing.T, noWindow bool, edit func(s *offline.Summary)) string {
	t.Helper()
	dir := t.TempDir()
	if !noWindow {
		b, err := os.ReadFile(realReport)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "1.alloc"), b, 0o644)
	}
	if edit == nil {
		return dir
	}
	s := offline.Summary{Windows: 1, DurationSeconds: 10.2, RequestedSeconds: 10}
	edit(&s)
	b, _ := json.Marshal(s)
	os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644)
	return dir
}

// TestGateRefusesLessThanARun: a budget check (report --budget) and a diff
// of an input that holds less than a whole run exit 4 and say why, for
// every kind of shortfall; --allow-partial or --allow-empty judges it
// anyway, with a warning; a whole run is judged as before.
func TestGateRefusesLessThanARun(t *testing.T) {
	whole := fakeCapture(t, false, func(*offline.Summary) {})
	empty := filepath.Join(t.TempDir(), "empty.alloc")
	enc, err := allocreport.Encode(&allocreport.Report{})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(empty, enc, 0o644)
	bud := writeBudget(t, "total: {max_allocations_per_second: 1000000}\n")
	for _, tc := range []struct {
		name, input, why, allow string
	}{
		{"failed", fakeCapture(t, true, func(s *offline.Summary) { s.Windows, s.Error = 0, "ddms: REAQ unanswered" }), "the capture failed: ddms: REAQ unanswered", "--allow-partial"},
		{"interrupted", fakeCapture(t, false, func(s *offline.Summary) { s.Interrupted, s.DurationSeconds = true, 3 }), "the capture was interrupted after 3.0s of the 10.0s asked", "--allow-partial"},
		{"short", fakeCapture(t, false, func(s *offline.Summary) { s.DurationSeconds = 4 }), "the capture ran 4.0s of the 10.0s asked", "--allow-partial"},
		{"windows missing", fakeCapture(t, false, func(s *offline.Summary) { s.Windows = 3 }), "summary.json counts 3 windows, the directory holds 1 .alloc files", "--allow-partial"},
		{"unfinished", fakeCapture(t, false, nil), "no summary.json: the capture did not finish", "--allow-partial"},
		{"no window", fakeCapture(t, true, func(s *offline.Summary) { s.Windows = 0 }), "the capture recorded no window", "--allow-empty"},
		{"empty report", empty, "no allocation recorded (exact)", "--allow-empty"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			for _, args := range [][]string{{"report", "--budget", bud, tc.input}, {"diff", whole, tc.input}} {
				_, errOut, code := runCmd(t, args...)
				if code != exitInsufficient || !strings.Contains(errOut, tc.why) || !strings.Contains(errOut, tc.allow+" judges it anyway") || strings.Contains(errOut, "within budget") {
					t.Errorf("%s: exit %d, want %d saying %q; stderr:\n%s", args[0], code, exitInsufficient, tc.why, errOut)
				}
			}
			if tc.name == "unfinished" || tc.name == "windows missing" {
				return // no duration, or one that holds less: judged anyway below only where it means something
			}
			args := []string{"report", "--budget", bud, "--allow-partial", "--allow-empty", tc.input}
			if tc.name == "empty report" || tc.name == "failed" || tc.name == "no window" {
				args[2] = writeBudget(t, "total: {max_allocations: 10}\n")
			}
			_, errOut, code := runCmd(t, args...)
			if code != exitOK || !strings.Contains(errOut, "warning: insufficient data") || !strings.Contains(errOut, "within budget") {
				t.Errorf("allowed: exit %d; stderr:\n%s", code, errOut)
			}
		})
	}
	if _, errOut, code := runCmd(t, "report", "--budget", bud, whole); code != exitOK || strings.Contains(errOut, "insufficient") {
		t.Errorf("a whole run: exit %d; stderr:\n%s", code, errOut)
	}
	if _, errOut, code := runCmd(t, "diff", whole, whole); code != exitOK || errOut != "" {
		t.Errorf("diff of whole runs: exit %d; stderr:\n%s", code, errOut)
	}
	// Filters that keep nothing leave nothing to judge either.
	_, errOut, code := runCmd(t, "report", "--budget", bud, "--class", "no\\.such\\.Class", whole)
	if code != exitInsufficient || !strings.Contains(errOut, "--class, --frame and --thread keep no allocation") {
		t.Errorf("--class keeping nothing: exit %d; stderr:\n%s", code, errOut)
	}
}

// TestBudgetOfFailedCapture is the case as it happens: capture
// --backend ddm on an Android 12 device exits 1 and leaves a summary.json
// with "error" and no window; report --budget and diff of it then exit 4,
// not "within budget, 0 allocations per second".
func TestBudgetOfFailedCapture(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{APIs: []int{31}, AppsPerDevice: 1, Workload: quietCaptureWorkload()})
	addr, _ := serveSimHost(t, f)
	dir := filepath.Join(t.TempDir(), "capture")
	_, errOut, code := runCmd(t, "capture", "--adb.address", addr, "--serial", "sim-1", "--package", "com.example.app1",
		"--backend", "ddm", "--duration", "2s", "--window", "500ms", "--window.min", "250ms", "--request.timeout", "1s", "--out", dir)
	if code != exitFailure {
		t.Fatalf("capture: exit %d, stderr:\n%s", code, errOut)
	}
	bud := writeBudget(t, "total: {max_allocations_per_second: 5000}\n")
	_, errOut, code = runCmd(t, "report", "--budget", bud, dir)
	if code != exitInsufficient || !strings.Contains(errOut, "the capture failed") || strings.Contains(errOut, "within budget") {
		t.Errorf("report --budget: exit %d, stderr:\n%s", code, errOut)
	}
	_, errOut, code = runCmd(t, "diff", dir, dir)
	if code != exitInsufficient || !strings.Contains(errOut, "the capture failed") {
		t.Errorf("diff: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestCaptureBudgetOfNothing: capture --budget of an app that allocated
// nothing in the run exits 4 (nothing to judge), and 0 with --allow-empty.
func TestCaptureBudgetOfNothing(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, Workload: quietCaptureWorkload()})
	addr, _ := serveSimHost(t, f)
	bud := writeBudget(t, "total: {max_allocations: 10}\n")
	for _, tc := range []struct {
		allow []string
		code  int
		want  string
	}{
		{nil, exitInsufficient, "no allocation recorded (exact); not judged (exit status 4; --allow-empty judges it anyway)"},
		{[]string{"--allow-empty"}, exitOK, "judged anyway (--allow-empty)"},
	} {
		dir := filepath.Join(t.TempDir(), "capture")
		args := append([]string{"capture", "--adb.address", addr, "--serial", "sim-1", "--package", "com.example.app1",
			"--duration", "1s", "--window", "500ms", "--window.min", "250ms", "--out", dir, "--budget", bud}, tc.allow...)
		_, errOut, code := runCmd(t, args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d saying %q; stderr:\n%s", tc.allow, code, tc.code, tc.want, errOut)
		}
	}
}

// TestGateRefusesWhatInputsLost: inputs that show they lost data are
// partial too (report windows that overflowed, an agent log cut short, a
// heapprofd capture without its trace), and a heap dump with no object is
// empty.
func TestGateRefusesWhatInputsLost(t *testing.T) {
	b := allocreport.NewBuilder()
	for b.Len() < allocreport.MaxEntries {
		b.Add(16, 1, "Ljava/lang/Object;", []allocreport.FrameName{{Class: "Lcom/example/Main;", Method: "run", File: "Main.java", Line: 7}})
	}
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	enc, err := allocreport.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(t.TempDir(), "full.alloc")
	os.WriteFile(full, enc, 0o644)
	w := tialloctest.NewWriter()
	w.Add(tialloctest.Sample{Thread: "main", Class: "[B", Size: 24, Frames: []string{"LMain;::run()V"}})
	w.Add(tialloctest.Sample{Thread: "main", Class: "[B", Size: 24, Frames: []string{"LMain;::run()V"}})
	cut := filepath.Join(t.TempDir(), "cut.log")
	os.WriteFile(cut, []byte(strings.TrimSuffix(w.String(), "\n")), 0o644)
	noTrace := fakeCapture(t, true, func(s *offline.Summary) { s.Windows, s.Backend, s.Dumps = 0, "heapprofd", 3 })
	dump := filepath.Join(t.TempDir(), "empty.hprof")
	os.WriteFile(dump, hproftest.NewBuilder("JAVA PROFILE 1.0.3").Bytes(), 0o644)

	bud := writeBudget(t, "total: {max_allocations: 100000000}\nheap: {max_leaked_activities: 0}\n")
	for _, c := range []struct {
		input, why, allow string
		extra             []string
	}{
		{full, "1 of 1 windows overflowed (65535 entries)", "--allow-partial", nil},
		{cut, "the log's last line was cut short", "--allow-partial", []string{"--agent.rate", "1"}},
		{noTrace, "summary.json says heapprofd, and the directory holds no trace.perfetto-trace", "--allow-partial", nil},
		{dump, "the heap dump holds no object", "--allow-empty", nil},
	} {
		args := append(append([]string{"report", "--budget", bud}, c.extra...), c.input)
		_, errOut, code := runCmd(t, args...)
		if code != exitInsufficient || !strings.Contains(errOut, c.why) || !strings.Contains(errOut, c.allow+" judges it anyway") {
			t.Errorf("%s: exit %d, want %d saying %q; stderr:\n%s", c.input, code, exitInsufficient, c.why, errOut)
		}
	}
}

// TestHeapCaptureWithoutDump: a heap capture directory whose heap.hprof
// is gone is an error, not an allocation capture of 0 allocations.
func TestHeapCaptureWithoutDump(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "summary.json"), []byte(`{"kind": "heapdump", "objects": 12}`), 0o644)
	bud := writeBudget(t, "total: {max_allocations: 10}\n")
	_, errOut, code := runCmd(t, "report", "--budget", bud, "--allow-empty", "--allow-partial", dir)
	if code != exitFailure || !strings.Contains(errOut, "a heap dump capture without its heap.hprof") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestReportKeepsWorstDumpVerdict: report --budget of several heap dumps
// exits with the worst verdict of them all, whatever their order: an input
// that could not be read (1) or not be judged (4) is not hidden by a later
// dump's "over budget" (3).
func TestReportKeepsWorstDumpVerdict(t *testing.T) {
	dir := t.TempDir()
	empty, leaky, bad := filepath.Join(dir, "empty.hprof"), filepath.Join(dir, "leaky.hprof"), filepath.Join(dir, "bad.hprof")
	os.WriteFile(empty, hproftest.NewBuilder("JAVA PROFILE 1.0.3").Bytes(), 0o644)
	os.WriteFile(leaky, hproftest.LeakyDump(), 0o644)
	os.WriteFile(bad, []byte("JAVA PROFILE 1.0.3\x00garbage"), 0o644)
	bud := writeBudget(t, "heap: {max_leaked_activities: 0}\n")
	for _, c := range []struct {
		inputs []string
		want   int
	}{
		{[]string{empty, leaky}, exitInsufficient},
		{[]string{leaky, empty}, exitInsufficient},
		{[]string{bad, leaky}, exitFailure},
		{[]string{leaky, bad}, exitFailure},
	} {
		_, errOut, code := runCmd(t, append([]string{"report", "--budget", bud}, c.inputs...)...)
		if code != c.want {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", c.inputs, code, c.want, errOut)
		}
	}
}

// TestDiffOfEmptyDumpsSaysBoth: diff of two heap dumps that hold no
// object says why for each, as a diff of two short captures does, not for
// the first alone.
func TestDiffOfEmptyDumpsSaysBoth(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.hprof"), filepath.Join(dir, "b.hprof")
	for _, p := range []string{a, b} {
		os.WriteFile(p, hproftest.NewBuilder("JAVA PROFILE 1.0.3").Bytes(), 0o644)
	}
	_, errOut, code := runCmd(t, "diff", a, b)
	if code != exitInsufficient || !strings.Contains(errOut, a+": the heap dump holds no object") || !strings.Contains(errOut, b+": the heap dump holds no object") {
		t.Errorf("exit %d, want %d naming both; stderr:\n%s", code, exitInsufficient, errOut)
	}
}
