package sim

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"
	"time"
	"unicode/utf16"

	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// Android 4.4 and before: Dalvik writes its own dump (platform/dalvik
// vm/hprof/, android-4.4.4_r1; docs/heapdumps.md has the facts, each with
// its file and lines). What differs from ART's layout:
//   - two heaps, 'Z' zygote (every object the zygote made before it forked)
//     and 'A' app; no image: the boot classes are the zygote's;
//   - classes are objects of the heap, dumped where they lie among the
//     others (by address); a class with static fields is preceded by a
//     byte[] "$staticOverhead" of 24 bytes per static, one without has
//     none;
//   - Strings are value (char[]), hashCode, offset and count: a substring
//     shares its parent's char[] and is count chars from offset;
//   - roots count toward the 128 objects of a segment, and Dalvik's table
//     from its root kinds to hprof's is shifted past the interned strings:
//     its debugger roots are written as 0x8A, its VM-internal ones as 0x8B
//     and its JNI monitors as 0x8C;
//   - the dump is written as a tail (the heap) and a head (strings, LOAD
//     CLASS of the classes met, one empty STACK TRACE) put before it.
const (
	apiART = 21 // the first Android whose VM is ART (5.0)

	dalvikStaticSize   = 24 // sizeof(StaticField) on a 32-bit device
	dalvikHeaderSize   = 8  // Object: clazz and lock
	dalvikRootVM       = 0x8B
	tagStackTrace      = 0x05
	dalvikClassSerial0 = 0x50000000 // INITIAL_CLASS_SERIAL_NUMBER
)

// dalvikInit adds to a heap what a Dalvik app's heap has and ART's model
// does not: the primitive array classes (class objects of the heap), the
// main thread's Thread (a thread root), and Strings that share their
// parent's char[] (substrings), one of them equal to the Activities'
// titles, held by a class of the app.
func (h *simHeap) dalvikInit() {
	for _, name := range []string{"byte[]", "char[]", "int[]", "long[]"} {
		h.class(name, "java.lang.Object", heapImage, nil, nil)
	}
	h.class("java.lang.Thread", "java.lang.Object", heapImage, []hfield{{"name", hprof.Object}}, nil)
	h.roots = append(h.roots, h.instance("java.lang.Thread", heapZygote, uint64(h.str("main", heapZygote).id)).id)
	h.subOff = map[uint32]uint32{}
	full := h.str(h.pkg+".MainActivity", heapApp)
	short := h.substring(full, len(h.pkg)+1, len("MainActivity"))
	main := h.substring(full, len(h.pkg)+1, len("Main")) // "Main", as the titles
	obj := hprof.Object
	h.class(h.pkg+".Names", "java.lang.Object", heapApp, nil,
		[]hstatic{{"sFull", obj, uint64(full.id)}, {"sShort", obj, uint64(short.id)}, {"sMain", obj, uint64(main.id)}})
}

// substring makes a String of n chars of s's value from off, sharing it,
// as Dalvik's String.substring does.
func (h *simHeap) substring(s *hobj, off, n int) *hobj {
	layout := h.layout(s.class)
	o := h.instance("java.lang.String", s.heap)
	h.subOff[o.id] = uint32(off) // unless the model has the field
	for i, f := range layout {
		switch f.name {
		case "value":
			o.vals[i] = s.vals[i]
			h.shared[uint32(s.vals[i])]++
			chars := h.objs[uint32(s.vals[i])].data[2*off : 2*(off+n)]
			o.text = string(utf16.Decode(uint16s(chars)))
		case "count":
			o.vals[i] = uint64(n)
		case "offset":
			o.vals[i] = uint64(off)
			delete(h.subOff, o.id)
		}
	}
	return o
}

// uint16s reads big-endian UTF-16 code units.
func uint16s(b []byte) []uint16 {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return u
}

// dalvikHeap is the heap Dalvik names an object's: the model's image is
// the zygote's.
func dalvikHeap(heap byte) byte {
	if heap == heapApp {
		return heapApp
	}
	return heapZygote
}

// dalvikTruth is what a Dalvik dump shows, the leaks and copies of t
// kept: every class and object in the zygote's heap or the app's (no
// image), and a $staticOverhead byte[] for each class with statics.
func (h *simHeap) dalvikTruth(t HeapTruth) HeapTruth {
	t.Instances = map[string]map[string]uint64{}
	add := func(heap byte, class string) {
		name := map[byte]string{heapApp: "app", heapZygote: "zygote"}[dalvikHeap(heap)]
		if t.Instances[name] == nil {
			t.Instances[name] = map[string]uint64{}
		}
		t.Instances[name][class]++
	}
	for _, c := range h.classes {
		if len(c.statics) > 0 {
			add(c.heap, "byte[]")
		}
		add(c.heap, "java.lang.Class")
	}
	for _, id := range h.order {
		switch o := h.objs[id]; {
		case o == nil:
		case o.class < 0:
			add(o.heap, o.prim.Name()+"[]")
		default:
			add(o.heap, h.classes[o.class].name)
		}
	}
	return t
}

