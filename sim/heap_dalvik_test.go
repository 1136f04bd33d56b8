package sim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/alloctrack/alloctrack/internal/realtest"
)

// An Android 4.4 app's dump, in Dalvik's layout, read by the product's
// analysis: every class's instances per heap (zygote and app: Dalvik has
// no image) as the simulator kept them, the leaked Activities and
// Fragments, the icons' duplicate buffers, and the duplicate Strings by
// their text (count chars from offset): a substring that shares its
// parent's char[] is no copy of its parent, one whose text equals other
// Strings' is. Android's hprof-conv converts it as ConvertStandard does,
// with -z (the app's heap only) too.
func TestHeapDumpTruthDalvik(t *testing.T) {
	vm := NewVM(AppConfig{PID: 4242, Package: "com.example.heapy", API: 19, Workload: DefaultWorkload()}, 19)
	vm.Allocate(200_000) // 10 recreations, 3 leaked
	dump, truth := vm.HeapDump()
	if len(truth.LeakedActivities) != 3 || truth.Instances["image"] != nil {
		t.Fatalf("truth: %d leaked, image heap %v", len(truth.LeakedActivities), truth.Instances["image"])
	}
	r := bytes.NewReader(dump)
	g, err := heapdump.ReadGraph(r)
	if err != nil {
		t.Fatal(err)
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
	if len(got) != len(truth.Instances) {
		t.Errorf("heaps %v in the dump, %d in the simulator", slices.Collect(maps.Keys(got)), len(truth.Instances))
	}
	for heap, classes := range truth.Instances {
		for class, n := range classes {
			if got[heap][class] != n {
				t.Errorf("heap %s %s: %d in the dump, %d in the simulator", heap, class, got[heap][class], n)
			}
		}
		if len(got[heap]) != len(classes) {
			t.Errorf("heap %s: %d classes in the dump, %d in the simulator", heap, len(got[heap]), len(classes))
		}
	}
	if a.Histogram.Unreachable != 0 {
		t.Errorf("%d unreachable objects", a.Histogram.Unreachable)
	}
	var acts, frags []uint64
	for _, l := range a.Leaks {
		if l.Kind == "activity" {
			acts = append(acts, l.ID)
		} else {
			frags = append(frags, l.ID)
		}
		if len(l.Path) < 2 || l.Path[0].Ref != "static sLeaked" {
			t.Errorf("leak path %+v", l.Path)
		}
	}
	slices.Sort(acts)
	slices.Sort(frags)
	if !slices.Equal(acts, truth.LeakedActivities) || !slices.Equal(frags, truth.LeakedFragments) {
		t.Errorf("leaks %x %x, truth %x %x", acts, frags, truth.LeakedActivities, truth.LeakedFragments)
	}
	icons := 0
	for _, d := range a.DuplicateBitmaps {
		icons = max(icons, d.Copies)
	}
	if icons != truth.IconCopies {
		t.Errorf("%d icons share a buffer, truth %d", icons, truth.IconCopies)
	}
	checkDalvikStrings(t, vm.heap, a.DuplicateStrings)
	conv := realtest.Program(t, "hprof-conv", "hprof-conv", "/usr/lib/android-sdk/platform-tools")
	dir := t.TempDir()
	in, ref := filepath.Join(dir, "d.hprof"), filepath.Join(dir, "ref.hprof")
	os.WriteFile(in, dump, 0o644)
	for _, appOnly := range []bool{false, true} {
		args := []string{in, ref}
		if appOnly {
			args = []string{"-z", in, ref}
		}
		if out, err := exec.Command(conv, args...).CombinedOutput(); err != nil {
			t.Fatalf("hprof-conv %v: %v\n%s", args, err, out)
		}
		var std bytes.Buffer
		if err := hprof.ConvertStandard(bytes.NewReader(dump), &std, appOnly); err != nil {
			t.Fatal(err)
		}
		if want, _ := os.ReadFile(ref); !bytes.Equal(std.Bytes(), want) {
			t.Errorf("hprof-conv %v converts the dump differently", args)
		}
	}
}

// checkDalvikStrings compares the duplicate Strings found with the
// simulator's own Strings grouped by text (count chars from offset of
// their value): the text each group shows, and in how many distinct
// arrays it is held (Strings that share an array are one copy, as the
// simulator's truth counts them too).
func checkDalvikStrings(t *testing.T, h *simHeap, dups []heapdump.Duplicate) {
	t.Helper()
	held := map[string]map[uint32]bool{} // text -> the arrays that hold it
	for _, o := range h.objs {
		if o.class < 0 || h.classes[o.class].name != "java.lang.String" {
			continue
		}
		f := map[string]uint64{"offset": uint64(h.subOff[o.id])}
		for i, lf := range h.layout(o.class) {
			f[lf.name] = o.vals[i]
		}
		arr := h.objs[uint32(f["value"])]
		text := string(arr.data[2*f["offset"] : 2*(f["offset"]+f["count"])])
		if held[text] == nil {
			held[text] = map[uint32]bool{}
		}
		held[text][arr.id] = true
	}
	want := map[string]int{}
	for text, arrs := range held {
		if n := len(arrs); n > 1 {
			var s []rune
			for i := 0; i < len(text); i += 2 {
				s = append(s, rune(binary.BigEndian.Uint16([]byte(text[i:]))))
			}
			want[string(s)] = n
		}
	}
	got := map[string]int{}
	for _, d := range dups {
		got[d.Value] = d.Copies
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || want["Main"] != 5 {
		t.Errorf("duplicate Strings (text: copies) %v, the simulator's %v (Main: four titles and a substring)", got, want)
	}
	if truth := h.duplicateStrings(); fmt.Sprint(truth) != fmt.Sprint(want) {
		t.Errorf("the simulator's truth %v, its Strings %v", truth, want)
	}
}

// golden builds expected dump bytes.
type golden struct{ bytes.Buffer }

func (g *golden) u1(v ...byte) *golden { g.Write(v); return g }
func (g *golden) u2(v uint16) *golden  { g.Write(binary.BigEndian.AppendUint16(nil, v)); return g }
func (g *golden) u4(v ...uint32) *golden {
	for _, x := range v {
		g.Write(binary.BigEndian.AppendUint32(nil, x))
	}
	return g
}
func (g *golden) record(tag byte, body *golden) *golden {
	return g.u1(tag).u4(0, uint32(body.Len())).u1(body.Bytes()...)
}

// A small heap dumped as Dalvik's vm/hprof/ writes it (android-4.4.4_r1;
// docs/heapdumps.md has each fact's lines), byte for byte: the header with
// 4-byte ids; STRING records (ids are Dalvik's C strings' addresses, here
// numbered in the order they are met), a LOAD CLASS for each class met
// (serials from 0x50000000), an empty STACK TRACE; then one segment: the
// sticky-class roots, then objects by address, the zygote's first, each
// heap named by a HEAP DUMP INFO; classes among them, with a
// $staticOverhead byte[] of 24 bytes per static only when they have
// statics and Dalvik's objectSize (8-byte header included); Strings as
// value, hashCode, offset, count, a substring sharing its parent's char[];
// then HEAP DUMP END.
func TestDalvikDumpLayout(t *testing.T) {
	h := &simHeap{api: 19, next: 0x1000, byName: map[string]int{}, objs: map[uint32]*hobj{}, subOff: map[uint32]uint32{}, shared: map[uint32]int{}}
	in := hprof.Int
	h.class("java.lang.Object", "", heapImage, nil, nil)                                                                            // 0x1000
	h.class("java.lang.String", "java.lang.Object", heapImage, []hfield{{"count", in}, {"hash", in}, {"value", hprof.Object}}, nil) // 0x1048
	h.class("char[]", "java.lang.Object", heapImage, nil, nil)                                                                      // 0x1090
	v := h.primArray(hprof.Char, heapApp, []byte{0, 'h', 0, 'i', 0, '!'})                                                           // 0x10d8
	s := h.instance("java.lang.String", heapApp, 3, 0, uint64(v.id))                                                                // 0x10f8
	h.substring(s, 1, 2)                                                                                                            // 0x1118: "i!"
	h.class("com.example.A", "java.lang.Object", heapApp, nil, []hstatic{{"sName", hprof.Object, uint64(s.id)}})                    // 0x1138
	if v.id != 0x10d8 || s.id != 0x10f8 || h.classes[3].id != 0x1138 {
		t.Fatalf("ids %x %x %x", v.id, s.id, h.classes[3].id)
	}
	got := h.dump(time.UnixMilli(0x0000_0145_0000_1234))

	const sZygote, sObject, sString, sValue, sHashCode, sOffset, sCount, sChars, sApp, sA, sOverhead, sName = 0x400000, 0x400001, 0x400002, 0x400003, 0x400004, 0x400005, 0x400006, 0x400007, 0x400008, 0x400009, 0x40000a, 0x40000b
	want := &golden{}
	want.WriteString("JAVA PROFILE 1.0.3\x00")
	want.u4(4, 0x145, 0x1234)
	for i, str := range []string{"zygote", "java.lang.Object", "java.lang.String", "value", "hashCode", "offset", "count", "char[]", "app", "com.example.A", "$staticOverhead", "sName"} {
		b := &golden{}
		b.u4(uint32(0x400000 + i)).WriteString(str)
		want.record(0x01, b)
	}
	for i, c := range []struct{ id, name uint32 }{{0x1000, sObject}, {0x1048, sString}, {0x1090, sChars}, {0x1138, sA}} {
		want.record(0x02, (&golden{}).u4(0x50000000+uint32(i), c.id, 0, c.name))
	}
	want.record(0x05, (&golden{}).u4(0, 0, 0))
	seg := &golden{}
	seg.u1(0x05).u4(0x1000).u1(0x05).u4(0x1048).u1(0x05).u4(0x1090).u1(0x05).u4(0x1138)
	seg.u1(0xFE).u4('Z', sZygote)
	seg.u1(0x20).u4(0x1000, 0, 0, 0, 0, 0, 0, 0, 8).u2(0).u2(0).u2(0)
	seg.u1(0x20).u4(0x1048, 0, 0x1000, 0, 0, 0, 0, 0, 24).u2(0).u2(0).u2(4)
	seg.u4(sValue).u1(2).u4(sHashCode).u1(10).u4(sOffset).u1(10).u4(sCount).u1(10)
	seg.u1(0x20).u4(0x1090, 0, 0x1000, 0, 0, 0, 0, 0, 8).u2(0).u2(0).u2(0)
	seg.u1(0xFE).u4('A', sApp)
	seg.u1(0x23).u4(0x10d8, 0, 3).u1(5, 0, 'h', 0, 'i', 0, '!')
	seg.u1(0x21).u4(0x10f8, 0, 0x1048, 16, 0x10d8, 0, 0, 3)
	seg.u1(0x21).u4(0x1118, 0, 0x1048, 16, 0x10d8, 0, 1, 2)
	seg.u1(0x23).u4(0x1139, 0, 24).u1(8).u1(make([]byte, 24)...)
	seg.u1(0x20).u4(0x1138, 0, 0x1000, 0, 0, 0, 0, 0, 8).u2(0).u2(2)
	seg.u4(sOverhead).u1(2).u4(0x1139).u4(sName).u1(2).u4(0x10f8).u2(0)
	want.record(0x1C, seg)
	want.record(0x2C, &golden{})
	if !bytes.Equal(got, want.Bytes()) {
		for i := range min(len(got), want.Len()) {
			if got[i] != want.Bytes()[i] {
				t.Fatalf("byte %d: got % x\nwant % x", i, got[i:min(len(got), i+24)], want.Bytes()[i:min(want.Len(), i+24)])
			}
		}
		t.Fatalf("got %d bytes, want %d", len(got), want.Len())
	}
}

// Dalvik's segments (HprofHeap.cpp): a new one once the current one holds
// 128 sub-records, roots included (a class and its $staticOverhead array
// are one), or 4 KiB; each starts in no heap, so its first object comes
// after a HEAP DUMP INFO.
func TestDalvikDumpSegments(t *testing.T) {
	vm := NewVM(AppConfig{PID: 4243, Package: "com.example.heapy", API: 19, Workload: DefaultWorkload()}, 19)
	vm.Allocate(50_000)
	dump, _ := vm.HeapDump()
	type seg struct {
		n, roots int
		named    bool // a HEAP DUMP INFO before its first object
		bad      bool // an object before any
		length   int
	}
	var segs []*seg
	cur := func() *seg { return segs[len(segs)-1] }
	object := func() {
		s := cur()
		s.n++
		s.bad = s.bad || !s.named
	}
	rd, err := hprof.NewReader(bytes.NewReader(dump))
	if err != nil {
		t.Fatal(err)
	}
	err = rd.Walk(&hprof.Visitor{
		Segment:     func() error { segs = append(segs, &seg{}); return nil },
		HeapInfo:    func(uint32, uint64) error { cur().named = true; return nil },
		Root:        func(byte, uint64) error { cur().n++; cur().roots++; return nil },
		ClassDump:   func(*hprof.ClassDump) error { object(); return nil },
		Instance:    func(uint64, uint64, uint32) error { object(); return nil },
		ObjectArray: func(uint64, uint64, uint32) error { object(); return nil },
		PrimitiveArray: func(id uint64, _ hprof.Type, _ uint32) error {
			if id&1 == 0 { // not a class's $staticOverhead
				object()
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The segments' lengths, from the records.
	i, k := len("JAVA PROFILE 1.0.3\x00")+12, 0
	for i+9 <= len(dump) {
		n := int(binary.BigEndian.Uint32(dump[i+5:]))
		if dump[i] == hprof.TagHeapDumpSegment {
			segs[k].length = n
			k++
		}
		i += 9 + n
	}
	if len(segs) < 10 || segs[0].roots == 0 || segs[0].n != 128 {
		t.Fatalf("%d segments, the first %+v: want many, the first of 128 with the roots", len(segs), segs[0])
	}
	for j, s := range segs {
		if s.n > 128 || s.bad || j < len(segs)-1 && s.n < 128 && s.length < 4096 {
			t.Errorf("segment %d of %d: %+v", j, len(segs), s)
		}
	}
}
