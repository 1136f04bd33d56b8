package offline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// reportFile writes a report of n Object and m int[] allocations of 16 bytes.
func reportFile(t *testing.T, n, m int) string {
	t.Helper()
	b := allocreport.NewBuilder()
	at := []allocreport.FrameName{{Class: "Lcom/example/Main;", Method: "run", File: "Main.java", Line: 7}}
	for range n {
		b.Add(16, 1, "Ljava/lang/Object;", at)
	}
	for range m {
		b.Add(16, 1, "[I", at)
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
	if err := os.WriteFile(p, enc, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadRuns(t *testing.T) {
	est := ptest("e(p.A)", pertest.Passed, 400, 4000, 1)
	est.Estimated, est.SampledAllocations = true, 100
	r1 := writeRun(t, &pertest.Run{Package: "x", Backend: "heapprofd", Complete: true,
		Tests: []pertest.Test{ptest("a(p.A)", pertest.Passed, 10, 100, 1), est}})
	r2 := writeRun(t, &pertest.Run{Package: "x", Backend: "ddm",
		Tests: []pertest.Test{ptest("a(p.A)", pertest.Passed, 12, 120, 1)}})
	rep := reportFile(t, 5, 0)
	rs, err := offline.LoadRuns([]string{r1, filepath.Join(r2, offline.TestsFile), rep})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Runs) != 3 || rs.Runs[0].Kind != offline.TestsFile || !rs.Runs[0].Estimated || rs.Runs[2].Kind != "exact" || rs.Runs[2].Tests {
		t.Fatalf("runs %+v", rs.Runs)
	}
	if rs.Runs[0].Shortfall != nil || rs.Runs[1].Shortfall == nil || !strings.Contains(rs.Runs[1].Shortfall.Error(), "did not finish") {
		t.Errorf("shortfalls %v, %v; want nil and did not finish", rs.Runs[0].Shortfall, rs.Runs[1].Shortfall)
	}
	a := rs.Tests["a(p.A)"]
	if len(a) != 2 || a[0].Bytes != 100 || a[1].Allocations != 12 || a[0].BytesSE != 0 {
		t.Errorf("a(p.A): %+v", a)
	}
	if e := rs.Tests["e(p.A)"][0]; e.AllocationsSE != 40 || e.BytesSE != 400 {
		t.Errorf("estimated test SE %v, %v; want 40, 400 (400/sqrt(100))", e.AllocationsSE, e.BytesSE)
	}
	if c := rs.Classes["java.lang.Object"]; len(c) != 3 || c[2] == nil || c[2].Allocations != 5 || c[2].Bytes != 80 {
		t.Errorf("classes %v", rs.Classes)
	}
	if len(rs.Sites) != 1 {
		t.Errorf("%d sites, want 1", len(rs.Sites))
	}
	for _, label := range rs.SiteLabels {
		if !strings.Contains(label, "java.lang.Object at com.example.Main.run") {
			t.Errorf("site label %q", label)
		}
	}
	if _, err := offline.LoadRuns([]string{rep, filepath.Join(t.TempDir(), "gone")}); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("a missing run: %v", err)
	}
}

// A test counts only in the runs that ran it; a class is 0 in a run that
// holds allocations but not that class, and absent from tests.json runs.
func TestGateSeries(t *testing.T) {
	base, err := offline.LoadRuns([]string{reportFile(t, 5, 0), reportFile(t, 6, 2)})
	if err != nil {
		t.Fatal(err)
	}
	nw, err := offline.LoadRuns([]string{reportFile(t, 7, 3), writeRun(t, &pertest.Run{Complete: true, Tests: []pertest.Test{ptest("a(p.A)", pertest.Passed, 1, 2, 1)}})})
	if err != nil {
		t.Fatal(err)
	}
	s := offline.GateSeries(base, nw, "class", "allocations")
	if len(s) != 2 || s[0].Key != "class:int[]" || s[1].Key != "class:java.lang.Object" {
		t.Fatalf("series %+v", s)
	}
	if got := s[0]; len(got.Base) != 2 || got.Base[0] != 0 || got.Base[1] != 2 || len(got.New) != 1 || got.New[0] != 3 || got.BaseSE != nil {
		t.Errorf("int[]: %+v", got)
	}
	tests := offline.GateSeries(base, nw, "test", "bytes")
	if len(tests) != 1 || len(tests[0].Base) != 0 || len(tests[0].New) != 1 || tests[0].New[0] != 2 {
		t.Errorf("tests %+v", tests)
	}
}
