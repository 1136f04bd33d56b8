package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// classReport writes a report of objs java.lang.Object and ints int[]
// allocations of 16 bytes each, at two sites.
func classReport(t *testing.T, objs, ints int) string {
	t.Helper()
	b := allocreport.NewBuilder()
	for range objs {
		b.Add(16, 1, "Ljava/lang/Object;", []allocreport.FrameName{{Class: "Lcom/example/Main;", Method: "make", File: "Main.java", Line: 7}})
	}
	for range ints {
		b.Add(16, 1, "[I", []allocreport.FrameName{{Class: "Lcom/example/Main;", Method: "fill", File: "Main.java", Line: 9}})
	}
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	enc, err := allocreport.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "run.alloc")
	os.WriteFile(p, enc, 0o644)
	return p
}

// noise is a fixed run-to-run spread of about 3 %.
var noise = []float64{1.00, 1.03, 0.97, 1.02, 0.98}

// sideArgs writes n runs a side: Object scaled by objScale, int[] steady.
func sideArgs(t *testing.T, flag string, n int, objScale float64) []string {
	var args []string
	for i := range n {
		args = append(args, flag, classReport(t, int(1000*objScale*noise[i]), int(500*noise[(i+2)%5])))
	}
	return args
}

func diffRunsJSON(t *testing.T, out string) (d struct {
	Comparisons, Breaches int
	TooFew                int `json:"too_few"`
	Rows                  []struct {
		Metric, Key   string
		Ratio, Lo, Hi *float64
		Breach        bool
		TooFew        bool `json:"too_few"`
	}
}) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return d
}

// Five runs a side: +50 % on Object is a breach (exit 3), named first with
// an interval around 1.5; int[] does not move and is not.
func TestDiffRunsBreach(t *testing.T) {
	args := append(append([]string{"diff", "--format", "json"}, sideArgs(t, "--base", 5, 1)...), sideArgs(t, "--new", 5, 1.5)...)
	out, errOut, code := runCmd(t, args...)
	if code != exitBudget {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitBudget, errOut)
	}
	d := diffRunsJSON(t, out)
	if d.Comparisons != 4 || d.Breaches != 2 || len(d.Rows) != 4 {
		t.Fatalf("comparisons %d breaches %d rows %d, want 4 2 4", d.Comparisons, d.Breaches, len(d.Rows))
	}
	for i, r := range d.Rows {
		obj := r.Key == "class:java.lang.Object"
		if obj != (i < 2) || r.Breach != obj {
			t.Errorf("row %d %s %s: breach %v", i, r.Key, r.Metric, r.Breach)
		}
		if obj && (*r.Ratio < 1.49 || *r.Ratio > 1.51 || *r.Lo > 1.5 || *r.Hi < 1.5) {
			t.Errorf("Object %s: ratio %v in [%v, %v]", r.Metric, *r.Ratio, *r.Lo, *r.Hi)
		}
	}
	if again, _, _ := runCmd(t, args...); again != out {
		t.Errorf("the same runs gave another result:\n%s\n---\n%s", out, again)
	}
	bytesOnly, _, _ := runCmd(t, append(args, "--metric", "bytes")...)
	if d := diffRunsJSON(t, bytesOnly); d.Comparisons != 2 || d.Rows[0].Metric != "bytes" || d.Rows[1].Metric != "bytes" {
		t.Errorf("--metric bytes: %d comparisons, rows %+v", d.Comparisons, d.Rows)
	}
	text, _, _ := runCmd(t, append([]string{"diff"}, args[3:]...)...)
	first := strings.Split(strings.Split(text, "largest regression first\n")[1], "\n")[1]
	if !strings.HasPrefix(strings.TrimSpace(first), "BREACH") || !strings.Contains(first, "java.lang.Object") {
		t.Errorf("text output does not name the breach first:\n%s", text)
	}
	if !strings.Contains(text, "base 5 runs: 5 exact") || !strings.Contains(text, "by class, per run; level 0.05 over 4 comparisons (Holm)") {
		t.Errorf("text head:\n%s", text)
	}
}

