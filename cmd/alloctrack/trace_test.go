package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/alloctrack/alloctrack/perfetto"
)

// writeTrace writes a heapprofd trace of two dumps at interval 4096: site
// com.example.Foo.bar gets 30 samples of 24-byte objects, site
// com.example.Baz.qux 2 samples of 64 KiB ones (always sampled).
func writeTrace(t *testing.T) string {
	t.Helper()
	alloc := perfetto.Frame{RawFunction: "art_quick_alloc_object_resolved_region_tlab", Mapping: "/apex/com.android.art/lib64/libart.so"}
	bar := []perfetto.Frame{alloc, {RawFunction: "void com.example.Foo.bar(int)", Mapping: "/data/app/base.odex"}, {RawFunction: "com.example.Main.run", Mapping: "/data/app/base.odex"}}
	qux := []perfetto.Frame{alloc, {RawFunction: "com.example.Baz.qux", Mapping: "/data/app/base.odex"}}
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, nil)
	for i, n := range []uint64{10, 30} {
		if err := w.WriteDumps(perfetto.DumpSpec{PacketTimestamp: uint64(i+1) * 1e9, PID: 7, Heap: perfetto.ArtHeap, Timestamp: uint64(i+1) * 1e9, SamplingInterval: 4096,
			Samples: []perfetto.SampleSpec{
				{Frames: bar, Values: perfetto.Values{Count: n, Allocated: 24 * n}},
				{Frames: qux, Values: perfetto.Values{Count: 2, Allocated: 2 << 16}},
			}}); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "app.pftrace")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReportTrace(t *testing.T) {
	tr := writeTrace(t)
	out, errOut, code := runCmd(t, "report", tr)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"ESTIMATES", "samples 32, sampled bytes 131792 (exact)", "sampling interval 4096", "~", "com.example.Foo.bar", "no classes"} {
		if !strings.Contains(out, want) {
			t.Errorf("report text lacks %q:\n%s", want, out)
		}
	}
	out, _, code = runCmd(t, "report", "--format", "json", tr)
	var js struct {
		Estimated          bool   `json:"estimated"`
		SampledAllocations uint64 `json:"sampled_allocations"`
		Allocations        uint64 `json:"allocations"`
		TopSites           []struct {
			Estimated bool   `json:"estimated"`
			Class     string `json:"class"`
			AppFrame  string `json:"app_frame"`
		} `json:"top_sites"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	// 30 samples of 24 bytes at 4096: about 30·4096/24 allocations; the
	// 2 large objects count as they are.
	if !js.Estimated || js.SampledAllocations != 32 || js.Allocations < 5000 || len(js.TopSites) != 2 || !js.TopSites[0].Estimated || js.TopSites[0].Class != "" {
		t.Errorf("json %+v", js)
	}
	out, _, code = runCmd(t, "report", "--format", "pprof", tr)
	p, err := profile.Parse(strings.NewReader(out))
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v", code, err)
	}
	if len(p.SampleType) != 4 || p.SampleType[2].Type != "estimated_alloc_objects" {
		t.Errorf("sample types %v", p.SampleType)
	}
	out, _, _ = runCmd(t, "report", "--format", "csv", tr)
	if !strings.HasPrefix(out, "allocations,bytes,class,site,app_frame,stack,estimated,sampled_allocations,sampled_bytes\n") || !strings.Contains(out, ",true,30,720") {
		t.Errorf("csv:\n%s", out)
	}
	// --frame applies to traces; --class does not.
	out, _, code = runCmd(t, "report", "--format", "json", "--frame", `com\.example\.Baz\..*`, tr)
	if code != 0 || !strings.Contains(out, `"sampled_allocations": 2,`) {
		t.Errorf("--frame com.example.Baz.*: exit %d\n%s", code, out)
	}
	if _, errOut, code := runCmd(t, "report", "--class", "Foo", tr); code != exitUsage || !strings.Contains(errOut, "no classes") {
		t.Errorf("--class on a trace: exit %d, %q", code, errOut)
	}
	// DDM reports and traces do not mix in one profile.
	if _, errOut, code := runCmd(t, "report", "--format", "pprof", realReport, tr); code != exitUsage || !strings.Contains(errOut, "cannot mix") {
		t.Errorf("mixed pprof: exit %d, %q", code, errOut)
	}
}

func TestBudgetAndDiffTrace(t *testing.T) {
	tr := writeTrace(t)
	bud := filepath.Join(t.TempDir(), "budget.yaml")
	os.WriteFile(bud, []byte("total: {max_allocations: 100}\n"), 0o644)
	_, errOut, code := runCmd(t, "report", "--budget", bud, tr)
	if code != exitBudget || !strings.Contains(errOut, "budget exceeded") || !strings.Contains(errOut, "an estimate from samples") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := runCmd(t, "diff", realReport, tr)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(out, "\n")
	if strings.Contains(lines[0], "ESTIMATES") || !strings.Contains(lines[1], "ESTIMATES") {
		t.Errorf("diff does not mark the trace's side as estimates:\n%s", out)
	}
	out, _, _ = runCmd(t, "diff", "--format", "json", realReport, tr)
	if !strings.Contains(out, `"new_estimated": true`) || strings.Contains(out, `"base_estimated"`) {
		t.Errorf("diff json:\n%s", out)
	}
}

func TestReportBadTrace(t *testing.T) {
	b, err := os.ReadFile(writeTrace(t))
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.perfetto-trace")
	os.WriteFile(bad, b[:len(b)-5], 0o644)
	_, errOut, code := runCmd(t, "report", bad)
	if code != exitFailure || !strings.Contains(errOut, bad+": perfetto: packet ") || !strings.Contains(errOut, "at byte") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestTraceSumsDoNotWrap: a trace whose samples' bytes sum past 2^64 (two
// stacks of 2^63 bytes) is an error naming the file, not a total wrapped
// to 0 bytes and judged within budget.
func TestTraceSumsDoNotWrap(t *testing.T) {
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, nil)
	alloc := perfetto.Frame{RawFunction: "art_quick_alloc_object_resolved_region_tlab", Mapping: "/apex/com.android.art/lib64/libart.so"}
	f := func(name string) []perfetto.Frame {
		return []perfetto.Frame{alloc, {RawFunction: name, Mapping: "/data/app/base.odex"}}
	}
	if err := w.WriteDumps(perfetto.DumpSpec{PacketTimestamp: 1e9, PID: 42, Heap: perfetto.ArtHeap, Timestamp: 1e9, SamplingInterval: 4096, Samples: []perfetto.SampleSpec{
		{Frames: f("com.example.A.a"), Values: perfetto.Values{Count: 1, Allocated: 1 << 63}},
		{Frames: f("com.example.B.b"), Values: perfetto.Values{Count: 1, Allocated: 1 << 63}},
	}}); err != nil {
		t.Fatal(err)
	}
	tr := filepath.Join(t.TempDir(), "huge.perfetto-trace")
	os.WriteFile(tr, buf.Bytes(), 0o644)
	bud := writeBudget(t, "total: {max_bytes: 1000}\n")
	_, errOut, code := runCmd(t, "report", "--budget", bud, tr)
	if code != exitFailure || !strings.Contains(errOut, tr+": the counts sum past 2^64") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
