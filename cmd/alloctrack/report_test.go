package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/internal/hproftest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

var realReport = filepath.Join("..", "..", "testdata", "real", "geektime-chapter03-1544113611.real")

func runCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return o.String(), e.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s (go test -update rewrites it):\n%s", path, got)
	}
}

func TestReportTextGolden(t *testing.T) {
	out, errOut, code := runCmd(t, "report", "--top", "5", realReport)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "report-real.txt", strings.ReplaceAll(out, realReport, "REAL"))
}

func TestReportJSONL(t *testing.T) {
	out, errOut, code := runCmd(t, "report", "--format", "jsonl", realReport)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5000 {
		t.Fatalf("%d lines, want 5000", len(lines))
	}
	want := `{"num":5000,"class":"java.lang.Object[]","size":16,"thread":3311,"frames":[{"class":"java.util.Arrays","method":"copyOf","file":"Arrays.java","line":3139},`
	if !strings.HasPrefix(lines[0], want) {
		t.Fatalf("first line %.200s", lines[0])
	}
	var rec struct {
		Num    int    `json:"num"`
		Class  string `json:"class"`
		Size   uint32 `json:"size"`
		Thread uint16 `json:"thread"`
		Frames []struct {
			Class, Method, File string
			Line                int
		} `json:"frames"`
	}
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v", i+1, err)
		}
		if rec.Num != 5000-i {
			t.Fatalf("line %d has num %d", i+1, rec.Num)
		}
	}
}

func TestReportBadFileKeepsGoing(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.alloc")
	os.WriteFile(bad, []byte{15, 9, 8, 0, 1, 0, 0, 0, 15, 0, 0, 0, 0, 0, 0}, 0o644)
	out, errOut, code := runCmd(t, "report", bad, filepath.Join(dir, "missing.alloc"), realReport)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	errLines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if len(errLines) != 2 || !strings.Contains(errLines[0], "bad.alloc") || !strings.Contains(errLines[0], "at byte") ||
		!strings.Contains(errLines[1], "missing.alloc") {
		t.Fatalf("stderr:\n%s", errOut)
	}
	// Plain words first, the program's name once.
	if !strings.Contains(errLines[0], "a damaged allocation report (.alloc)") ||
		strings.Contains(errLines[0], "REAL report") {
		t.Errorf("the bad file's error: %s", errLines[0])
	}
	if !strings.Contains(out, "allocations 5000, bytes 287096") {
		t.Fatalf("the good file was not reported:\n%s", out)
	}
}

// A file that is no input at all (text, or text whose first byte looks
// like a trace's) gets a message that names every kind report and diff
// read, and none of the parsers' words.
func TestUnknownInputNamesEveryKind(t *testing.T) {
	dir := t.TempDir()
	for _, body := range []string{"hello, world\n", "\nhello\n", ""} {
		bad := filepath.Join(dir, "bad.txt")
		os.WriteFile(bad, []byte(body), 0o644)
		for _, args := range [][]string{{"report", bad}, {"diff", bad, realReport}} {
			_, errOut, code := runCmd(t, args...)
			if code != exitFailure || !strings.Contains(errOut, bad+": not an input alloctrack reads") {
				t.Errorf("%q %v: exit %d %s", body, args, code, errOut)
			}
			for _, kind := range []string{".alloc", "perfetto traces", "agent logs", "heap dumps (hprof)", "capture directories"} {
				if !strings.Contains(errOut, kind) {
					t.Errorf("%q %v: the message does not name %s: %s", body, args, kind, errOut)
				}
			}
			for _, internal := range []string{"REAL report", "header_len", "perfetto:", "wire type"} {
				if strings.Contains(errOut, internal) {
					t.Errorf("%q %v: the message shows %q: %s", body, args, internal, errOut)
				}
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"report"},
		{"report", "--format", "xml", realReport},
		{"report", "--top", "-1", realReport},
		{"report", "--class", "(", realReport},
		{"report", "--thread", "70000", realReport},
		{"nosuchcommand"},
	} {
		_, errOut, code := runCmd(t, args...)
		if code != exitUsage || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q; want %d and a message", args, code, errOut, exitUsage)
		}
	}
}

