package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/internal/tialloctest"

	"github.com/google/pprof/profile"
)

// descriptor is the inverse of allocreport.DescriptorToDot.
func descriptor(dotted string) string {
	dims := 0
	for strings.HasSuffix(dotted, "[]") {
		dotted = strings.TrimSuffix(dotted, "[]")
		dims++
	}
	prim := map[string]string{"int": "I", "long": "J", "byte": "B", "char": "C", "short": "S", "boolean": "Z", "float": "F", "double": "D"}
	d, ok := prim[dotted]
	if !ok || dims == 0 {
		d = "L" + strings.ReplaceAll(dotted, ".", "/") + ";"
	}
	return strings.Repeat("[", dims) + d
}

// realAsAgentLog writes the real report's allocations as an agent log with
// a sample for each, frames with their class (released agents) or without
// (the README's layout): what the agent would log at rate 1 had it seen
// the same allocations.
func realAsAgentLog(t *testing.T, withClass bool) string {
	t.Helper()
	r := parseRealReport(t)
	w := tialloctest.NewWriter()
	for i := range r.Allocations {
		a := &r.Allocations[i]
		s := tialloctest.Sample{Thread: fmt.Sprintf("thread-%d", a.Thread), Class: descriptor(r.ClassName(a)), Size: uint64(a.Size)}
		st := r.Stack(a)
		for j := st.Len() - 1; j >= 0; j-- { // outermost first
			f := st.At(j)
			m := r.Methods[f.Method] + "()V"
			if withClass {
				m = descriptor(r.Classes[f.Class]) + "::" + m
			}
			s.Frames = append(s.Frames, m)
		}
		w.Add(s)
	}
	p := filepath.Join(t.TempDir(), "agent.log")
	if err := os.WriteFile(p, []byte(w.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAgentLogDiffsWithDDM converts a real DDM report into agent logs of
// both layouts and diffs them against the report: every class and every
// site must match with no change, sites matched on what both know.
func TestAgentLogDiffsWithDDM(t *testing.T) {
	for _, c := range []struct {
		withClass bool
		matching  string
	}{{true, "class and Class.method of the top"}, {false, "class and method names of the top"}} {
		log := realAsAgentLog(t, c.withClass)
		out, errOut, code := runCmd(t, "diff", "--format", "json", "--top", "0", "--agent.rate", "1", realReport, log)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var d offline.Diff
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(d.Matching, c.matching) || d.BaseEstimated || !d.NewEstimated {
			t.Errorf("matching %q, estimated %v/%v", d.Matching, d.BaseEstimated, d.NewEstimated)
		}
		if d.Base != d.New || d.Base.Allocations == 0 {
			t.Errorf("totals %+v vs %+v", d.Base, d.New)
		}
		if len(d.Classes) < 10 || len(d.Sites) < 10 {
			t.Fatalf("%d classes, %d sites", len(d.Classes), len(d.Sites))
		}
		for _, rows := range [][]offline.DiffRow{d.Classes, d.Sites} {
			for _, r := range rows {
				if r.Change != (offline.Rate{}) || r.Base.Allocations == 0 {
					t.Errorf("%s %v: base %+v new %+v", r.Class, r.Frames, r.Base, r.New)
				}
			}
		}
	}
}

func TestReportAgentLog(t *testing.T) {
	log := realAsAgentLog(t, true)
	ddmOut, _, _ := runCmd(t, "report", "--format", "json", realReport)
	var ddm jsonSummary
	if err := json.Unmarshal([]byte(ddmOut), &ddm); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := runCmd(t, "report", log)
	if code != 0 || !strings.Contains(out, "counts below are SAMPLES") || !strings.Contains(out, fmt.Sprintf("samples %d,", ddm.Allocations)) {
		t.Fatalf("exit %d %s\n%s", code, errOut, out)
	}
	out, _, code = runCmd(t, "report", "--agent.rate", "7", "--format", "json", log)
	var js jsonSummary
	if err := json.Unmarshal([]byte(out), &js); err != nil || code != 0 {
		t.Fatalf("exit %d, %v", code, err)
	}
	if !js.Estimated || js.Allocations != 7*ddm.Allocations || js.Bytes != 7*ddm.Bytes || js.SampledAllocations != ddm.Allocations || js.Classes != ddm.Classes {
		t.Errorf("estimated %v, allocations %d bytes %d sampled %d classes %d; ddm %d %d %d", js.Estimated, js.Allocations, js.Bytes, js.SampledAllocations, js.Classes, ddm.Allocations, ddm.Bytes, ddm.Classes)
	}

	// --class filters by the allocated class, --frame by Class.method.
	out, _, _ = runCmd(t, "report", "--class", `^android\.os\.Message$`, "--format", "json", log)
	ddmOut, _, _ = runCmd(t, "report", "--class", `^android\.os\.Message$`, "--format", "json", realReport)
	var a, b jsonSummary
	json.Unmarshal([]byte(out), &a)
	json.Unmarshal([]byte(ddmOut), &b)
	if a.Allocations == 0 || a.Allocations != b.Allocations || a.Classes != 1 {
		t.Errorf("--class: %d allocations in %d classes, DDM %d", a.Allocations, a.Classes, b.Allocations)
	}

	// Flags that do not apply, and mixing kinds in one profile.
	for _, args := range [][]string{
		{"report", "--thread", "3", log},
		{"report", "--format", "jsonl", log},
		{"report", "--format", "pprof", realReport, log},
		{"report", "--budget", writeBudget(t, "total:\n  max_allocations: 1\n"), log},
	} {
		if _, errOut, code := runCmd(t, args...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}

	// A budget on estimates.
	bud := writeBudget(t, fmt.Sprintf("total:\n  max_allocations: %d\n", 7*ddm.Allocations-1))
	if _, errOut, code := runCmd(t, "report", "--agent.rate", "7", "--budget", bud, log); code != exitBudget {
		t.Errorf("budget: exit %d: %s", code, errOut)
	}

	// The profile: four values, class labels.
	p := filepath.Join(t.TempDir(), "p.pb.gz")
	if _, errOut, code := runCmd(t, "report", "--agent.rate", "7", "--format", "pprof", "-o", p, log); code != 0 {
		t.Fatalf("pprof: exit %d: %s", code, errOut)
	}
	f, _ := os.Open(p)
	defer f.Close()
	prof, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range prof.Sample {
		n += s.Value[2]
		if len(s.Label["class"]) != 1 {
			t.Fatalf("sample without class label: %v", s.Label)
		}
	}
	if len(prof.SampleType) != 4 || prof.SampleType[2].Type != "estimated_alloc_objects" || uint64(n) != 7*ddm.Allocations {
		t.Errorf("sample types %v, estimated objects %d", prof.SampleType, n)
	}
}

func TestReportFolded(t *testing.T) {
	log := realAsAgentLog(t, true)
	for _, in := range []string{log, realReport} {
		for _, weight := range []string{"allocations", "bytes"} {
			out, errOut, code := runCmd(t, "report", "--format", "folded", "--weight", weight, in)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			js, _, _ := runCmd(t, "report", "--format", "json", realReport)
			var s jsonSummary
			json.Unmarshal([]byte(js), &s)
			want := s.Allocations
			if weight == "bytes" {
				want = s.Bytes
			}
			var sum uint64
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				i := strings.LastIndexByte(line, ' ')
				var v uint64
				if _, err := fmt.Sscan(line[i+1:], &v); err != nil || !strings.Contains(line[:i], ";") && !strings.HasPrefix(line, "(no stack)") {
					t.Fatalf("line %q", line)
				}
				sum += v
			}
			if sum != want {
				t.Errorf("%s by %s: folded lines sum to %d, want %d", in, weight, sum, want)
			}
		}
	}
}

func TestReportBadAgentLog(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.log")
	os.WriteFile(bad, []byte("+0,jthread[main], jclass[[I file: <UNKNOWN_FILE>], size[24, hex: 0x18]\n=1,0;5\n"), 0o644)
	out, errOut, code := runCmd(t, "report", bad, realReport)
	if code != exitFailure || !strings.Contains(errOut, bad+":2: stack trace 1 refers to key 5, which is not defined") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "classes by count") {
		t.Error("the good input after the bad one was not reported")
	}
}

// hugeLog writes an agent log of one sample of size bytes.
func hugeLog(t *testing.T, name string, size uint64) string {
	t.Helper()
	w := tialloctest.NewWriter()
	w.Add(tialloctest.Sample{Thread: "main", Class: "[B", Size: size, Frames: []string{"LMain;::run()V"}})
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(w.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAgentLogSumsDoNotWrap: byte totals that would pass 2^64 (four logs
// of 2^62 bytes; one such log times a rate of 4) are errors naming the
// input, not totals wrapped to 0 and checked against a budget.
func TestAgentLogSumsDoNotWrap(t *testing.T) {
	var logs []string
	for i := range 4 {
		logs = append(logs, hugeLog(t, fmt.Sprintf("big%d.log", i), 1<<62))
	}
	bud := filepath.Join(t.TempDir(), "b.yaml")
	os.WriteFile(bud, []byte("total: {max_bytes: 1000}\n"), 0o644)
	_, errOut, code := runCmd(t, append([]string{"report", "--agent.rate", "1", "--budget", bud}, logs...)...)
	if code != exitFailure || !strings.Contains(errOut, logs[3]+": the counts sum past 2^64") {
		t.Errorf("four logs of 2^62 bytes: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runCmd(t, "report", "--agent.rate", "4", "--budget", bud, logs[0])
	if code != exitFailure || !strings.Contains(errOut, logs[0]+": agentlog: estimates past 2^64") {
		t.Errorf("2^62 bytes times 4: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runCmd(t, "diff", "--agent.rate", "4", logs[0], logs[1])
	if code != exitFailure || !strings.Contains(errOut, "estimates past 2^64") {
		t.Errorf("diff, 2^62 bytes times 4: exit %d, stderr %q", code, errOut)
	}
	big := hugeLog(t, "jlong.log", 1<<63)
	_, errOut, code = runCmd(t, "report", big)
	if code != exitFailure || !strings.Contains(errOut, big+":1: allocation size 9223372036854775808 is outside a jlong") {
		t.Errorf("a size of 2^63: exit %d, stderr %q", code, errOut)
	}
}