// The same build on both sides: nothing significant, exit 0; --by site
// names the sites.
func TestDiffRunsSameBuild(t *testing.T) {
	args := append(append([]string{"diff", "--by", "site"}, sideArgs(t, "--base", 5, 1)...), sideArgs(t, "--new", 5, 1)...)
	out, errOut, code := runCmd(t, args...)
	if code != exitOK || strings.Contains(out, "BREACH") || errOut != "" {
		t.Fatalf("exit %d, stderr %q:\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "java.lang.Object at com.example.Main.make") {
		t.Errorf("site labels missing:\n%s", out)
	}
}

// Two runs a side cannot find +10 % in 3 % noise: diff says so and how
// many runs would; 3 runs of exact counts with no spread are enough.
func TestDiffRunsTooFew(t *testing.T) {
	args := append(append([]string{"diff", "--format", "json"}, sideArgs(t, "--base", 2, 1)...), sideArgs(t, "--new", 2, 1)...)
	out, errOut, code := runCmd(t, args...)
	if code != exitOK || !strings.Contains(errOut, "too few runs to detect +10 % at level 0.05 in 4 of 4 rows") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if d := diffRunsJSON(t, out); d.TooFew != 4 {
		t.Errorf("too few in %d rows, want 4", d.TooFew)
	}
	var steady []string
	for _, f := range []string{"--base", "--base", "--base", "--new", "--new", "--new"} {
		steady = append(steady, f, classReport(t, 100, 50))
	}
	if _, errOut, code := runCmd(t, append([]string{"diff"}, steady...)...); code != exitOK || errOut != "" {
		t.Errorf("steady counts: exit %d, stderr %q", code, errOut)
	}
}

// Per test, from tests.json: flakiness (CV) per test, a breach on the test
// that grew, a run that did not finish exits 4 (judged with --allow-partial).
func TestDiffRunsByTest(t *testing.T) {
	run := func(scale float64, i int, complete bool) string {
		r := &pertest.Run{Package: "x", Backend: "ddm", Complete: complete}
		names := []string{"a(p.T)", "b(p.T)"}
		if scale != 1 {
			names = append(names, "c(p.T)") // added
		}
		for j, name := range names {
			f := noise[(i+j)%5]
			if j == 0 {
				f *= scale
			}
			r.Tests = append(r.Tests, pertest.Test{Name: name, Class: "p.T", Method: name[:1], Outcome: pertest.Passed,
				Figures: pertest.Figures{Allocations: uint64(1000 * f), Bytes: uint64(16000 * f)}})
		}
		dir := t.TempDir()
		data, _ := json.Marshal(r)
		os.WriteFile(filepath.Join(dir, offline.TestsFile), data, 0o644)
		return dir
	}
	var args []string
	for i := range 5 {
		args = append(args, "--base", run(1, i, true), "--new", run(1.3, i, i != 3))
	}
	_, errOut, code := runCmd(t, append([]string{"diff", "--by", "test"}, args...)...)
	if code != exitInsufficient || !strings.Contains(errOut, "did not finish") {
		t.Fatalf("unfinished run: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := runCmd(t, append([]string{"diff", "--by", "test", "--allow-partial"}, args...)...)
	if code != exitBudget || strings.Contains(errOut, "too few") {
		t.Fatalf("exit %d, stderr %q:\n%s", code, errOut, out)
	}
	if rows := strings.Split(strings.TrimSpace(out), "\n"); !strings.HasPrefix(strings.TrimSpace(rows[len(rows)-1]), "added") || !strings.HasSuffix(rows[len(rows)-1], "c(p.T)") {
		t.Errorf("the added test c(p.T) is not marked added:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	var breach []string
	for _, l := range lines {
		if strings.Contains(l, "BREACH") {
			breach = append(breach, l)
		}
	}
	if len(breach) != 2 || !strings.HasSuffix(breach[0], "a(p.T)") || !strings.Contains(breach[0], "2.5%") {
		t.Errorf("breaches (want a(p.T), allocations and bytes, base CV 2.5%%):\n%s", out)
	}
	if _, errOut, code := runCmd(t, "diff", "--base", run(1, 0, true), "--base", classReport(t, 1, 1), "--new", run(1, 1, true), "--by", "test"); code != exitInsufficient || !strings.Contains(errOut, "holds no test run") {
		t.Errorf("a report in --by test: exit %d, stderr %q", code, errOut)
	}
}

// One run a side through --base and --new is today's two-run diff; bad
// combinations are usage errors.
func TestDiffRunsSyntax(t *testing.T) {
	b, n := classReport(t, 10, 5), classReport(t, 12, 5)
	two, _, code := runCmd(t, "diff", b, n)
	one, _, code2 := runCmd(t, "diff", "--base", b, "--new", n)
	if code != 0 || code2 != 0 || one != two {
		t.Errorf("--base/--new with one run each differs from two arguments:\n%s\n---\n%s", one, two)
	}
	for _, args := range [][]string{
		{"diff", "--base", b, n},
		{"diff", "--base", b, "--base", b},
		{"diff", b},
		{"diff", "--base", b, "--base", b, "--new", n, "--level", "2"},
	} {
		if _, errOut, code := runCmd(t, args...); code != exitUsage || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestDiffRunsMixed: runs of another device model are refused (exit 4,
// naming what differs) unless --mixed; then they are compared, flagged.
func TestDiffRunsMixed(t *testing.T) {
	run := func(model string, i int) string {
		dir := t.TempDir()
		r := &pertest.Run{Package: "x", Backend: "ddm", Complete: true, Tests: []pertest.Test{{Name: "a(p.T)", Class: "p.T", Method: "a",
			Outcome: pertest.Passed, Figures: pertest.Figures{Allocations: uint64(1000 * noise[i]), Bytes: uint64(16000 * noise[i])}}}}
		data, _ := json.Marshal(r)
		os.WriteFile(filepath.Join(dir, offline.TestsFile), data, 0o644)
		sum, _ := json.Marshal(offline.Summary{CaptureMeta: offline.CaptureMeta{Model: model, API: 30, Package: "x", AppVersion: "1"}})
		os.WriteFile(filepath.Join(dir, "summary.json"), sum, 0o644)
		return dir
	}
	var args []string
	for i := range 5 {
		args = append(args, "--base", run("Pixel 7", i), "--new", run("Pixel 8", i))
	}
	args = append([]string{"diff", "--by", "test"}, args...)
	if _, errOut, code := runCmd(t, args...); code != exitInsufficient || !strings.Contains(errOut, "device model Pixel 7 ≠ Pixel 8") {
		t.Fatalf("another device: exit %d, stderr %q", code, errOut)
	}
	if out, errOut, code := runCmd(t, append(args, "--mixed")...); code != exitOK || !strings.Contains(errOut, "Pixel 8") {
		t.Fatalf("--mixed: exit %d, stderr %q\n%s", code, errOut, out)
	}
}
