package allocreport

import (
	"os"
	"sync"
	"testing"
	"unicode/utf8"
)

// The largest report ART 7+ sends: MaxEntries allocations of 16 frames
// (the default stack depth), about 9 MB.

var maxReportOnce struct {
	sync.Once
	b   []byte
	err error
}

// maxReport returns a maximum-size REAL payload: 65,535 allocations of 16
// frames each, drawn deterministically from a few hundred classes, about a
// thousand methods and two hundred source files. It is built once per test
// binary and shared, so callers must not modify it.
func maxReport(tb testing.TB) []byte {
	tb.Helper()
	maxReportOnce.Do(func() {
		maxReportOnce.b, maxReportOnce.err = SyntheticMax()
	})
	if maxReportOnce.err != nil {
		tb.Fatalf("building the maximum-size report: %v", maxReportOnce.err)
	}
	return maxReportOnce.b
}

var maxReportLargeOnce struct {
	sync.Once
	b   []byte
	err error
}

// maxReportLargeTables returns a maximum-size REAL payload with large
// string tables: 2,000 classes, 5,000 methods and 1,000 file names, mixed
// ASCII and non-ASCII (Latin, CJK, Cyrillic, and characters outside the
// BMP, sent as surrogate pairs). Built once; callers must not modify it.
func maxReportLargeTables(tb testing.TB) []byte {
	tb.Helper()
	maxReportLargeOnce.Do(func() {
		maxReportLargeOnce.b, maxReportLargeOnce.err = SyntheticMaxLargeTables()
	})
	if maxReportLargeOnce.err != nil {
		tb.Fatalf("building the large-table maximum-size report: %v", maxReportLargeOnce.err)
	}
	return maxReportLargeOnce.b
}

func TestMaxReport(t *testing.T) {
	b := maxReport(t)
	r, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Allocations) != MaxEntries || !r.Overflowed() || r.FrameCount() != MaxEntries*SyntheticDepth {
		t.Errorf("%d allocations, %d frames; want %d and %d", len(r.Allocations), r.FrameCount(), MaxEntries, MaxEntries*SyntheticDepth)
	}
	if len(r.Classes) < 300 || len(r.Methods) < 900 || len(r.Files) < 190 {
		t.Errorf("tables %d/%d/%d, want a few hundred classes, ~1000 methods, ~200 files", len(r.Classes), len(r.Methods), len(r.Files))
	}
	t.Logf("%d bytes; %d classes, %d methods, %d files", len(b), len(r.Classes), len(r.Methods), len(r.Files))
}

func TestMaxReportLargeTables(t *testing.T) {
	b := maxReportLargeTables(t)
	r, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Allocations) != MaxEntries || len(r.Classes) != 2000 || len(r.Methods) != 5000 || len(r.Files) != 1000 {
		t.Fatalf("%d allocations; tables %d/%d/%d, want %d and 2000/5000/1000", len(r.Allocations), len(r.Classes), len(r.Methods), len(r.Files), MaxEntries)
	}
	ascii := 0
	for _, s := range r.RawMethods {
		if utf8.RuneCountInString(s) == len(s) {
			ascii++
		}
	}
	if ascii < 500 || ascii > 4500 {
		t.Fatalf("%d of 5000 method names are ASCII; want a mix", ascii)
	}
	t.Logf("%d bytes; %d ASCII method names of 5000", len(b), ascii)
}

// TestWriteMaxReport is a tool, not a check: with
// ALLOCTRACK_WRITE_MAX_REPORT=PATH it writes maxReport to PATH, and with
// ALLOCTRACK_WRITE_MAX_REPORT_LARGE=PATH maxReportLargeTables (for
// scripts/bench-parse).
func TestWriteMaxReport(t *testing.T) {
	path, large := os.Getenv("ALLOCTRACK_WRITE_MAX_REPORT"), os.Getenv("ALLOCTRACK_WRITE_MAX_REPORT_LARGE")
	if path == "" && large == "" {
		t.Skip("set ALLOCTRACK_WRITE_MAX_REPORT=PATH (or ALLOCTRACK_WRITE_MAX_REPORT_LARGE=PATH) to write the maximum-size report to PATH")
	}
	for _, w := range []struct {
		path string
		b    func(testing.TB) []byte
	}{{path, maxReport}, {large, maxReportLargeTables}} {
		if w.path == "" {
			continue
		}
		b := w.b(t)
		if err := os.WriteFile(w.path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d bytes to %s", len(b), w.path)
	}
}
