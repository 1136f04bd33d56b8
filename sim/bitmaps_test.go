package sim

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
)

func analyze(t *testing.T, dump []byte) *heapdump.Analysis {
	t.Helper()
	r := bytes.NewReader(dump)
	g, err := heapdump.ReadGraph(r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.Analyze(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// rows is a histogram as "heap class" -> instances/bytes/retained.
func rows(h *heapdump.Histogram) map[string]string {
	m := map[string]string{}
	for _, c := range h.Classes {
		m[c.Heap+" "+c.Class] = fmt.Sprintf("%d/%d/%d", c.Instances, c.Bytes, c.Retained)
	}
	return m
}

// Android 15's am dumpheap -b: the Bitmap.dumpData the app builds for the
// dump is left out of the histogram and of retained sizes (the histogram
// of a -b dump is that of a plain dump of the same heap, row for row),
// and said to be left out (as much as the simulator made); duplicate
// Bitmaps are found by their PNGs and waste their pixel memory, each
// config at its bytes per pixel.
func TestHeapDumpBitmapsTruth(t *testing.T) {
	w := DefaultWorkload()
	w.Rate = 0 // nothing allocated between the two dumps
	vm := NewVM(AppConfig{PID: 4343, Package: "com.example.pixels", API: 35, Workload: w}, 35)
	vm.Allocate(200_000) // 10 recreations, 3 leaked: 4 icons
	plainDump, plainTruth := vm.HeapDump()
	dump, truth := vm.HeapDumpBitmaps("png")
	plain, a := analyze(t, plainDump), analyze(t, dump)
	if truth.LeftOut != 3+11 || plainTruth.LeftOut != 0 {
		t.Fatalf("truth: %d left out (want DumpData, natives, buffers and 11 images), plain %d", truth.LeftOut, plainTruth.LeftOut)
	}
	if h := a.Histogram; h.LeftOut != truth.LeftOut || h.LeftOutBytes != truth.LeftOutBytes {
		t.Errorf("left out %d objects, %d bytes; truth %d, %d", h.LeftOut, h.LeftOutBytes, truth.LeftOut, truth.LeftOutBytes)
	}
	got, want := rows(a.Histogram), rows(plain.Histogram)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s with -b, %s without", k, got[k], v)
		}
	}
	for k, v := range got {
		if want[k] == "" {
			t.Errorf("%s: %s with -b only", k, v)
		}
	}
	for heap, classes := range truth.Instances {
		for class, n := range classes {
			if r := got[heap+" "+class]; !strings.HasPrefix(r, fmt.Sprint(n, "/")) {
				t.Errorf("heap %s %s: %s in the histogram, %d in the simulator", heap, class, r, n)
			}
		}
	}
	waste := map[string]uint64{}
	configs := map[string]string{}
	for _, d := range a.DuplicateBitmaps {
		waste[d.Value] = d.Wasted
		configs[d.Value] = d.Config
	}
	if len(truth.BitmapWaste) != 4 || truth.BitmapWaste["24x24"] != 3*(24*24*4+16) {
		t.Fatalf("truth's waste %v", truth.BitmapWaste)
	}
	for wh, n := range truth.BitmapWaste {
		if waste[wh] != n {
			t.Errorf("Bitmaps %s (%s): %d bytes wasted, truth %d", wh, configs[wh], waste[wh], n)
		}
	}
	if len(waste) != len(truth.BitmapWaste) {
		t.Errorf("duplicate Bitmaps %+v, truth %v", a.DuplicateBitmaps, truth.BitmapWaste)
	}
	if configs["32x16"] != "RGB_565" || configs["16x16"] != "ALPHA_8" || configs["8x8"] != "RGBA_F16" || configs["24x24"] != "ARGB_8888" {
		t.Errorf("configs %v", configs)
	}
	// Shrinking keeps what pairs Bitmaps with their pixels: the shrunk
	// dump finds the same duplicates, and leaves out as many objects.
	var small bytes.Buffer
	if _, err := heapdump.Shrink(bytes.NewReader(dump), &small); err != nil {
		t.Fatal(err)
	}
	s := analyze(t, small.Bytes())
	for _, d := range s.DuplicateBitmaps {
		if d.Wasted != truth.BitmapWaste[d.Value] {
			t.Errorf("shrunk: Bitmaps %s: %d bytes wasted, truth %d", d.Value, d.Wasted, truth.BitmapWaste[d.Value])
		}
	}
	if len(s.DuplicateBitmaps) != len(truth.BitmapWaste) || s.Histogram.LeftOut != truth.LeftOut {
		t.Errorf("shrunk: %d groups of duplicate Bitmaps, %d objects left out; truth %d, %d", len(s.DuplicateBitmaps), s.Histogram.LeftOut, len(truth.BitmapWaste), truth.LeftOut)
	}
}

// am dumpheap -b takes whatever argument follows it (even one that looks
// like an option): png puts the pixels in the dump; a format the app does
// not know only gets a warning in its log, and the dump has no pixels.
func TestDumpheapBitmapsFormat(t *testing.T) {
	d, vm := newTestDevice(t, 35, AppConfig{Workload: DefaultWorkload()})
	vm.Allocate(50_000)
	for _, c := range []struct {
		arg    string
		pixels bool
	}{{"png", true}, {"gif", false}, {"-g", false}} {
		file := "/data/local/tmp/b-" + c.arg + ".hprof"
		out, errOut, code := d.runShellIO(fmt.Sprintf("am dumpheap -b %s %d %s", c.arg, vm.PID(), file), nil)
		dump, ok := d.File(file)
		if code != 0 || !ok {
			t.Fatalf("-b %s: exit %d, %q %q, file %v", c.arg, code, out, errOut, ok)
		}
		a := analyze(t, dump)
		logs, _, _ := d.runShellIO("logcat -d", nil)
		warned := strings.Contains(string(logs), "unrecognized format "+c.arg)
		if (a.Histogram.LeftOut > 0) != c.pixels || warned == c.pixels || (len(a.DuplicateBitmaps) > 0) != c.pixels {
			t.Errorf("-b %s: %d objects left out, %d duplicate Bitmaps, warned %v", c.arg, a.Histogram.LeftOut, len(a.DuplicateBitmaps), warned)
		}
	}
}
