package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/sim"
)

// TestHeapdumpTake takes dumps of simulated apps through a real adb
// server: on Android 6 (am returns at once and the app writes the file
// afterwards: the file is polled) and Android 11 (am waits). The capture's
// summary names the leaks the simulator made, the file on the device is
// gone afterwards, and report, diff and budgets take the capture
// directory.
func TestHeapdumpTake(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 2, AppsPerDevice: 1, APIs: []int{23, 30}, Workload: quietCaptureWorkload()})
	addr, serials := serveRealADB(t, f)
	for _, d := range f.Devices() {
		vm := d.VMs()[0]
		vm.Allocate(200_000) // ten Activities, three leaked
		dir := filepath.Join(t.TempDir(), "dump")
		_, errOut, code := runCmd(t, "heapdump", "--adb.address", addr, "--serial", serials[d.Serial()], "--package", vm.ProcessName(), "--out", dir, "--top", "5")
		if code != exitOK {
			t.Fatalf("API %d: exit %d: %s", d.Config().API, code, errOut)
		}
		_, truth := vm.HeapDump() // the heap has not changed since
		b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		var sum offline.HeapSummary
		if err := json.Unmarshal(b, &sum); err != nil {
			t.Fatal(err)
		}
		var acts []uint64
		for _, l := range sum.Leaks {
			if l.Kind == "activity" {
				acts = append(acts, l.ID)
			}
		}
		slices.Sort(acts)
		if !slices.Equal(acts, truth.LeakedActivities) || sum.PID != vm.PID() || sum.API != d.Config().API || sum.DumpBytes == 0 || sum.FileBytes != sum.DumpBytes {
			t.Errorf("API %d: summary %+v; leaked Activities %x, truth %x", d.Config().API, sum.CaptureMeta, acts, truth.LeakedActivities)
		}
		for _, c := range sum.TopClasses {
			if c.Heap == "app" && c.Class == vm.ProcessName()+".MainActivity" && c.Instances != uint64(1+len(truth.LeakedActivities)) {
				t.Errorf("API %d: %d MainActivity instances", d.Config().API, c.Instances)
			}
		}
		if left := d.Files("/data/local/tmp"); len(left) > 0 {
			t.Errorf("API %d: left on the device: %v", d.Config().API, left)
		}
		out, _, code := runCmd(t, "report", dir)
		if code != exitOK || !strings.Contains(out, "leaked Activities and Fragments: "+strconv.Itoa(2*len(truth.LeakedActivities))) {
			t.Errorf("API %d: report of the capture: exit %d\n%s", d.Config().API, code, out)
		}
		if _, errOut, code := runCmd(t, "diff", dir, dir); code != exitOK {
			t.Errorf("API %d: diff: exit %d %s", d.Config().API, code, errOut)
		}
		bud := writeBudget(t, "heap:\n  max_leaked_activities: 0\n")
		if _, errOut, code := runCmd(t, "heapdump", "--adb.address", addr, "--serial", serials[d.Serial()], "--pid", strconv.Itoa(vm.PID()), "--out", dir+"-2", "--shrink", "--budget", bud); code != exitBudget || !strings.Contains(errOut, "leaked Activities exceeds the limit 0") {
			t.Errorf("API %d: budget: exit %d %s", d.Config().API, code, errOut)
		}
	}
	// Android 15: with --bitmaps the icons' pixels are in the dump, and
	// their duplicates found; before Android 15 --bitmaps is refused.
	f15 := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{35}, Workload: quietCaptureWorkload(), SerialPrefix: "sim15"})
	addr15, serials15 := serveRealADB(t, f15)
	d15 := f15.Devices()[0]
	vm15 := d15.VMs()[0]
	vm15.Allocate(100_000) // five Activities, one leaked: two icons
	dir15 := filepath.Join(t.TempDir(), "dump15")
	if _, errOut, code := runCmd(t, "heapdump", "--adb.address", addr15, "--serial", serials15[d15.Serial()], "--package", vm15.ProcessName(), "--out", dir15, "--bitmaps", "png"); code != exitOK {
		t.Fatalf("API 35 --bitmaps: exit %d %s", code, errOut)
	}
	b15, _ := os.ReadFile(filepath.Join(dir15, "summary.json"))
	var sum15 offline.HeapSummary
	json.Unmarshal(b15, &sum15)
	// The icons waste most (the app's other Bitmaps: TestHeapdumpBitmapsLeftOut).
	if len(sum15.DuplicateBitmaps) != 4 || sum15.DuplicateBitmaps[0].Value != "24x24" || sum15.DuplicateBitmaps[0].Copies != 2 {
		t.Errorf("API 35 --bitmaps: duplicate Bitmaps %+v", sum15.DuplicateBitmaps)
	}
	d30 := f.Devices()[1]
	// Refused before the app is said to freeze, and before --out is made.
	outB := filepath.Join(t.TempDir(), "b")
	if _, errOut, code := runCmd(t, "heapdump", "--adb.address", addr, "--serial", serials[d30.Serial()], "--package", d30.VMs()[0].ProcessName(), "--out", outB, "--bitmaps", "png"); code != exitFailure || !strings.Contains(errOut, "needs Android 15") || strings.Contains(errOut, "dumping pid") {
		t.Errorf("--bitmaps on API 30: exit %d %s", code, errOut)
	}
	if _, err := os.Stat(outB); err == nil {
		t.Errorf("--bitmaps on API 30 made %s", outB)
	}

	// Refusals: an occupied directory, --gc before Android 8.1.
	d := f.Devices()[0]
	vm := d.VMs()[0]
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "heap.hprof"), nil, 0o644)
	if _, errOut, code := runCmd(t, "heapdump", "--adb.address", addr, "--serial", serials[d.Serial()], "--package", vm.ProcessName(), "--out", dir); code != exitUsage || !strings.Contains(errOut, "already holds a capture") {
		t.Errorf("occupied directory: exit %d %s", code, errOut)
	}
	if _, errOut, code := runCmd(t, "heapdump", "--adb.address", addr, "--serial", serials[d.Serial()], "--package", vm.ProcessName(), "--out", filepath.Join(t.TempDir(), "x"), "--gc"); code != exitFailure || !strings.Contains(errOut, "needs Android 8.1") || strings.Contains(errOut, "dumping pid") {
		t.Errorf("--gc on API 23: exit %d %s", code, errOut)
	}
}
