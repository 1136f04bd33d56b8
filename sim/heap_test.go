package sim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/alloctrack/alloctrack/internal/realtest"
	"github.com/alloctrack/alloctrack/jdwp"

	"github.com/alloctrack/alloctrack/internal/testwait"
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

// DDM's heap dump chunks, as DdmHandleHeap answers them up to Android 11:
// HPDS streams the dump back in a VM command packet, HPDU has the app
// write it where it may (and fails elsewhere); Android 12 answers neither.
func TestDDMHeapDumpChunks(t *testing.T) {
	for _, api := range []int{30, 31} {
		d, vm := newTestDevice(t, api, AppConfig{})
		vm.Allocate(100_000)
		got := make(chan []byte, 1)
		c, err := d.OpenService("jdwp:" + itoa(vm.PID()))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := jdwp.Open(ctx5(t), c, jdwp.Options{OnCommand: func(p jdwp.Packet) {
			if ch, err := ddms.DecodeChunk(p.Data); err == nil && ch.Type == ddms.HPDS {
				got <- ch.Data
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cl := ddms.NewClient(conn)
		if err := cl.Send(ddms.HPDS, nil); err != nil {
			t.Fatal(err)
		}
		// Android 12+ answers neither: 300 ms show it. Older ones answer,
		// however long a loaded machine takes.
		wait := 300 * time.Millisecond
		if api < 31 {
			wait = testwait.Bound
		}
		var dump []byte
		select {
		case dump = <-got:
		case <-time.After(wait):
		}
		short, cancel := context.WithTimeout(context.Background(), wait)
		reply, herr := cl.Request(short, ddms.HPDU, ddms.EncodeHeapDumpFile("/sdcard/x.hprof"))
		cancel()
		if api >= 31 {
			if dump != nil || !errors.Is(herr, context.DeadlineExceeded) {
				t.Errorf("API %d: HPDS %d bytes, HPDU %v: want no answer", api, len(dump), herr)
			}
			continue
		}
		if g, err := heapdump.ReadGraph(bytes.NewReader(dump)); err != nil || g.Objects() < 100 {
			t.Fatalf("API %d: HPDS gave %d bytes: %v", api, len(dump), err)
		}
		file, ok := d.File("/sdcard/x.hprof")
		if herr != nil || !bytes.Equal(reply, []byte{ddms.HeapDumpOK}) || !ok || !bytes.HasPrefix(file, []byte("JAVA PROFILE 1.0.3")) {
			t.Errorf("API %d: HPDU %v %v, file %d bytes", api, reply, herr, len(file))
		}
		if reply, err := cl.Request(ctx5(t), ddms.HPDU, ddms.EncodeHeapDumpFile("/data/local/tmp/x.hprof")); err != nil || !bytes.Equal(reply, []byte{ddms.HeapDumpFailed}) {
			t.Errorf("API %d: HPDU to a path the app may not write: %v %v", api, reply, err)
		}
	}
}

// An app allocates whether or not anything tracks it (ART's tracker only
// decides whether allocations are recorded): a heap dump of an app no
// client ever tracked shows what its workload kept and leaked.
func TestUntrackedAppHeapGrows(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-untracked", API: 30})
	defer d.Close()
	vm := NewVM(AppConfig{PID: 5100, Package: "com.example.untracked", Workload: DefaultWorkload()}, 30)
	d.AddVM(vm)
	// The app has run its workload for a minute (2,000 allocations a
	// second: 6 Activities recreated, every third one leaked) before the
	// dump: the VM's clock is set back rather than waited on.
	vm.mu.Lock()
	vm.last = vm.last.Add(-time.Minute)
	vm.mu.Unlock()
	if out, errOut, code := d.runShellIO("am dumpheap 5100 /data/local/tmp/u.hprof", nil); code != 0 {
		t.Fatalf("am dumpheap: exit %d, %q %q", code, out, errOut)
	}
	dump, _ := d.File("/data/local/tmp/u.hprof")
	r := bytes.NewReader(dump)
	g, err := heapdump.ReadGraph(r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.Analyze(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	leaks := 0
	for _, l := range a.Leaks {
		if l.Kind == "activity" {
			leaks++
		}
	}
	if st := vm.Stats(); st.TrackingOn || st.Enabled || leaks != 2 || g.Objects() < 1000 {
		t.Errorf("never tracked (on %v, ever %v): %d objects, %d leaked Activities; want > 1000 and 2", st.TrackingOn, st.Enabled, g.Objects(), leaks)
	}
}
