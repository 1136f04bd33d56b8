package offline_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/internal/tracetest"
	"github.com/alloctrack/alloctrack/perfetto"
	"github.com/google/pprof/profile"
)

// A heapprofd capture: the raw trace as read, profile.pb.gz with samples
// and estimates, summary.json marked heapprofd and estimated; it reads
// back as input.
func TestCaptureHeapprofd(t *testing.T) {
	trace := tracetest.Heapprofd(t, 4096)
	dir := t.TempDir()
	start := time.Unix(1000, 0)
	w, err := offline.NewCaptureWriter(dir, offline.CaptureMeta{Serial: "s", Package: "com.example", PID: 42, API: 31}, start)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := w.Trace()
	if err != nil {
		t.Fatal(err)
	}
	// The daemon's way: copy what it reads, then decode it.
	if _, err := tw.Write(trace); err != nil {
		t.Fatal(err)
	}
	for _, d := range tracetest.Dumps(t, trace) {
		if !heapprofd.JavaHeapDump(d) {
			continue // as the session does
		}
		if err := w.Add(heapprofd.WindowOfDump(d, time.Time{}, time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Add(&alloctrack.Window{}); err == nil {
		t.Error("a DDM window in a heapprofd capture was accepted")
	}
	if err := w.Report([]byte{1}, nil); err == nil {
		t.Error("a DDM report in a heapprofd capture was accepted")
	}
	sum, err := w.Close(start.Add(30*time.Second), false, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, offline.TraceFile)); !bytes.Equal(got, trace) {
		t.Errorf("%s holds %d bytes, not the %d of the trace", offline.TraceFile, len(got), len(trace))
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var js map[string]any
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	if js["backend"] != "heapprofd" || js["estimated"] != true || js["sampled_allocations"] != 17.0 || js["sampled_bytes"] != 664.0 ||
		js["sampling_interval_bytes"] != 4096.0 || js["dumps"] != 3.0 || js["error_stack_samples"] != 1.0 || js["unknown_stack_samples"] != 2.0 {
		t.Errorf("summary.json: %s", b)
	}
	if sum.Allocations < 17 || len(sum.TopClasses) != 0 || len(sum.TopSites) != 3 || !sum.TopSites[0].Estimated || sum.TopSites[0].Class != "" {
		t.Errorf("summary %+v", sum)
	}
	f, err := os.Open(filepath.Join(dir, "profile.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type)
	}
	if strings.Join(types, ",") != "samples,sampled_space,estimated_alloc_objects,estimated_alloc_space" || !strings.Contains(strings.Join(p.Comments, "\n"), "estimates") {
		t.Errorf("sample types %v, comments %q", types, p.Comments)
	}
	var smp, est int64
	for _, s := range p.Sample {
		smp += s.Value[0]
		est += s.Value[2]
	}
	if smp != 17 || math.Abs(float64(est)-float64(sum.Allocations)) > 3 {
		t.Errorf("profile: %d samples (want 17), %d estimated allocations (summary %d)", smp, est, sum.Allocations)
	}

	// Read back: the directory, and the bare trace.
	for _, path := range []string{dir, filepath.Join(dir, offline.TraceFile)} {
		in, err := offline.ReadInput(path)
		if err != nil {
			t.Fatal(err)
		}
		tl := alloctrack.NewTally()
		in.AddTo(tl)
		if !in.Estimated() || len(in.Dumps) != 3 || len(in.Reports) != 0 || tl.Sampled != (alloctrack.Count{Allocations: 17, Bytes: 664}) || !tl.Estimated || tl.Total.Allocations != sum.Allocations {
			t.Errorf("%s: estimated %v, %d dumps, %d reports, tally sampled %v estimated %v total %v (summary %d)", path, in.Estimated(), len(in.Dumps), len(in.Reports), tl.Sampled, tl.Estimated, tl.Total, sum.Allocations)
		}
		if (path == dir) != (in.Duration == 30*time.Second) {
			t.Errorf("%s: duration %v", path, in.Duration)
		}
	}
}

// A trace cut or corrupted is an error naming the file, the packet and
// the byte offset.
func TestReadInputBadTrace(t *testing.T) {
	trace := tracetest.Heapprofd(t, 4096)
	dir := t.TempDir()
	bad := append([]byte(nil), trace...)
	bad[1] = 0x7f // the first packet's length, now short: its fields overrun
	for name, b := range map[string][]byte{"cut.pftrace": trace[:len(trace)-3], "bad.pftrace": bad} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := offline.ReadInput(path)
		var fe *perfetto.FormatError
		if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "packet ") || !strings.Contains(err.Error(), "byte ") {
			t.Errorf("%s: error %v, want one naming the file, packet and byte", name, err)
		}
	}
}

// Budgets and diffs of traces say their values are estimates.
func TestBudgetAndDiffOfTrace(t *testing.T) {
	tl := alloctrack.NewTally()
	for _, d := range tracetest.Dumps(t, tracetest.Heapprofd(t, 4096)) {
		tl.Add(heapprofd.WindowOfDump(d, time.Time{}, time.Time{}))
	}
	bud, err := offline.ParseBudget("b.yaml", []byte("total: {max_allocations: 10}\nsites: [{match: '.*Foo\\.bar', max_bytes: 100}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := bud.Check(tl, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 2 {
		t.Fatalf("violations %v, want 2", v)
	}
	for _, x := range v {
		if !x.Estimated || !strings.Contains(x.String(), "estimate") {
			t.Errorf("violation %q is not marked as an estimate", x)
		}
	}
	d := offline.Compare(alloctrack.NewTally(), tl, 0, 0)
	if d.BaseEstimated || !d.NewEstimated || len(d.Sites) != 3 || len(d.Classes) != 0 {
		t.Errorf("diff %+v", d)
	}
}