// dwriter writes the tail of a Dalvik dump: heap dump segments of at most
// 128 objects and roots, a new one started once the current one holds
// 4 KiB, each starting in no heap (HprofHeap.cpp).
type dwriter struct {
	head    *hwriter // strings, then LOAD CLASS and STACK TRACE
	tail    hwriter
	objects int
	heap    byte
	met     map[uint32]bool // classes looked up (hprofLookupClassId)
}

// next starts a root's or an object's sub-record.
func (w *dwriter) next(obj bool, heap byte) *bytes.Buffer {
	if w.objects >= 128 || w.tail.seg.Len() >= 4096 {
		w.tail.record(hprof.TagHeapDumpSegment, w.tail.seg.Bytes())
		w.tail.seg.Reset()
		w.objects = 0
		if obj {
			w.heap = 0
		}
	}
	w.objects++
	s := &w.tail.seg
	if obj && heap != w.heap {
		w.tail.u1(s, hprof.SubHeapDumpInfo)
		w.tail.u4(s, uint32(heap))
		w.tail.u4(s, w.head.str(map[byte]string{heapApp: "app", heapZygote: "zygote"}[heap]))
		w.heap = heap
	}
	return s
}

// class is a class's id, noted as met (its name in the strings, a LOAD
// CLASS record for it).
func (w *dwriter) class(h *simHeap, ci int) uint32 {
	c := &h.classes[ci]
	w.met[c.id] = true
	w.head.str(c.name)
	return c.id
}

// dumpDalvik writes the heap as Dalvik's hprofDumpHeap does.
func (h *simHeap) dumpDalvik(now time.Time) []byte {
	w := &dwriter{head: &hwriter{strs: map[string]uint32{}, next: 0x400000}, met: map[uint32]bool{}}
	h.dalvikRoots(w)
	type item struct {
		id    uint32
		heap  byte
		class int // a class's index, -1 for an object
	}
	var items []item
	for ci, c := range h.classes {
		items = append(items, item{c.id, dalvikHeap(c.heap), ci})
	}
	for _, id := range h.order {
		if o := h.objs[id]; o != nil {
			items = append(items, item{id, dalvikHeap(o.heap), -1})
		}
	}
	// The live bitmap's walk: by address, the zygote's space below the
	// app's (so the zygote's first, though 'Z' sorts after 'A').
	app := func(x item) int {
		if x.heap == heapApp {
			return 1
		}
		return 0
	}
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(app(a), app(b)), cmp.Compare(a.id, b.id))
	})
	for _, it := range items {
		if it.class >= 0 {
			h.dalvikClass(w, it.class)
		} else {
			h.dalvikObject(w, h.objs[it.id])
		}
	}
	w.tail.record(hprof.TagHeapDumpSegment, w.tail.seg.Bytes())
	w.tail.record(hprof.TagHeapDumpEnd, nil)
	return h.dalvikHead(w, now)
}

// dalvikHead writes the file: the header, the strings, a LOAD CLASS for
// each class met, the empty STACK TRACE, then the tail.
func (h *simHeap) dalvikHead(w *dwriter, now time.Time) []byte {
	var out bytes.Buffer
	out.WriteString("JAVA PROFILE 1.0.3\x00")
	out.Write(binary.BigEndian.AppendUint32(nil, 4))
	out.Write(binary.BigEndian.AppendUint64(nil, uint64(now.UnixMilli())))
	out.Write(w.head.out.Bytes())
	w.head.out.Reset()
	for i, c := range h.classes {
		if !w.met[c.id] {
			continue
		}
		body := binary.BigEndian.AppendUint32(nil, uint32(dalvikClassSerial0+i))
		body = binary.BigEndian.AppendUint32(body, c.id)
		body = binary.BigEndian.AppendUint32(body, 0)
		body = binary.BigEndian.AppendUint32(body, w.head.strs[c.name])
		w.head.record(hprof.TagLoadClass, body)
	}
	w.head.record(tagStackTrace, make([]byte, 12)) // serial 0, thread 0, no frames
	out.Write(w.head.out.Bytes())
	out.Write(w.tail.out.Bytes())
	return out.Bytes()
}

// dalvikRoots writes the roots in dvmVisitRoots' order: the loaded
// classes (sticky), the interned strings, the VM's own (written as 0x8B,
// see above), then the threads (id, thread id, -1).
func (h *simHeap) dalvikRoots(w *dwriter) {
	tagOf := func(id uint32) byte {
		switch o := h.objs[id]; {
		case o == nil:
			return hprof.RootStickyClass
		case o.heap == heapImage:
			return hprof.RootInternedString
		case o.class >= 0 && h.classes[o.class].name == "java.lang.Thread":
			return hprof.RootThreadObject
		}
		return dalvikRootVM
	}
	for _, tag := range []byte{hprof.RootStickyClass, hprof.RootInternedString, dalvikRootVM, hprof.RootThreadObject} {
		for _, id := range h.roots {
			if tagOf(id) != tag {
				continue
			}
			s := w.next(false, 0)
			w.tail.u1(s, tag)
			w.tail.u4(s, id)
			if tag == hprof.RootThreadObject {
				w.tail.u4(s, 1)          // the main thread's id
				w.tail.u4(s, 0xFFFFFFFF) // -1
			}
		}
	}
}

