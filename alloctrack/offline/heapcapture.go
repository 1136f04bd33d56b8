package offline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
)

// HeapDumpFile is the name of a heap capture's dump.
const HeapDumpFile = "heap.hprof"

// HeapSummary is a heap capture's summary.json: what the dump answered,
// computed from the whole dump (before any shrinking).
type HeapSummary struct {
	CaptureMeta
	Kind        string    `json:"kind"` // "heapdump"
	Start       time.Time `json:"start"`
	DumpSeconds float64   `json:"dump_seconds"` // am dumpheap until the dump was complete: the app's freeze, at most
	DumpBytes   int64     `json:"dump_bytes"`   // as pulled
	FileBytes   int64     `json:"file_bytes"`   // heap.hprof as kept
	Shrunk      bool      `json:"shrunk,omitempty"`
	GC          bool      `json:"gc,omitempty"`
	Bitmaps     string    `json:"bitmaps,omitempty"` // the pixels' format, when the dump holds them (Android 15+)

	Objects          uint64 `json:"objects"`
	Unreachable      uint64 `json:"unreachable_objects"`
	UnreachableBytes uint64 `json:"unreachable_bytes"`
	// What the dump made for itself and no count includes (Android 15's
	// Bitmap.dumpData, with --bitmaps).
	LeftOutObjects uint64 `json:"left_out_objects,omitempty"`
	LeftOutBytes   uint64 `json:"left_out_bytes,omitempty"`
	// AppImage: Android 7.x wrote the app's own image in heap 'I'; its
	// Strings count in image, not app (docs/heapdumps.md fact 6).
	AppImage         bool                  `json:"app_image_in_image_heap,omitempty"`
	TopClasses       []heapdump.ClassCount `json:"top_classes"` // per heap, by retained bytes
	Leaks            []heapdump.Leak       `json:"leaks"`
	DuplicateStrings []heapdump.Duplicate  `json:"duplicate_strings"`
	DuplicateBitmaps []heapdump.Duplicate  `json:"duplicate_bitmaps"`
	// How many groups of duplicates the dump holds; the lists above are
	// the top ones.
	DuplicateStringGroups int `json:"duplicate_string_groups"`
	DuplicateBitmapGroups int `json:"duplicate_bitmap_groups"`
}

// NewHeapSummary summarises an analysis: the top classes of each heap,
// every leak, the top duplicates.
func NewHeapSummary(meta CaptureMeta, a *heapdump.Analysis, top int) *HeapSummary {
	h := a.Histogram
	s := &HeapSummary{CaptureMeta: meta, Kind: "heapdump", Objects: h.Objects, Unreachable: h.Unreachable, UnreachableBytes: h.UnreachableBytes,
		LeftOutObjects: h.LeftOut, LeftOutBytes: h.LeftOutBytes, AppImage: h.AppImage, Leaks: a.Leaks, DuplicateStrings: a.DuplicateStrings, DuplicateBitmaps: a.DuplicateBitmaps,
		DuplicateStringGroups: len(a.DuplicateStrings), DuplicateBitmapGroups: len(a.DuplicateBitmaps)}
	shown := map[string]int{}
	for _, c := range h.Classes {
		if shown[c.Heap] < top {
			shown[c.Heap]++
			s.TopClasses = append(s.TopClasses, c)
		}
	}
	s.DuplicateStrings = s.DuplicateStrings[:min(top, len(s.DuplicateStrings))]
	s.DuplicateBitmaps = s.DuplicateBitmaps[:min(top, len(s.DuplicateBitmaps))]
	return s
}

// CheckHeapCaptureDir refuses a directory that already holds a capture.
func CheckHeapCaptureDir(dir string) error {
	for _, f := range []string{"summary.json", HeapDumpFile, TraceFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("capture: %s already holds a capture (%s); choose another --out", dir, f)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.alloc")); len(m) > 0 {
		return fmt.Errorf("capture: %s already holds .alloc files; choose another --out", dir)
	}
	return nil
}

// WriteHeapSummary writes a heap capture's summary.json.
func WriteHeapSummary(dir string, s *HeapSummary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, "summary.json"), append(b, '\n'))
}

// HeapDumpPath returns the dump a path names: the file itself, or a heap
// capture directory's HeapDumpFile; "" when it names neither.
func HeapDumpPath(path string) string {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, HeapDumpFile)
	}
	if IsHeapDump(path) {
		return path
	}
	return ""
}
