package sim

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/alloctrack/alloctrack/internal/realtest"
)

// A simulated app's dump, read by the product's reader: every class's
// instances per heap as the simulator kept them, the leaked Activities
// and Fragments, the icons' duplicate buffers (API 25 and before), and
// Android's hprof-conv converts it as ConvertStandard does.
func TestHeapDumpTruth(t *testing.T) {
	for _, api := range []int{23, 30} {
		vm := NewVM(AppConfig{PID: 4242, Package: "com.example.heapy", API: api, Workload: DefaultWorkload()}, api)
		vm.Allocate(200_000) // 10 recreations, 3 leaked
		dump, truth := vm.HeapDump()
		if len(truth.LeakedActivities) != 3 {
			t.Fatalf("API %d: %d leaked in the truth", api, len(truth.LeakedActivities))
		}
		r := bytes.NewReader(dump)
		g, err := heapdump.ReadGraph(r)
		if err != nil {
			t.Fatalf("API %d: %v", api, err)
		}
		a, err := g.Analyze(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]map[string]uint64{}
		for _, c := range a.Histogram.Classes {
			if got[c.Heap] == nil {
				got[c.Heap] = map[string]uint64{}
			}
			got[c.Heap][c.Class] += c.Instances
		}
		for heap, classes := range truth.Instances {
			for class, n := range classes {
				if got[heap][class] != n {
					t.Errorf("API %d: heap %s %s: %d in the dump, %d in the simulator", api, heap, class, got[heap][class], n)
				}
			}
		}
		if a.Histogram.Unreachable != 0 {
			t.Errorf("API %d: %d unreachable objects", api, a.Histogram.Unreachable)
		}
		var acts, frags []uint64
		for _, l := range a.Leaks {
			if l.Kind == "activity" {
				acts = append(acts, l.ID)
			} else {
				frags = append(frags, l.ID)
			}
			if len(l.Path) < 2 || l.Path[0].Ref != "static sLeaked" {
				t.Errorf("API %d: leak path %+v", api, l.Path)
			}
		}
		slices.Sort(acts)
		slices.Sort(frags)
		if !slices.Equal(acts, truth.LeakedActivities) || !slices.Equal(frags, truth.LeakedFragments) {
			t.Errorf("API %d: leaks %x %x, truth %x %x", api, acts, frags, truth.LeakedActivities, truth.LeakedFragments)
		}
		icons := 0
		for _, d := range a.DuplicateBitmaps {
			icons = max(icons, d.Copies)
		}
		if icons != truth.IconCopies {
			t.Errorf("API %d: %d icons share a buffer, truth %d", api, icons, truth.IconCopies)
		}
		if len(a.DuplicateStrings) == 0 {
			t.Errorf("API %d: no duplicate Strings", api)
		}
		// hprof-conv takes it, and agrees with ConvertStandard.
		conv := realtest.Program(t, "hprof-conv", "hprof-conv", "/usr/lib/android-sdk/platform-tools")
		dir := t.TempDir()
		in, ref := filepath.Join(dir, "d.hprof"), filepath.Join(dir, "ref.hprof")
		os.WriteFile(in, dump, 0o644)
		if out, err := exec.Command(conv, in, ref).CombinedOutput(); err != nil {
			t.Fatalf("hprof-conv: %v\n%s", err, out)
		}
		var std bytes.Buffer
		if err := hprof.ConvertStandard(bytes.NewReader(dump), &std, false); err != nil {
			t.Fatal(err)
		}
		if want, _ := os.ReadFile(ref); !bytes.Equal(std.Bytes(), want) {
			t.Errorf("API %d: hprof-conv converts the dump differently", api)
		}
	}
}
