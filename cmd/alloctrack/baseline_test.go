package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// summaryRun writes a run directory holding only a summary.json of meta.
func summaryRun(t *testing.T, meta offline.CaptureMeta) string {
	t.Helper()
	dir := t.TempDir()
	b, _ := json.Marshal(offline.Summary{CaptureMeta: meta})
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBaselineAddList: add keeps --keep runs per key and says what it
// pruned; list shows each key with its runs; a run that does not record
// its app's version is refused, naming what is missing.
func TestBaselineAddList(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := offline.CaptureMeta{Model: "Pixel 7", API: 33, Package: "com.example", AppVersion: "1.4", AppVersionCode: 14}
	runs := []string{summaryRun(t, m), summaryRun(t, m), summaryRun(t, m)}
	out, stderr, code := runCmd(t, append([]string{"baseline", "add", "--store", store, "--keep", "2"}, runs...)...)
	if code != exitOK || strings.Count(out, "added ") != 3 || !strings.Contains(out, "pruned "+filepath.Join(store, "Pixel_7_api33_com.example_1.4_14", "000001")) {
		t.Fatalf("add: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = runCmd(t, "baseline", "list", "--store", store)
	want := "Pixel 7, API 33, com.example 1.4 (14): 2 runs\n"
	if code != exitOK || !strings.HasPrefix(out, want) || !strings.Contains(out, "000003") || strings.Contains(out, "000001") {
		t.Errorf("list: exit %d\n%s%s; want it to start %q, runs 2 and 3", code, out, stderr, want)
	}
	m.AppVersion, m.AppVersionCode = "", 0
	_, stderr, code = runCmd(t, "baseline", "add", "--store", store, summaryRun(t, m))
	if code != exitFailure || !strings.Contains(stderr, "records no app_version") {
		t.Errorf("a run without its app version: exit %d, %q", code, stderr)
	}
}
