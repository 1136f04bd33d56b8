package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/sim"
)

// An Android 15 dump taken with --bitmaps, through the real adb server,
// against one taken without, of the same heap: the summary and the report
// say how much Bitmap.dumpData was left out (as much as the simulator
// made), diff finds no class changed, a budget on the app's byte[] holds
// as it does for the plain dump, and the duplicate Bitmaps waste what the
// simulator's truth says (their pixels).
func TestHeapdumpBitmapsLeftOut(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{35}, Workload: quietCaptureWorkload(), SerialPrefix: "simbmp"})
	addr, serials := serveRealADB(t, f)
	d := f.Devices()[0]
	vm := d.VMs()[0]
	vm.Allocate(100_000) // five Activities, one leaked: two icons
	dirs := map[string]string{}
	sums := map[string]*offline.HeapSummary{}
	for _, kind := range []string{"plain", "bitmaps"} {
		dirs[kind] = filepath.Join(t.TempDir(), kind)
		args := []string{"heapdump", "--adb.address", addr, "--serial", serials[d.Serial()], "--package", vm.ProcessName(), "--out", dirs[kind], "--top", "1000"}
		if kind == "bitmaps" {
			args = append(args, "--bitmaps", "png")
		}
		if _, errOut, code := runCmd(t, args...); code != exitOK {
			t.Fatalf("%s: exit %d %s", kind, code, errOut)
		}
		b, _ := os.ReadFile(filepath.Join(dirs[kind], "summary.json"))
		sums[kind] = &offline.HeapSummary{}
		if err := json.Unmarshal(b, sums[kind]); err != nil {
			t.Fatal(err)
		}
	}
	_, truth := vm.HeapDumpBitmaps("png") // the heap has not changed
	if s := sums["bitmaps"]; s.LeftOutObjects != truth.LeftOut || s.LeftOutBytes != truth.LeftOutBytes || sums["plain"].LeftOutObjects != 0 {
		t.Errorf("summary: %d objects, %d bytes left out (plain %d); truth %d, %d", s.LeftOutObjects, s.LeftOutBytes, sums["plain"].LeftOutObjects, truth.LeftOut, truth.LeftOutBytes)
	}
	for _, dup := range sums["bitmaps"].DuplicateBitmaps {
		if dup.Wasted != truth.BitmapWaste[dup.Value] {
			t.Errorf("Bitmaps %s: %d bytes wasted, truth %d", dup.Value, dup.Wasted, truth.BitmapWaste[dup.Value])
		}
	}
	if n := len(sums["bitmaps"].DuplicateBitmaps); n != len(truth.BitmapWaste) {
		t.Errorf("%d groups of duplicate Bitmaps, truth %v", n, truth.BitmapWaste)
	}
	out, errOut, code := runCmd(t, "report", dirs["bitmaps"])
	if want := fmt.Sprintf("left out: %d objects (%d bytes) that am dumpheap -b made", truth.LeftOut, truth.LeftOutBytes); code != exitOK || !strings.Contains(out, want) {
		t.Errorf("report: exit %d %s, no %q in\n%s", code, errOut, want, out)
	}
	out, errOut, code = runCmd(t, "diff", "--format", "json", dirs["plain"], dirs["bitmaps"])
	var diff offline.DumpDiff
	if err := json.Unmarshal([]byte(out), &diff); code != exitOK || err != nil {
		t.Fatalf("diff: exit %d %v %s", code, err, errOut)
	}
	for _, r := range diff.Classes {
		if r.Change != (offline.DumpCount{}) {
			t.Errorf("diff: %s %s changed by %+v", r.Heap, r.Class, r.Change)
		}
	}
	if diff.NewLeftOutBytes != truth.LeftOutBytes || diff.BaseLeftOutBytes != 0 {
		t.Errorf("diff: left out %d -> %d bytes, truth 0 -> %d", diff.BaseLeftOutBytes, diff.NewLeftOutBytes, truth.LeftOutBytes)
	}
	var byteArrays uint64
	for _, c := range sums["plain"].TopClasses {
		if c.Heap == "app" && c.Class == "byte[]" {
			byteArrays = c.Retained
		}
	}
	bud := writeBudget(t, fmt.Sprintf("heap:\n  classes:\n    - match: 'byte\\[\\]'\n      heap: app\n      max_retained_bytes: %d\n", byteArrays))
	for kind, dir := range dirs {
		if _, errOut, code := runCmd(t, "report", "--budget", bud, dir); code != exitOK || byteArrays == 0 {
			t.Errorf("%s: budget of %d retained bytes of byte[]: exit %d %s", kind, byteArrays, code, errOut)
		}
	}
}
