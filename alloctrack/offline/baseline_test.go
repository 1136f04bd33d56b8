package offline_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// fakeRun writes a run directory whose summary.json has meta and whose
// marker file says which run it is.
func fakeRun(t *testing.T, meta offline.CaptureMeta, marker string) string {
	t.Helper()
	dir := t.TempDir()
	b, _ := json.Marshal(offline.Summary{CaptureMeta: meta, Windows: 1})
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, _ := json.Marshal(pertest.Run{Package: meta.Package, Backend: "ddm", Complete: true,
		Tests: []pertest.Test{{Name: "a(com.example.T)", Class: "com.example.T", Method: "a", Outcome: pertest.Passed}}})
	if err := os.WriteFile(filepath.Join(dir, offline.TestsFile), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "marker"), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

var pixel = offline.CaptureMeta{Serial: "s1", Model: "Pixel 7", API: 33, Package: "com.example", AppVersion: "1.4", AppVersionCode: 14}

func markers(t *testing.T, runs []string) string {
	var out []string
	for _, r := range runs {
		b, err := os.ReadFile(filepath.Join(r, "sub", "marker"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return strings.Join(out, ",")
}

func TestBaselineAddPrunesPerKey(t *testing.T) {
	store := t.TempDir()
	other := pixel
	other.AppVersion, other.AppVersionCode = "1.5", 15
	for i, m := range []offline.CaptureMeta{pixel, pixel, other, pixel} {
		if _, _, err := offline.AddBaseline(store, 2, fakeRun(t, m, string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	sets, err := offline.ListBaselines(store)
	if err != nil || len(sets) != 2 {
		t.Fatalf("sets %+v, %v; want 2 keys", sets, err)
	}
	key := offline.BaselineKey{Model: "Pixel 7", API: 33, Package: "com.example", AppVersion: "1.4", AppVersionCode: 14}
	runs, err := offline.BaselineFor(store, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := markers(t, runs); got != "b,d" { // a pruned: keep 2
		t.Errorf("1.4's baseline holds %s; want b,d", got)
	}
	key.AppVersion, key.AppVersionCode = "1.5", 15
	if runs, err := offline.BaselineFor(store, key); err != nil || markers(t, runs) != "c" {
		t.Errorf("1.5's baseline %v, %v; want c", runs, err)
	}
}

func TestBaselineRefusesAnotherKey(t *testing.T) {
	store := t.TempDir()
	if _, _, err := offline.AddBaseline(store, 5, fakeRun(t, pixel, "a")); err != nil {
		t.Fatal(err)
	}
	key := offline.BaselineKey{Model: "Pixel 8", API: 33, Package: "com.example", AppVersion: "1.4", AppVersionCode: 14}
	runs, err := offline.BaselineFor(store, key)
	if !errors.Is(err, offline.ErrBaselineMismatch) || runs != nil {
		t.Fatalf("runs %v, err %v; want ErrBaselineMismatch", runs, err)
	}
	if !strings.Contains(err.Error(), "device model Pixel 7 ≠ Pixel 8") {
		t.Errorf("error %q does not name what differs", err)
	}
}

func TestBaselineRefusesRunWithoutVersion(t *testing.T) {
	m := pixel
	m.AppVersion, m.AppVersionCode = "", 0
	_, _, err := offline.AddBaseline(t.TempDir(), 5, fakeRun(t, m, "a"))
	if err == nil || !strings.Contains(err.Error(), "records no app_version") {
		t.Errorf("err %v; want the missing app_version named", err)
	}
}

func TestParseDumpsysVersion(t *testing.T) {
	out := "Packages:\n  Package [com.example] (5c3a1f2):\n    userId=10123\n    versionCode=42 minSdk=21 targetSdk=33\n    versionName=1.4.2\n"
	name, code, err := offline.ParseDumpsysVersion("com.example", []byte(out))
	if err != nil || name != "1.4.2" || code != 42 {
		t.Errorf("%q %d %v; want 1.4.2 42", name, code, err)
	}
	if _, _, err := offline.ParseDumpsysVersion("com.x", []byte("Unable to find package: com.x\n")); err == nil || !strings.Contains(err.Error(), "Unable to find package") {
		t.Errorf("err %v; want the device's answer quoted", err)
	}
}

func TestBaselineRefusesPartialRun(t *testing.T) {
	run := fakeRun(t, pixel, "a")
	os.WriteFile(filepath.Join(run, offline.TestsFile), []byte(`{"package":"com.example","backend":"ddm","complete":false,"tests":[]}`), 0o644)
	store := t.TempDir()
	_, _, err := offline.AddBaseline(store, 5, run)
	if err == nil || !strings.Contains(err.Error(), "is not put in the baseline: insufficient data") {
		t.Errorf("err %v; want the partial run refused", err)
	}
	if sets, _ := offline.ListBaselines(store); len(sets) != 0 {
		t.Errorf("the store holds %+v", sets)
	}
}
