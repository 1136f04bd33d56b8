package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/sim"
)

// TestHeapdumpTakeDalvik takes a dump of a simulated Android 4.4 app
// (Dalvik's layout) through a real adb server: the dump pulled holds every
// class's instances per heap (zygote and app) as the simulator kept them,
// the summary names the leaks the simulator made and the duplicate
// Strings by their text (the Activities' titles and a substring of
// another String that equals them; not that String, whose char[] the
// substring shares), nothing is left on the device, and report reads the
// capture.
func TestHeapdumpTakeDalvik(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{19}, Workload: quietCaptureWorkload(), SerialPrefix: "sim19"})
	addr, serials := serveRealADB(t, f)
	d := f.Devices()[0]
	vm := d.VMs()[0]
	vm.Allocate(200_000) // ten Activities, three leaked
	dir := filepath.Join(t.TempDir(), "dump")
	if _, errOut, code := runCmd(t, "heapdump", "--adb.address", addr, "--serial", serials[d.Serial()], "--package", vm.ProcessName(), "--out", dir); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	_, truth := vm.HeapDump() // the heap has not changed since
	dump, err := os.ReadFile(filepath.Join(dir, "heap.hprof"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := heapdump.Read(bytes.NewReader(dump))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]uint64{}
	for _, c := range h.Classes {
		if got[c.Heap] == nil {
			got[c.Heap] = map[string]uint64{}
		}
		got[c.Heap][c.Class] += c.Instances
	}
	if len(got) != 2 || len(got) != len(truth.Instances) {
		t.Errorf("heaps in the dump: %d; in the simulator: %d (zygote and app)", len(got), len(truth.Instances))
	}
	for heap, classes := range truth.Instances {
		for class, n := range classes {
			if got[heap][class] != n {
				t.Errorf("heap %s %s: %d in the dump, %d in the simulator", heap, class, got[heap][class], n)
			}
		}
	}
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
	if !slices.Equal(acts, truth.LeakedActivities) || sum.API != 19 {
		t.Errorf("API %d: leaked Activities %x, truth %x", sum.API, acts, truth.LeakedActivities)
	}
	copies := map[string]int{}
	for _, s := range sum.DuplicateStrings {
		copies[s.Value] = s.Copies
	}
	if copies["Main"] != 1+len(truth.LeakedActivities)+1 || copies[vm.ProcessName()+".MainActivity"] != 0 {
		t.Errorf("duplicate Strings %v: want Main in the titles and one substring, and not the String the substring shares", copies)
	}
	if left := d.Files("/data/local/tmp"); len(left) > 0 {
		t.Errorf("left on the device: %v", left)
	}
	out, _, code := runCmd(t, "report", dir)
	if code != exitOK || !strings.Contains(out, "leaked Activities and Fragments: "+strconv.Itoa(2*len(truth.LeakedActivities))) {
		t.Errorf("report of the capture: exit %d\n%s", code, out)
	}
}
