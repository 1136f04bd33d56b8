package web_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/web"
)

// TestDumpPageSaysTopOf: a dump's page says how many groups of duplicates
// the dump holds when its summary lists only the top ones, and shows
// neither a directory without a summary nor a dump cut short.
func TestDumpPageSaysTopOf(t *testing.T) {
	dir := t.TempDir()
	id := "20260101T000000.000-emulator-5554-com.example.a"
	os.Mkdir(filepath.Join(dir, id), 0o755)
	sum := `{"serial":"emulator-5554","package":"com.example.a","start":"2026-01-01T00:00:00Z",
	"duplicate_strings":[{"Value":"a","Copies":2},{"Value":"b","Copies":2}],"duplicate_string_groups":34,
	"duplicate_bitmaps":[{"Value":"1x1","Copies":2}],"duplicate_bitmap_groups":1,
	"left_out_objects":12,"left_out_bytes":1225}`
	os.WriteFile(filepath.Join(dir, id, "summary.json"), []byte(sum), 0o644)
	os.MkdirAll(filepath.Join(dir, ".partial-x"), 0o755)
	os.WriteFile(filepath.Join(dir, ".partial-x", "summary.json"), []byte(sum), 0o644)
	h, err := web.New(fixture(), web.Config{Version: "test", HeapDumps: &web.HeapDumps{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	_, page := get(t, h, "/heapdumps/"+id)
	for _, want := range []string{`Duplicate Strings <span class="count">top 2 of 34</span>`, `Duplicate Bitmaps <span class="count">1</span>`,
		"left out: 12 objects (1.2 KiB) that am dumpheap -b made"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if res, _ := get(t, h, "/heapdumps/.partial-x"); res.StatusCode != 404 {
		t.Errorf("a dump cut short is served: %s", res.Status)
	}
	if _, list := get(t, h, "/heapdumps"); strings.Count(list, `href="/heapdumps/`) != 1 {
		t.Errorf("list:\n%s", list)
	}
}
