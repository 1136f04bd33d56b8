package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/google/pprof/profile"
)

// parseRealReport reads and parses the recorded device report.
func parseRealReport(t *testing.T) *allocreport.Report {
	t.Helper()
	b, err := os.ReadFile(realReport)
	if err != nil {
		t.Fatal(err)
	}
	r, err := allocreport.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// threadVariant writes the real report cut to one thread's allocations, a
// second run to diff against.
func threadVariant(t *testing.T, thread uint16) string {
	t.Helper()
	r := parseRealReport(t)
	f := r.Filter(func(r *allocreport.Report, i int) bool { return r.Allocations[i].Thread == thread })
	enc, err := allocreport.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "variant.alloc")
	if err := os.WriteFile(p, enc, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDiffTextGolden(t *testing.T) {
	v := threadVariant(t, 3316)
	out, errOut, code := runCmd(t, "diff", "--top", "8", v, realReport)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	out = strings.ReplaceAll(strings.ReplaceAll(out, realReport, "REAL"), v, "VARIANT")
	golden(t, "diff-real.txt", out)
	// The regression at the top is android.os.Message: 4000 more allocations.
	if !strings.Contains(strings.Split(out, "classes, largest regression first")[1], "android.os.Message") {
		t.Fatal("android.os.Message is not among the class regressions")
	}
}

func TestDiffJSON(t *testing.T) {
	v := threadVariant(t, 3316)
	out, _, code := runCmd(t, "diff", "--format", "json", "--top", "0", v, realReport)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var d offline.Diff
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.PerSecond || d.New.Allocations != 5000 || d.Base.Allocations != 32 {
		t.Fatalf("totals %+v %+v per-second %v", d.Base, d.New, d.PerSecond)
	}
	if d.Classes[0].Class != "android.os.Message" || d.Classes[0].Change.Allocations != 4000 || d.Classes[0].Change.Bytes != 256000 {
		t.Fatalf("first class row %+v", d.Classes[0])
	}
	var sum float64
	for _, c := range d.Classes {
		sum += c.Change.Allocations
	}
	if sum != 5000-32 {
		t.Fatalf("class changes sum to %v, want %d", sum, 5000-32)
	}
	if len(d.Sites) != 228 {
		t.Fatalf("%d site rows, want 228 (every site of either run)", len(d.Sites))
	}
}

func TestDiffErrors(t *testing.T) {
	_, errOut, code := runCmd(t, "diff", realReport, filepath.Join(t.TempDir(), "missing"))
	if code != 1 || !strings.Contains(errOut, "new:") || !strings.Contains(errOut, "missing") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if _, _, code := runCmd(t, "diff", realReport); code != exitUsage {
		t.Fatalf("one argument: exit %d", code)
	}
}

func TestReportFormatsAndFilters(t *testing.T) {
	t.Run("json", func(t *testing.T) {
		out, _, code := runCmd(t, "report", "--format", "json", "--top", "3", realReport)
		var s struct {
			Allocations uint64
			Bytes       uint64
			Sites       int
			TopClasses  []offline.SummaryClass `json:"top_classes"`
			TopSites    []offline.SummarySite  `json:"top_sites"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
			t.Fatalf("exit %d: %s", code, out)
		}
		if s.Allocations != 5000 || s.Bytes != 287096 || s.Sites != 228 || len(s.TopClasses) != 3 || s.TopClasses[0].Class != "android.os.Message" {
			t.Fatalf("%+v", s)
		}
		if s.TopSites[0].AppFrame != "com.dodola.alloctrack.MainActivity$4.onClick(MainActivity.java:70)" {
			t.Fatalf("app frame %q", s.TopSites[0].AppFrame)
		}
	})
	t.Run("csv", func(t *testing.T) {
		out, _, code := runCmd(t, "report", "--format", "csv", "--top", "0", realReport)
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if code != 0 || err != nil {
			t.Fatalf("exit %d, %v", code, err)
		}
		if len(rows) != 229 || rows[0][0] != "allocations" || rows[1][0] != "4000" || rows[1][2] != "android.os.Message" {
			t.Fatalf("%d rows, first %q", len(rows), rows[:2])
		}
	})
	t.Run("pprof", func(t *testing.T) {
		out, _, code := runCmd(t, "report", "--format", "pprof", realReport)
		p, err := profile.Parse(bytes.NewReader([]byte(out)))
		if code != 0 || err != nil {
			t.Fatalf("exit %d, %v", code, err)
		}
		if err := p.CheckValid(); err != nil {
			t.Fatal(err)
		}
		var n, b int64
		for _, s := range p.Sample {
			n += s.Value[0]
			b += s.Value[1]
		}
		if n != 5000 || b != 287096 {
			t.Fatalf("profile totals %d allocations %d bytes", n, b)
		}
	})
	t.Run("class filter", func(t *testing.T) {
		out, _, _ := runCmd(t, "report", "--class", `android\.os\.Message`, realReport)
		if !strings.Contains(out, "allocations 4000, bytes 256000, classes 1") {
			t.Fatalf("%.300s", out)
		}
	})
	t.Run("thread filter", func(t *testing.T) {
		out, _, _ := runCmd(t, "report", "--thread", "3316", realReport)
		if !strings.Contains(out, "allocations 32,") {
			t.Fatalf("%.300s", out)
		}
	})
	t.Run("frame filter keeps numbers", func(t *testing.T) {
		out, _, _ := runCmd(t, "report", "--format", "jsonl", "--frame", `.*MainActivity\$4\.onClick`, realReport)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4000 {
			t.Fatalf("%d allocations with an onClick frame, want 4000", len(lines))
		}
		if !strings.Contains(lines[0], `"class":"android.os.Message"`) {
			t.Fatalf("first line %.200s", lines[0])
		}
	})
	t.Run("output file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "out.json")
		_, _, code := runCmd(t, "report", "--format", "json", "-o", p, realReport)
		if b, err := os.ReadFile(p); code != 0 || err != nil || !json.Valid(b) {
			t.Fatalf("exit %d, %v", code, err)
		}
	})
}

func writeBudget(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "budget.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReportBudgets(t *testing.T) {
	t.Run("pass", func(t *testing.T) {
		b := writeBudget(t, "total:\n  max_allocations: 5000\n  max_bytes: 300000\nclasses:\n  - match: 'android\\.os\\.Message'\n    max_allocations: 4000\n")
		_, errOut, code := runCmd(t, "report", "--budget", b, realReport)
		// A pass says so, with each limit's margin.
		want := "alloctrack report: within budget (3 limits)\n" +
			"  total: 5000 allocations, limit 5000 (100% of it)\n" +
			"  total: 287096 bytes, limit 300000 (96% of it)\n" +
			"  classes[0] 'android\\.os\\.Message': 4000 allocations, limit 4000 (100% of it)\n"
		if code != 0 || errOut != want {
			t.Fatalf("exit %d, stderr %q, want %q", code, errOut, want)
		}
	})
	t.Run("fail", func(t *testing.T) {
		b := writeBudget(t, "classes:\n  - match: 'android\\.os\\.Message'\n    max_allocations: 1000\nsites:\n  - match: '.*MainActivity\\$4\\.onClick'\n    max_bytes: 250000\n")
		_, errOut, code := runCmd(t, "report", "--budget", b, realReport)
		if code != exitBudget {
			t.Fatalf("exit %d, want %d; stderr %q", code, exitBudget, errOut)
		}
		for _, want := range []string{
			`classes[0] 'android\.os\.Message': 4000 allocations exceeds the limit 1000 by 3000`,
			`sites[0] '.*MainActivity\$4\.onClick': 256000 bytes exceeds the limit 250000 by 6000`,
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errOut)
			}
		}
	})
	t.Run("per second needs a duration", func(t *testing.T) {
		b := writeBudget(t, "total:\n  max_allocations_per_second: 10\n")
		_, errOut, code := runCmd(t, "report", "--budget", b, realReport)
		if code != exitUsage || !strings.Contains(errOut, "duration") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
	})
	for name, text := range map[string]string{
		"unknown key":    "total:\n  max_allocs: 5\n",
		"bad regexp":     "classes:\n  - match: '('\n    max_bytes: 1\n",
		"no match":       "classes:\n  - max_bytes: 1\n",
		"no limit":       "classes:\n  - match: x\n",
		"negative":       "total:\n  max_allocations: -1\n",
		"empty":          "",
		"not yaml":       "total: [\n",
		"two documents":  "total:\n  max_bytes: 1\n---\ntotal:\n  max_bytes: 2\n",
		"negative rate":  "total:\n  max_bytes_per_second: -2\n",
		"top-level typo": "totals:\n  max_bytes: 1\n",
	} {
		t.Run("malformed "+name, func(t *testing.T) {
			b := writeBudget(t, text)
			_, errOut, code := runCmd(t, "report", "--budget", b, realReport)
			if code != exitUsage || !strings.Contains(errOut, "budget") {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
		})
	}
}