// A heap dump given to report is told apart by its content and summarised
// as a class histogram per heap; other formats and budgets are refused.
func TestReportHeapDump(t *testing.T) {
	p := filepath.Join(t.TempDir(), "app.hprof")
	if err := os.WriteFile(p, hproftest.AndroidDump(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCmd(t, "report", p)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"JAVA PROFILE 1.0.3", "8 objects", "heap app", "heap zygote", "           3             24              0  com.example.Foo", "           1              8              8  com.example.Foo", "6 unreachable (152 bytes)"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if _, errOut, code := runCmd(t, "report", "--format", "jsonl", p); code != exitUsage || !strings.Contains(errOut, "text, json or csv") {
		t.Errorf("jsonl of a heap dump: exit %d, %q", code, errOut)
	}
	// A heap dump does not compare with allocations.
	if _, errOut, code := runCmd(t, "diff", p, realReport); code != exitUsage || !strings.Contains(errOut, "one input is a heap dump") {
		t.Errorf("diff of a heap dump and a report: exit %d, %q", code, errOut)
	}
}

// A dump's leaks, duplicates and retained sizes in text, JSON and CSV.
func TestReportHeapDumpAnswers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "leaky.hprof")
	if err := os.WriteFile(p, hproftest.LeakyDump(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCmd(t, "report", p)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"leaked Activities and Fragments: 2",
		"com.example.MainActivity 0x1000 (activity, mDestroyed is true), retains 1006 bytes",
		"GC root (system class) class com.example.Leaky 0x103\n        via static sActivity\n      com.example.MainActivity 0x1000",
		"duplicate Strings: 1 groups", `"hello"`, "duplicate Bitmaps: 1 groups", `"10x10"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	out, _, code = runCmd(t, "report", "--format", "json", p)
	var s dumpSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil || code != exitOK {
		t.Fatalf("exit %d, %v", code, err)
	}
	if len(s.Analysis.Leaks) != 2 || len(s.Analysis.Leaks[0].Path) != 2 || s.Analysis.Leaks[0].Path[0].Ref != "static sActivity" || len(s.Classes) == 0 {
		t.Errorf("json %+v", s)
	}
	out, _, code = runCmd(t, "report", "--format", "csv", p)
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || code != exitOK || len(rows) != len(s.Classes)+1 || rows[0][5] != "retained_bytes" {
		t.Errorf("csv: exit %d, %v, %d rows", code, err, len(rows))
	}
}

// Heap budgets: leaks, class rules per heap, duplicates; budgets and
// inputs of the other kind are refused.
func TestHeapDumpBudgets(t *testing.T) {
	p := filepath.Join(t.TempDir(), "leaky.hprof")
	if err := os.WriteFile(p, hproftest.LeakyDump(), 0o644); err != nil {
		t.Fatal(err)
	}
	pass := writeBudget(t, "heap:\n  classes:\n    - match: 'com\\.example\\.MainActivity'\n      heap: app\n      max_instances: 3\n      max_retained_bytes: 1012\n  max_duplicate_bytes: 448\n")
	_, errOut, code := runCmd(t, "report", "--budget", pass, p)
	if code != exitOK || !strings.Contains(errOut, "within budget (3 limits)") || !strings.Contains(errOut, "1012 retained bytes, limit 1012") {
		t.Errorf("pass: exit %d, %q", code, errOut)
	}
	fail := writeBudget(t, "heap:\n  max_leaked_activities: 0\n  max_leaked_fragments: 1\n  classes: [{match: 'java\\.lang\\.String', max_instances: 5}]\n")
	_, errOut, code = runCmd(t, "report", "--budget", fail, p)
	if code != exitBudget || !strings.Contains(errOut, "heap: 1 leaked Activities exceeds the limit 0") || !strings.Contains(errOut, "6 instances exceeds the limit 5") || strings.Contains(errOut, "Fragments exceeds") {
		t.Errorf("fail: exit %d, %q", code, errOut)
	}
	for _, c := range []struct {
		budget, input, want string
	}{
		{"total:\n  max_allocations: 5\n", p, "no heap limits"},
		{"heap:\n  max_leaked_activities: 0\n", realReport, "limits heap dumps only"},
		{"heap:\n  classes: [{match: '(', max_instances: 1}]\n", p, "heap.classes[0] match '(' is not a regular expression"},
		{"heap:\n  classes: [{match: 'x'}]\n", p, "heap.classes[0] sets no limit"},
		{"heap: {}\n", p, "heap sets no limit"},
	} {
		_, errOut, code := runCmd(t, "report", "--budget", writeBudget(t, c.budget), c.input)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%q on %s: exit %d, %q, want %q", c.budget, c.input, code, errOut, c.want)
		}
	}
}

// diff of two dumps: per heap and class, leaks and duplicates.
func TestDiffHeapDumps(t *testing.T) {
	dir := t.TempDir()
	base, nw := filepath.Join(dir, "base.hprof"), filepath.Join(dir, "new.hprof")
	os.WriteFile(base, hproftest.AndroidDump(), 0o644)
	os.WriteFile(nw, hproftest.LeakyDump(), 0o644)
	out, errOut, code := runCmd(t, "diff", "--format", "json", "--top", "0", base, nw)
	var d offline.DumpDiff
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != exitOK {
		t.Fatalf("exit %d %s, %v", code, errOut, err)
	}
	if d.BaseLeaks != 0 || d.NewLeaks != 2 || d.BaseDuplicates != 0 || d.NewDuplicates != 448 {
		t.Errorf("leaks %d -> %d, duplicates %d -> %d", d.BaseLeaks, d.NewLeaks, d.BaseDuplicates, d.NewDuplicates)
	}
	found := 0
	for _, r := range d.Classes {
		switch {
		case r.Heap == "app" && r.Class == "com.example.MainActivity":
			found++
			if r.Base != (offline.DumpCount{}) || r.New != (offline.DumpCount{Instances: 3, Bytes: 18, Retained: 1012}) || r.Change != r.New {
				t.Errorf("MainActivity %+v", r)
			}
		case r.Heap == "zygote" && r.Class == "com.example.Foo":
			found++
			if r.New != (offline.DumpCount{}) || r.Change.Instances != -1 || r.Change.Retained != -8 {
				t.Errorf("Foo %+v", r)
			}
		}
	}
	if found != 2 || d.Classes[0].Class != "byte[]" {
		t.Errorf("rows %+v", d.Classes)
	}
	out, _, code = runCmd(t, "diff", base, nw)
	if code != exitOK || !strings.Contains(out, "leaked Activities and Fragments 0 -> 2") {
		t.Errorf("text: exit %d\n%s", code, out)
	}
}

// heapdump --shrink and --standard on a file: the shrunk dump still
// reports its leaks; the standard one is hprof 1.0.2; errors say why.
func TestHeapdumpFileCommands(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "leaky.hprof")
	os.WriteFile(in, hproftest.LeakyDump(), 0o644)
	for _, c := range []struct {
		args    []string
		version string
	}{{[]string{"--shrink"}, "JAVA PROFILE 1.0.3"}, {[]string{"--standard"}, "JAVA PROFILE 1.0.2"}, {[]string{"--shrink", "--standard", "--app-only"}, "JAVA PROFILE 1.0.2"}} {
		out := filepath.Join(dir, "out.hprof")
		_, errOut, code := runCmd(t, append([]string{"heapdump", "--in", in, "--out", out}, c.args...)...)
		if code != exitOK || !strings.Contains(errOut, "% of "+in) {
			t.Fatalf("%v: exit %d, %q", c.args, code, errOut)
		}
		b, _ := os.ReadFile(out)
		if !bytes.HasPrefix(b, []byte(c.version+"\x00")) {
			t.Errorf("%v: %.20q", c.args, b)
		}
		rep, _, code := runCmd(t, "report", out)
		if code != exitOK || !strings.Contains(rep, "leaked Activities and Fragments: 2") {
			t.Errorf("%v: report exit %d\n%s", c.args, code, rep)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 2 {
			t.Errorf("%v: %d files left in the directory, want the input and the output", c.args, len(ents))
		}
		os.Remove(out)
	}
	mine, truncated := filepath.Join(dir, "mine.hprof"), filepath.Join(dir, "truncated.hprof")
	os.WriteFile(mine, []byte("mine"), 0o644)
	os.WriteFile(filepath.Join(dir, "fresh.hprof.tmp"), []byte("mine too"), 0o644)
	os.WriteFile(truncated, hproftest.LeakyDump()[:400], 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--in", in, "--out", filepath.Join(dir, "x")}, exitUsage, "give --shrink, --standard or both"},
		{[]string{"--in", in, "--out", in, "--shrink"}, exitUsage, "is the input"},
		{[]string{"--in", in, "--out", filepath.Join(dir, "x"), "--shrink", "--app-only"}, exitUsage, "--app-only goes with --standard"},
		{[]string{"--in", realReport, "--out", filepath.Join(dir, "x"), "--shrink"}, exitFailure, "not a heap dump"},
		{[]string{"--in", filepath.Join(dir, "nope.hprof"), "--out", filepath.Join(dir, "x"), "--shrink"}, exitFailure, filepath.Join(dir, "nope.hprof") + ": no such file or directory"},
		{[]string{"--in", in, "--out", mine, "--shrink"}, exitUsage, mine + " already exists; choose another --out"},
		{[]string{"--in", in, "--out", filepath.Join(dir, "x"), "--shrink", "--allow-empty"}, exitUsage, "--allow-empty are for taking a dump"},
		{[]string{"--in", truncated, "--out", filepath.Join(dir, "x"), "--standard"}, exitFailure, truncated + ": "},
	} {
		_, errOut, code := runCmd(t, append([]string{"heapdump"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q, want %d %q", c.args, code, errOut, c.code, c.want)
		}
	}
	// Nothing written, nothing removed: the user's files are as they
	// were, and no temporary file is left.
	if left := entries(t, dir); left != "fresh.hprof.tmp leaky.hprof mine.hprof truncated.hprof " {
		t.Errorf("the directory holds %s", left)
	}
	if b, _ := os.ReadFile(mine); string(b) != "mine" {
		t.Errorf("--out overwritten: %.20q", b)
	}
	if _, errOut, code := runCmd(t, "heapdump", "--in", in, "--out", filepath.Join(dir, "fresh.hprof"), "--shrink"); code != exitOK {
		t.Fatalf("exit %d %s", code, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "fresh.hprof.tmp")); string(b) != "mine too" {
		t.Errorf("a file beside --out was changed: %q", b)
	}
}