// dalvikFields is a class's own instance fields as Dalvik writes them:
// String's are Dalvik's own; the model's other classes declare their
// reference fields first, the order Dalvik gives them (computeFieldOffsets).
func (h *simHeap) dalvikFields(ci int) []hfield {
	if h.classes[ci].name == "java.lang.String" {
		in := hprof.Int
		return []hfield{{"value", hprof.Object}, {"hashCode", in}, {"offset", in}, {"count", in}}
	}
	return h.classes[ci].fields
}

// dalvikClass writes a CLASS DUMP, after its $staticOverhead byte[] if it
// has statics: one object for the segment's count.
func (h *simHeap) dalvikClass(w *dwriter, ci int) {
	c := &h.classes[ci]
	s := w.next(true, dalvikHeap(c.heap))
	u1, u2, u4 := w.tail.u1, w.tail.u2, w.tail.u4
	if len(c.statics) > 0 {
		u1(s, hprof.SubPrimArrayDump)
		u4(s, c.id|1)
		u4(s, 0)
		u4(s, uint32(dalvikStaticSize*len(c.statics)))
		u1(s, byte(hprof.Byte))
		s.Write(make([]byte, dalvikStaticSize*len(c.statics)))
	}
	u1(s, hprof.SubClassDump)
	u4(s, w.class(h, ci))
	u4(s, 0)
	super := uint32(0)
	if c.super >= 0 {
		super = w.class(h, c.super)
	}
	u4(s, super)
	u4(s, uint32(h.live(hprof.Object, uint64(c.loader)))) // 0: the boot loader
	for range 4 {                                         // signer, domain, reserved
		u4(s, 0)
	}
	size := dalvikHeaderSize
	for k := ci; k >= 0; k = h.classes[k].super {
		for _, f := range h.dalvikFields(k) {
			size += max(4, f.t.Size(4)) // every field takes a word or two
		}
	}
	u4(s, uint32(size))
	u2(s, 0)
	if len(c.statics) == 0 {
		u2(s, 0)
	} else {
		u2(s, uint16(len(c.statics)+1))
		u4(s, w.head.str("$staticOverhead"))
		u1(s, byte(hprof.Object))
		u4(s, c.id|1)
		for _, st := range c.statics {
			u4(s, w.head.str(st.name))
			u1(s, byte(st.t))
			writeValue(s, st.t, h.live(st.t, st.v))
		}
	}
	fields := h.dalvikFields(ci)
	u2(s, uint16(len(fields)))
	for _, f := range fields {
		u4(s, w.head.str(f.name))
		u1(s, byte(f.t))
	}
}

// live is a reference's value in the dump: 0 for a collected object.
func (h *simHeap) live(t hprof.Type, v uint64) uint64 {
	if t == hprof.Object && v != 0 && h.objs[uint32(v)] == nil && !h.isClass(uint32(v)) {
		return 0
	}
	return v
}

// dalvikObject writes an instance or an array.
func (h *simHeap) dalvikObject(w *dwriter, o *hobj) {
	s := w.next(true, dalvikHeap(o.heap))
	u1, u4 := w.tail.u1, w.tail.u4
	switch {
	case o.class < 0:
		u1(s, hprof.SubPrimArrayDump)
		u4(s, o.id)
		u4(s, 0)
		u4(s, o.n)
		u1(s, byte(o.prim))
		s.Write(o.data)
	case o.elems != nil || h.classes[o.class].name == "java.lang.Object[]":
		u1(s, hprof.SubObjectArrayDump)
		u4(s, o.id)
		u4(s, 0)
		u4(s, uint32(len(o.elems)))
		u4(s, w.class(h, o.class))
		for _, e := range o.elems {
			u4(s, uint32(h.live(hprof.Object, uint64(e))))
		}
	default:
		u1(s, hprof.SubInstanceDump)
		u4(s, o.id)
		u4(s, 0)
		u4(s, w.class(h, o.class))
		data := h.dalvikData(o)
		u4(s, uint32(len(data)))
		s.Write(data)
	}
}

// dalvikData is an instance's field data: its class's fields, then its
// superclass's, and so on.
func (h *simHeap) dalvikData(o *hobj) []byte {
	var data bytes.Buffer
	model := map[string]uint64{}
	for i, f := range h.layout(o.class) {
		model[f.name] = o.vals[i]
	}
	if h.classes[o.class].name == "java.lang.String" {
		if _, ok := model["hashCode"]; !ok {
			model["hashCode"] = model["hash"]
		}
		if off, ok := h.subOff[o.id]; ok {
			model["offset"] = uint64(off)
		}
	}
	for k := o.class; k >= 0; k = h.classes[k].super {
		for _, f := range h.dalvikFields(k) {
			writeValue(&data, f.t, h.live(f.t, model[f.name]))
		}
	}
	return data.Bytes()
}
