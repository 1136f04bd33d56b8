package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"maps"
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

// A simulated app's dump, in each version's layout, read by the product's
// reader: every class's instances per heap as the simulator kept them,
// the leaked Activities and Fragments, the icons' duplicate buffers (API
// 25 and before), the duplicate Strings, and Android's hprof-conv converts
// it as ConvertStandard does.
func TestHeapDumpTruth(t *testing.T) {
	for _, api := range []int{21, 23, 25, 28, 30, 33, 35} {
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
		strs := map[string]int{}
		for _, d := range a.DuplicateStrings {
			strs[d.Value] = d.Copies
		}
		if len(truth.DuplicateStrings) < 10 || !maps.Equal(strs, truth.DuplicateStrings) {
			t.Errorf("API %d: duplicate Strings %v, truth %v", api, strs, truth.DuplicateStrings)
		}
		sameAsHprofConv(t, api, dump)
	}
}

// sameAsHprofConv checks that hprof-conv takes a dump, and agrees with
// ConvertStandard, with and without -z.
func sameAsHprofConv(t *testing.T, api int, dump []byte) {
	t.Helper()
	conv := realtest.Program(t, "hprof-conv", "hprof-conv", "/usr/lib/android-sdk/platform-tools")
	dir := t.TempDir()
	in, ref := filepath.Join(dir, "d.hprof"), filepath.Join(dir, "ref.hprof")
	os.WriteFile(in, dump, 0o644)
	for _, z := range []bool{false, true} {
		args := []string{in, ref}
		if z {
			args = append([]string{"-z"}, args...)
		}
		if out, err := exec.Command(conv, args...).CombinedOutput(); err != nil {
			t.Fatalf("hprof-conv: %v\n%s", err, out)
		}
		var std bytes.Buffer
		if err := hprof.ConvertStandard(bytes.NewReader(dump), &std, z); err != nil {
			t.Fatal(err)
		}
		if want, _ := os.ReadFile(ref); !bytes.Equal(std.Bytes(), want) {
			t.Errorf("API %d: hprof-conv (-z %v) converts the dump differently", api, z)
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

// layoutSeen is what a dump's records show of its VM's layout.
type layoutSeen struct {
	stackTrace  bool     // a STACK TRACE record before the heap
	maxSegment  int      // the most roots and objects in one segment
	vmRoots     int      // 0x8D roots
	stringField []string // java.lang.String's fields
	statics     map[string]map[hprof.Type]bool
	appClasses  map[uint32]int     // heap id -> classes with a class loader
	valueType   map[hprof.Type]int // the types of Strings' inline characters
	// Android 5: Strings with an offset, and arrays more than one String
	// uses.
	substrings, shared int
}

// stackTraceFirst tells whether a dump has an empty STACK TRACE record
// before its heap.
func stackTraceFirst(dump []byte) bool {
	// Top-level records: after the header, u1 tag, u4 time, u4 length.
	off := bytes.IndexByte(dump, 0) + 1 + 4 + 8
	for off+9 <= len(dump) && dump[off] != hprof.TagHeapDumpSegment {
		if dump[off] == hprof.TagStackTrace && bytes.Equal(dump[off+5:off+9], []byte{0, 0, 0, 12}) {
			return true
		}
		off += 9 + int(binary.BigEndian.Uint32(dump[off+5:]))
	}
	return false
}

func seeLayout(t *testing.T, dump []byte) layoutSeen {
	t.Helper()
	s := layoutSeen{stackTrace: stackTraceFirst(dump), statics: map[string]map[hprof.Type]bool{}, appClasses: map[uint32]int{}, valueType: map[hprof.Type]int{}}
	names := map[uint64]string{}
	classNames := map[uint64]uint64{}
	heap, inSeg, lastString := uint32(0), 0, uint64(0)
	users := map[uint32]int{} // Android 5: char[] -> Strings
	count := func() { inSeg++; s.maxSegment = max(s.maxSegment, inSeg) }
	rd, err := hprof.NewReader(bytes.NewReader(dump))
	if err != nil {
		t.Fatal(err)
	}
	err = rd.Walk(&hprof.Visitor{
		String:    func(id uint64, b []byte) error { names[id] = string(b); return nil },
		LoadClass: func(_ uint32, c, n uint64) error { classNames[c] = n; return nil },
		Segment:   func() error { inSeg = 0; return nil },
		HeapInfo:  func(id uint32, _ uint64) error { heap = id; return nil },
		Root: func(tag byte, _ uint64) error {
			count()
			if tag == hprof.RootVMInternal {
				s.vmRoots++
			}
			return nil
		},
		ClassDump: func(c *hprof.ClassDump) error {
			count()
			for _, st := range c.Statics {
				n := names[st.NameID]
				if s.statics[n] == nil {
					s.statics[n] = map[hprof.Type]bool{}
				}
				s.statics[n][st.Type] = true
			}
			if c.LoaderID != 0 {
				s.appClasses[heap]++
			}
			if names[classNames[c.ID]] == "java.lang.String" {
				for _, f := range c.Fields {
					s.stringField = append(s.stringField, names[f.NameID])
				}
			}
			return nil
		},
		Instance: func(id, class uint64, _ uint32) error {
			count()
			if names[classNames[class]] == "java.lang.String" {
				lastString = id
			}
			return nil
		},
		InstanceData: func(_, class uint64, data []byte) error {
			if names[classNames[class]] == "java.lang.String" && len(data) == 16 { // value, count, hashCode, offset
				users[binary.BigEndian.Uint32(data)]++
				if binary.BigEndian.Uint32(data[12:]) != 0 {
					s.substrings++
				}
			}
			return nil
		},
		ObjectArray: func(uint64, uint64, uint32) error { count(); return nil },
		PrimitiveArray: func(id uint64, ty hprof.Type, _ uint32) error {
			count()
			if lastString != 0 && (id == lastString+16 || id == lastString+8) { // its fake value
				s.valueType[ty]++
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range users {
		if n > 1 {
			s.shared++
		}
	}
	return s
}

// Each ART version's dump layout (docs/heapdumps.md, facts 6-9): String
// fields (5.x: value, count, hashCode, offset; from 6.0 count, hash and
// the fake value, whose characters are a byte[] when ASCII from 8.0), the
// class overhead's fake statics (none on 5.x, $staticOverhead on 6.0,
// $classOverhead from 7.0, small ones as primitives with $classOverhead2
// from 8.1), the app's classes in heap 'I' on 7.x, VM-internal roots and
// $class$ statics from 8.1, roots counted toward a segment's 128 objects, and the STACK TRACE
// record on every version.
func TestHeapDumpLayouts(t *testing.T) {
	obj := hprof.Object
	for _, c := range []struct {
		api         int
		strings     string
		overhead    map[string][]hprof.Type // fake statics and their types
		notOverhead []string
		appHeap     uint32
		bytes       bool // compressed Strings' byte[]
	}{
		{21, "value count hashCode offset", nil, []string{"$staticOverhead", "$classOverhead"}, 'A', false},
		{23, "count hash value", map[string][]hprof.Type{"$staticOverhead": {obj}}, []string{"$classOverhead"}, 'A', false},
		{25, "count hash value", map[string][]hprof.Type{"$classOverhead": {obj}}, []string{"$staticOverhead", "$classOverhead2"}, 'I', false},
		{26, "count hash value", map[string][]hprof.Type{"$classOverhead": {obj}}, []string{"$classOverhead2"}, 'A', true},
		{28, "count hash value", map[string][]hprof.Type{"$classOverhead": {obj, hprof.Int, hprof.Short, hprof.Byte}, "$classOverhead2": {hprof.Byte}}, []string{"$staticOverhead"}, 'A', true},
	} {
		vm := NewVM(AppConfig{PID: 4242, Package: "com.example.heapy", API: c.api, Workload: DefaultWorkload()}, c.api)
		vm.Allocate(50_000)
		dump, _ := vm.HeapDump()
		s := seeLayout(t, dump)
		if c.api < 23 && (s.substrings == 0 || s.shared == 0) {
			t.Errorf("API %d: %d substrings, %d shared char[]", c.api, s.substrings, s.shared)
		}
		if !s.stackTrace {
			t.Errorf("API %d: no STACK TRACE record before the heap", c.api)
		}
		if s.maxSegment > 128 {
			t.Errorf("API %d: %d roots and objects in a segment, want 128 at most", c.api, s.maxSegment)
		}
		if (s.vmRoots > 0) != (c.api >= 27) || (s.statics["$class$classLoader"] != nil) != (c.api >= 27) {
			t.Errorf("API %d: %d VM-internal roots, $class$ statics %v", c.api, s.vmRoots, s.statics["$class$classLoader"])
		}
		if got := strings.Join(s.stringField, " "); got != c.strings {
			t.Errorf("API %d: String fields %q, want %q", c.api, got, c.strings)
		}
		for name, types := range c.overhead {
			for _, ty := range types {
				if !s.statics[name][ty] {
					t.Errorf("API %d: no %s static %s (%v)", c.api, ty.Name(), name, s.statics[name])
				}
			}
			if len(s.statics[name]) != len(types) {
				t.Errorf("API %d: %s of types %v, want %v", c.api, name, s.statics[name], types)
			}
		}
		for _, name := range c.notOverhead {
			if s.statics[name] != nil {
				t.Errorf("API %d: a static %s", c.api, name)
			}
		}
		if len(s.appClasses) != 1 || s.appClasses[c.appHeap] < 5 {
			t.Errorf("API %d: the app's classes by heap %v, want all in %c", c.api, s.appClasses, c.appHeap)
		}
		if inline := c.api >= 23; (s.valueType[hprof.Byte] > 0) != c.bytes || (s.valueType[hprof.Char] > 0) != (inline && !c.bytes) {
			t.Errorf("API %d: Strings' inline characters: %d byte[], %d char[]", c.api, s.valueType[hprof.Byte], s.valueType[hprof.Char])
		}
	}
}
