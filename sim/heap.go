package sim

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// The simulated Java heap of one app: a graph of objects in ART's three
// heaps (the boot image, the zygote's, the app's own), kept from what the
// app allocates, with Activities that are destroyed and sometimes leaked
// on purpose, their Fragments and icon Bitmaps (whose buffers are all
// equal), and Strings. A dump writes it in ART's hprof layout
// (runtime/hprof/hprof.cc; docs/heapdumps.md has the facts).

const (
	heapImage  = 'I'
	heapZygote = 'Z'
	heapApp    = 'A'

	keptSlots = 2048 // the app's cache of kept allocations
	keepEvery = 64   // one allocation in this many is kept
)

// hlayout is how one VM version writes a dump: the per-version switch of
// the simulator's hprof writer (docs/heapdumps.md, "What each Android
// version does", has each fact and its source).
type hlayout struct {
	// stringFields are java.lang.String's own instance fields, in the
	// order the dump lists them.
	stringFields []hfield
	// inline: the characters live inside the String, written as an
	// array after it that a fake "value" field points at (6.0 and
	// later); before, a String is count chars of its char[] from offset.
	inline bool
	// compressed: an ASCII String's characters are a byte[] (8.0).
	compressed bool
	// appImage is the heap the app's own image is written in (7.x: 'I';
	// else 0: the app's).
	appImage byte
	// overhead names the fake static for a class's overhead ("": none);
	// smallOverhead: 4 bytes or less are a primitive static (8.1 and
	// later), more a byte[] 4 bytes shorter.
	overhead      string
	smallOverhead bool
	// vmRoots: VM-internal roots (0x8D) for the zygote's objects, and
	// each class's own fields (its loader, superclass...) as "$class$"
	// statics (8.1).
	vmRoots bool
}

// layoutFor returns how the VM of an API level writes a dump.
func layoutFor(api int) hlayout {
	in, obj := hprof.Int, hprof.Object
	switch {
	case api <= 22: // Android 5.x (ART)
		return hlayout{stringFields: []hfield{{"value", obj}, {"count", in}, {"hashCode", in}, {"offset", in}}}
	case api == 23:
		return hlayout{stringFields: []hfield{{"count", in}, {"hash", in}}, inline: true, overhead: "$staticOverhead"}
	case api <= 25:
		return hlayout{stringFields: []hfield{{"count", in}, {"hash", in}}, inline: true, overhead: "$classOverhead", appImage: heapImage}
	case api == 26:
		return hlayout{stringFields: []hfield{{"count", in}, {"hash", in}}, inline: true, compressed: true, overhead: "$classOverhead"}
	}
	return hlayout{stringFields: []hfield{{"count", in}, {"hash", in}}, inline: true, compressed: true, overhead: "$classOverhead", smallOverhead: true, vmRoots: true}
}

type hfield struct {
	name string
	t    hprof.Type
}

type hstatic struct {
	name string
	t    hprof.Type
	v    uint64
}

type hclass struct {
	id      uint32
	name    string // dotted
	super   int    // index, -1 none
	fields  []hfield
	statics []hstatic
	heap    byte
	loader  uint32 // the app's class loader, for the app's classes
}

type hobj struct {
	id    uint32
	class int // index into classes; for primitive arrays -1
	heap  byte
	vals  []uint64 // instance field values, own fields first, then supers'
	elems []uint32 // object array
	prim  hprof.Type
	data  []byte // primitive array values
	n     uint32
	text  string // a String's
}

// HeapTruth is what a dump of a simulated heap must show.
type HeapTruth struct {
	// Instances per heap ("app", "zygote", "image") and dotted class.
	Instances map[string]map[string]uint64
	// LeakedActivities are the ids of destroyed Activities kept by the
	// app's static list; LeakedFragments those of their Fragments.
	LeakedActivities, LeakedFragments []uint64
	// IconCopies is the number of live Bitmaps sharing the icon's
	// contents, each with a buffer of its own (API 25 and before: later
	// pixels are native and not in the dump).
	IconCopies int
	// LeftOut and LeftOutBytes are the objects am dumpheap -b made for
	// the dump (Bitmap.dumpData, Android 15) and their bytes: they are
	// in the dump, not in Instances. BitmapWaste is, by "WxH", the bytes
	// each group of equal native Bitmaps wastes: the pixels (width x
	// height x bytes per pixel of the config) and the Java objects beyond
	// the first (Android 8 and later).
	LeftOut, LeftOutBytes uint64
	BitmapWaste           map[string]uint64
	// DuplicateStrings is, for each text that more than one String
	// holds, in how many distinct arrays (Strings sharing one are one).
	DuplicateStrings map[string]int
}

type simHeap struct {
	api     int
	lay     hlayout
	pkg     string
	rng     *rand.Rand
	next    uint32
	classes []hclass
	byName  map[string]int
	objs    map[uint32]*hobj
	order   []uint32 // objects in dump order (by heap, then creation)
	roots   []uint32 // sticky roots (classes) and others

	// subOff is a Dalvik substring's offset in its value (heap_dalvik.go).
	subOff map[uint32]uint32

	cache    *hobj // Object[keptSlots]
	slot     int
	leaks    *hobj // Object[]
	activity uint32
	icon     []byte
	leakedA  []uint32
	leakedF  []uint32
	destroys int
	// nativePtr is the last Bitmap's mNativePtr (Android 8 and later),
	// pixels every native Bitmap's pixels (see bitmaps.go), leftOut what
	// a dump with -b made for itself while it is being taken.
	nativePtr uint64
	pixels    map[uint64]nativePixels
	leftOut   map[uint32]bool
	// Android 5: how many Strings use each char[], and the last line
	// kept Strings were cut from.
	shared map[uint32]int
	line   *strLine
	loader uint32 // the app's PathClassLoader
}

// strLine is a range of a char[] that a String was cut from.
type strLine struct {
	arr  uint32
	off  int
	text string
}

func (h *simHeap) addr(size int) uint32 {
	id := h.next
	h.next += uint32((size + 15) &^ 7)
	return id
}

func (h *simHeap) class(name string, super string, heap byte, fields []hfield, statics []hstatic) int {
	sup := -1
	if super != "" {
		sup = h.byName[super]
	}
	c := hclass{id: h.addr(64), name: name, super: sup, fields: fields, statics: statics, heap: heap}
	if heap == heapApp {
		c.loader = h.loader
	}
	h.classes = append(h.classes, c)
	h.byName[name] = len(h.classes) - 1
	h.roots = append(h.roots, c.id)
	return len(h.classes) - 1
}

// layout is a class's instance fields in data order.
func (h *simHeap) layout(ci int) []hfield {
	var out []hfield
	for c := ci; c >= 0; c = h.classes[c].super {
		out = append(out, h.classes[c].fields...)
	}
	return out
}

func (h *simHeap) instance(class string, heap byte, vals ...uint64) *hobj {
	ci := h.byName[class]
	n := len(h.layout(ci))
	o := &hobj{id: h.addr(8 + 4*n), class: ci, heap: heap, vals: make([]uint64, n)}
	copy(o.vals, vals)
	h.objs[o.id] = o
	h.order = append(h.order, o.id)
	return o
}

func (h *simHeap) objArray(class string, heap byte, elems []uint32) *hobj {
	o := &hobj{id: h.addr(16 + 4*len(elems)), class: h.byName[class], heap: heap, elems: elems}
	h.objs[o.id] = o
	h.order = append(h.order, o.id)
	return o
}

func (h *simHeap) primArray(t hprof.Type, heap byte, data []byte) *hobj {
	o := &hobj{id: h.addr(16 + len(data)), class: -1, heap: heap, prim: t, data: data, n: uint32(len(data) / t.Size(4))}
	h.objs[o.id] = o
	h.order = append(h.order, o.id)
	return o
}

// str makes a java.lang.String: from Android 6 its characters are inside
// the object (ART writes them as an array after it; ASCII as a byte[] from
// 8.0), before as a char[] of its own.
func (h *simHeap) str(s string, heap byte) *hobj {
	if !h.lay.inline {
		return h.strOver(h.primArray(hprof.Char, heap, utf16be(s)), 0, s)
	}
	o := h.instance("java.lang.String", heap, uint64(len(s)), 0)
	o.prim, o.data, o.text = hprof.Char, append([]byte{}, utf16be(s)...), s // not nil: written
	if h.lay.compressed && isASCII(s) {
		o.prim, o.data = hprof.Byte, []byte(s)
	}
	return o
}

// strOver makes an Android 5 String of the chars of arr from off: value,
// count, hashCode, offset.
func (h *simHeap) strOver(arr *hobj, off int, s string) *hobj {
	o := h.instance("java.lang.String", arr.heap, uint64(arr.id), uint64(len(s)), 0, uint64(off))
	o.text = s
	h.shared[arr.id]++
	return o
}

// keptString makes a String the app keeps. On Android 5 it is cut from a
// line (substring shares the line's char[]), and now and then it is the
// last line's range cut again: two Strings, one array, no duplicate.
func (h *simHeap) keptString(s string) *hobj {
	if h.lay.inline {
		return h.str(s, heapApp)
	}
	if l := h.line; l != nil && h.objs[l.arr] != nil && h.rng.IntN(3) == 0 {
		return h.strOver(h.objs[l.arr], l.off, l.text)
	}
	prefix := []string{"", "k=", "key=", "x"}[h.rng.IntN(4)]
	arr := h.primArray(hprof.Char, heapApp, utf16be(prefix+s+";"))
	h.line = &strLine{arr.id, len(prefix), s}
	return h.strOver(arr, len(prefix), s)
}

// dropStr drops a String and, before Android 6, its char[] once no
// String uses it.
func (h *simHeap) dropStr(o *hobj) {
	h.drop(o.id)
	if h.lay.inline {
		return
	}
	arr := uint32(o.vals[0])
	if h.shared[arr]--; h.shared[arr] <= 0 {
		delete(h.shared, arr)
		h.drop(arr)
	}
}

func utf16be(s string) []byte {
	var b []byte
	for _, r := range s {
		b = binary.BigEndian.AppendUint16(b, uint16(r))
	}
	return b
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func newSimHeap(p *program, pkg string, api int, seed uint64) *simHeap {
	h := &simHeap{api: api, lay: layoutFor(api), pkg: pkg, rng: rand.New(rand.NewPCG(seed, 0x68656170)), next: 0x12c00000, byName: map[string]int{}, objs: map[uint32]*hobj{}, shared: map[uint32]int{}}
	obj, in, bo := hprof.Object, hprof.Int, hprof.Boolean
	// The boot image: the framework's classes.
	h.class("java.lang.Object", "", heapImage, nil, nil)
	h.class("java.lang.String", "java.lang.Object", heapImage, h.lay.stringFields, nil)
	h.class("java.lang.Object[]", "java.lang.Object", heapImage, nil, nil)
	h.class("dalvik.system.PathClassLoader", "java.lang.Object", heapImage, nil, nil)
	h.class("com.android.internal.os.ZygoteInit", "java.lang.Object", heapImage, nil, []hstatic{{"sPreloaded", obj, 0}})
	h.loader = h.instance("dalvik.system.PathClassLoader", heapApp).id
	h.class("android.app.Activity", "java.lang.Object", heapImage, []hfield{{"mDestroyed", bo}, {"mFinished", bo}}, nil)
	h.class("androidx.fragment.app.Fragment", "java.lang.Object", heapImage, []hfield{{"mFragmentManager", obj}}, nil)
	h.class("androidx.fragment.app.FragmentManager", "java.lang.Object", heapImage, nil, nil)
	h.bitmapClasses()
	// The workload's classes that are not arrays.
	for _, s := range p.sites {
		name := p.tables.Classes[s.class]
		if _, ok := h.byName[name]; ok || s.arr {
			continue
		}
		heap := byte(heapImage)
		if strings.HasPrefix(p.tables.RawClasses[s.class], "L"+strings.ReplaceAll(pkg, ".", "/")+"/") {
			heap = heapApp
		}
		var fields []hfield
		for i := range max(1, (int(s.size)-8)/4) {
			fields = append(fields, hfield{fmt.Sprintf("f%d", i), in})
		}
		h.class(name, "java.lang.Object", heap, fields, nil)
	}
	for _, s := range []string{"", "true", "false", "android", "java.lang.String"} {
		h.roots = append(h.roots, h.str(s, heapImage).id) // interned
	}
	// The zygote: preloaded Strings.
	var pre []uint32
	for i := range 40 {
		pre = append(pre, h.str(fmt.Sprintf("preloaded-%d", i), heapZygote).id)
	}
	h.static("com.android.internal.os.ZygoteInit", "sPreloaded").v = uint64(h.objArray("java.lang.Object[]", heapZygote, pre).id)
	// The app: its classes with their statics, the cache of kept
	// allocations, the list of leaked Activities, and one Activity.
	h.cache = h.objArray("java.lang.Object[]", heapApp, make([]uint32, keptSlots))
	h.leaks = h.objArray("java.lang.Object[]", heapApp, nil)
	h.class(pkg+".Cache", "java.lang.Object", heapApp, nil, []hstatic{{"sKept", obj, uint64(h.cache.id)}})
	h.class(pkg+".Leaks", "java.lang.Object", heapApp, nil, []hstatic{{"sLeaked", obj, uint64(h.leaks.id)}})
	h.class(pkg+".MainActivity", "android.app.Activity", heapApp, []hfield{{"mFragment", obj}, {"mIcon", obj}, {"mTitle", obj}}, nil)
	h.class(pkg+".DetailFragment", "androidx.fragment.app.Fragment", heapApp, []hfield{{"mView", obj}}, nil)
	// Main's tag is a String of the app's own image (7.x writes it in heap
	// 'I' with the app's classes; 8.0 and later in the app's).
	tag := h.str("heapy", cmp.Or(h.lay.appImage, heapApp))
	h.class(pkg+".Main", "java.lang.Object", heapApp, nil, []hstatic{{"sActivity", obj, 0}, {"sTag", obj, uint64(tag.id)}})
	h.icon = bytes.Repeat([]byte{0x20, 0x40, 0x80, 0xff}, 24*24)
	h.imageBitmaps()
	h.newActivity()
	if api < apiART {
		h.dalvikInit()
	}
	return h
}

// bitmapClasses makes android.graphics.Bitmap: its pixels in mBuffer up
// to 7.1, native later, and from 15 its dumpData for am dumpheap -b.
func (h *simHeap) bitmapClasses() {
	obj, in, lo := hprof.Object, hprof.Int, hprof.Long
	if h.api <= 25 {
		h.class("android.graphics.Bitmap", "java.lang.Object", heapImage, []hfield{{"mBuffer", obj}, {"mWidth", in}, {"mHeight", in}}, nil)
		return
	}
	var statics []hstatic
	if h.api >= apiDumpheapBitmaps {
		statics = []hstatic{{"dumpData", obj, 0}}
		h.class("android.graphics.Bitmap$DumpData", "java.lang.Object", heapImage,
			[]hfield{{"count", in}, {"format", in}, {"natives", obj}, {"buffers", obj}, {"max", in}}, nil)
		h.class("byte[][]", "java.lang.Object", heapImage, nil, nil)
	}
	h.class("android.graphics.Bitmap", "java.lang.Object", heapImage, []hfield{{"mNativePtr", lo}, {"mWidth", in}, {"mHeight", in}}, statics)
}

func (h *simHeap) static(class, name string) *hstatic {
	c := &h.classes[h.byName[class]]
	for i := range c.statics {
		if c.statics[i].name == name {
			return &c.statics[i]
		}
	}
	panic("sim: no static " + class + "." + name)
}

// newActivity creates the app's current Activity, with its Fragment, icon
// Bitmap and title.
func (h *simHeap) newActivity() {
	fm := h.instance("androidx.fragment.app.FragmentManager", heapApp)
	frag := h.instance(h.pkg+".DetailFragment", heapApp, 0, uint64(fm.id))
	var bmp *hobj
	if h.api <= 25 {
		buf := h.primArray(hprof.Byte, heapApp, bytes.Clone(h.icon))
		bmp = h.instance("android.graphics.Bitmap", heapApp, uint64(buf.id), 24, 24)
	} else {
		bmp = h.nativeBitmap(cfgARGB8888, 24, 24, h.icon)
	}
	title := h.str("Main", heapApp)
	// MainActivity: mFragment, mIcon, mTitle, then mDestroyed, mFinished.
	a := h.instance(h.pkg+".MainActivity", heapApp, uint64(frag.id), uint64(bmp.id), uint64(title.id), 0, 0)
	h.activity = a.id
	h.static(h.pkg+".Main", "sActivity").v = uint64(a.id)
}

// recreate destroys the current Activity (as a rotation does) and starts
// another; leak keeps the destroyed one in the app's static list, as a
// leaky app does; otherwise it and what only it held are collected.
func (h *simHeap) recreate(leak bool) {
	a := h.objs[h.activity]
	a.vals[3], a.vals[4] = 1, 1 // mDestroyed, mFinished
	frag := h.objs[uint32(a.vals[0])]
	fm := uint32(frag.vals[1])
	frag.vals[1] = 0 // the FragmentManager lets go of it
	h.drop(fm)
	if leak {
		h.leakedA = append(h.leakedA, a.id)
		h.leakedF = append(h.leakedF, frag.id)
		old := h.leaks
		h.leaks = h.objArray("java.lang.Object[]", heapApp, append(append([]uint32(nil), old.elems...), a.id))
		h.static(h.pkg+".Leaks", "sLeaked").v = uint64(h.leaks.id)
		h.drop(old.id)
	} else {
		h.drop(frag.id)
		bmp := h.objs[uint32(a.vals[1])]
		if h.api <= 25 {
			h.drop(uint32(bmp.vals[0]))
		} else {
			delete(h.pixels, bmp.vals[0])
		}
		h.drop(bmp.id)
		h.dropStr(h.objs[uint32(a.vals[2])])
		h.drop(a.id)
	}
	h.destroys++
	h.newActivity()
}

func (h *simHeap) isClass(id uint32) bool {
	for _, c := range h.classes {
		if c.id == id {
			return true
		}
	}
	return false
}

func (h *simHeap) drop(id uint32) {
	delete(h.objs, id)
}

// keep keeps one allocation of site s in the cache, replacing the oldest.
func (h *simHeap) keep(p *program, s *site, size uint32) {
	name := p.tables.Classes[s.class]
	var o *hobj
	switch raw := p.tables.RawClasses[s.class]; {
	case raw == "Ljava/lang/String;":
		o = h.keptString(fmt.Sprintf("item-%d", h.rng.IntN(50))) // repeats: duplicates
	case raw == "[Ljava/lang/Object;":
		o = h.objArray("java.lang.Object[]", heapApp, make([]uint32, max(0, int(size)-16)/4))
	case s.arr:
		t := map[string]hprof.Type{"[C": hprof.Char, "[B": hprof.Byte, "[I": hprof.Int, "[J": hprof.Long}[raw]
		if t == 0 {
			return
		}
		n := max(0, int(size)-16) / t.Size(4)
		o = h.primArray(t, heapApp, make([]byte, n*t.Size(4)))
	default:
		ci, ok := h.byName[name]
		if !ok {
			return
		}
		o = h.instance(name, h.classes[ci].heap, 0)
		o.heap = heapApp
	}
	if old := h.cache.elems[h.slot]; old != 0 {
		h.release(old)
	}
	h.cache.elems[h.slot] = o.id
	h.slot = (h.slot + 1) % keptSlots
}

// release drops a kept object and the array its String held.
func (h *simHeap) release(id uint32) {
	o := h.objs[id]
	if o == nil {
		return
	}
	if o.class >= 0 && h.classes[o.class].name == "java.lang.String" {
		h.dropStr(o)
		return
	}
	h.drop(id)
}

// truth is what a dump of the heap holds.
func (h *simHeap) truth() (t HeapTruth) {
	if h.api < apiART {
		defer func() { t = h.dalvikTruth(t) }()
	}
	t = HeapTruth{Instances: map[string]map[string]uint64{}}
	add := func(heap byte, class string) {
		name := map[byte]string{heapApp: "app", heapZygote: "zygote", heapImage: "image"}[heap]
		if t.Instances[name] == nil {
			t.Instances[name] = map[string]uint64{}
		}
		t.Instances[name][class]++
	}
	for ci, c := range h.classes {
		if n, _ := h.overhead(ci); n > 0 {
			add(c.heap, "byte[]") // its $classOverhead
		}
		add(c.heap, "java.lang.Class") // the class itself
	}
	for _, id := range h.order {
		o := h.objs[id]
		if o == nil || h.leftOut[id] {
			continue
		}
		switch {
		case o.class < 0:
			add(o.heap, o.prim.Name()+"[]")
		default:
			add(o.heap, h.classes[o.class].name)
			if o.data != nil { // an Android 6+ String's characters
				add(o.heap, o.prim.Name()+"[]")
			}
		}
	}
	t.DuplicateStrings = h.duplicateStrings()
	for _, a := range h.leakedA {
		t.LeakedActivities = append(t.LeakedActivities, uint64(a))
	}
	for _, f := range h.leakedF {
		t.LeakedFragments = append(t.LeakedFragments, uint64(f))
	}
	if h.api <= 25 || h.api >= apiDumpheapBitmaps && h.static("android.graphics.Bitmap", "dumpData").v != 0 {
		t.IconCopies = 1 + len(h.leakedA)
	}
	h.bitmapTruth(&t)
	return t
}

// duplicateStrings returns, for each text more than one live String holds,
// in how many distinct arrays it is held.
func (h *simHeap) duplicateStrings() map[string]int {
	held := map[string]map[uint32]bool{}
	for _, id := range h.order {
		o := h.objs[id]
		if o == nil || o.class < 0 || h.classes[o.class].name != "java.lang.String" {
			continue
		}
		arr := o.id // its own characters
		if !h.lay.inline {
			arr = uint32(o.vals[0])
		}
		if held[o.text] == nil {
			held[o.text] = map[uint32]bool{}
		}
		held[o.text][arr] = true
	}
	out := map[string]int{}
	for text, arrs := range held {
		if len(arrs) > 1 {
			out[text] = len(arrs)
		}
	}
	return out
}

// overhead is what the dump says of a class's overhead beyond the Class
// object (its embedded vtable, and its statics up to 8.0): a byte[] of n
// bytes (0: none, written before the class) and the fake statics that
// point at it or stand for it.
func (h *simHeap) overhead(ci int) (n int, fake []hstatic) {
	c := &h.classes[ci]
	vtable := []int{0, 1, 2, 3, 4, 8, 12}[ci%7]
	name := h.lay.overhead
	if !h.lay.smallOverhead {
		for _, st := range c.statics {
			vtable += st.t.Size(4)
		}
	}
	switch {
	case name == "" || vtable == 0:
		return 0, nil
	case !h.lay.smallOverhead:
		return vtable, []hstatic{{name, hprof.Object, uint64(c.id | 1)}}
	case vtable > 4:
		return vtable - 4, []hstatic{{name, hprof.Object, uint64(c.id | 1)}}
	case vtable == 4:
		return 0, []hstatic{{name, hprof.Int, 0}}
	case vtable == 3:
		return 0, []hstatic{{name, hprof.Short, 0}, {name + "2", hprof.Byte, 0}}
	case vtable == 2:
		return 0, []hstatic{{name, hprof.Short, 0}}
	}
	return 0, []hstatic{{name, hprof.Byte, 0}}
}

// classStatics are the fake statics from 8.1 that show a class's own
// fields (java.lang.Class's and Object's instance fields; a few here).
func (h *simHeap) classStatics(c *hclass) []hstatic {
	if !h.lay.vmRoots {
		return nil
	}
	super := uint64(0)
	if c.super >= 0 {
		super = uint64(h.classes[c.super].id)
	}
	return []hstatic{{"$class$classLoader", hprof.Object, uint64(c.loader)}, {"$class$name", hprof.Object, 0},
		{"$class$superClass", hprof.Object, super}, {"$class$accessFlags", hprof.Int, 1}, {"$class$shadow$_monitor_", hprof.Int, 0}}
}

// writtenHeap is the heap a class is written in: 7.x's app image is heap 'I'.
func (h *simHeap) writtenHeap(c *hclass) byte {
	if c.loader != 0 && h.lay.appImage != 0 {
		return h.lay.appImage
	}
	return c.heap
}

// hwriter writes a dump as ART does.
type hwriter struct {
	out     bytes.Buffer
	strs    map[string]uint32
	next    uint32
	seg     bytes.Buffer
	objects int
	heap    byte
	names   map[byte]uint32
}

func (w *hwriter) u1(b *bytes.Buffer, v byte)   { b.WriteByte(v) }
func (w *hwriter) u2(b *bytes.Buffer, v uint16) { b.Write(binary.BigEndian.AppendUint16(nil, v)) }
func (w *hwriter) u4(b *bytes.Buffer, v uint32) { b.Write(binary.BigEndian.AppendUint32(nil, v)) }

func (w *hwriter) record(tag byte, body []byte) {
	w.out.WriteByte(tag)
	w.out.Write(make([]byte, 4)) // time: ART writes 0
	w.out.Write(binary.BigEndian.AppendUint32(nil, uint32(len(body))))
	w.out.Write(body)
}

func (w *hwriter) str(s string) uint32 {
	if id, ok := w.strs[s]; ok {
		return id
	}
	id := w.next
	w.next++
	w.strs[s] = id
	var b bytes.Buffer
	w.u4(&b, id)
	b.WriteString(s)
	w.record(hprof.TagString, b.Bytes())
	return id
}

// flush ends the current segment.
func (w *hwriter) flush() {
	if w.seg.Len() > 0 {
		w.record(hprof.TagHeapDumpSegment, w.seg.Bytes())
		w.seg.Reset()
	}
	w.objects, w.heap = 0, 0
}

// object starts an object's sub-record in heap: a new segment after 128
// objects or 4 KiB, and a HEAP DUMP INFO when the heap changes.
func (w *hwriter) object(heap byte) *bytes.Buffer {
	if w.objects >= 128 || w.seg.Len() >= 4096 {
		w.flush()
	}
	if heap != w.heap {
		w.u1(&w.seg, hprof.SubHeapDumpInfo)
		w.u4(&w.seg, uint32(heap))
		w.u4(&w.seg, w.names[heap])
		w.heap = heap
	}
	w.objects++
	return &w.seg
}

func typeOf(t hprof.Type) byte { return byte(t) }

// dump writes the heap in ART's layout.
func (h *simHeap) dump(now time.Time) []byte {
	if h.api < apiART {
		return h.dumpDalvik(now)
	}
	w := &hwriter{strs: map[string]uint32{}, next: 0x400000, names: map[byte]uint32{}}
	w.out.WriteString("JAVA PROFILE 1.0.3\x00")
	w.u4(&w.out, 4)
	w.out.Write(binary.BigEndian.AppendUint64(nil, uint64(now.UnixMilli())))
	for heap, name := range map[byte]string{heapApp: "app", heapZygote: "zygote", heapImage: "image"} {
		w.names[heap] = w.str(name)
	}
	for i, c := range h.classes {
		var b bytes.Buffer
		w.u4(&b, uint32(i+1))
		w.u4(&b, c.id)
		w.u4(&b, 0)
		w.u4(&b, w.str(c.name))
		w.record(hprof.TagLoadClass, b.Bytes())
	}
	for _, c := range h.classes {
		for _, f := range c.fields {
			w.str(f.name)
		}
		for _, s := range c.statics {
			w.str(s.name)
		}
	}
	w.str("value")
	for ci := range h.classes {
		_, fake := h.overhead(ci)
		for _, f := range append(fake, h.classStatics(&h.classes[ci])...) {
			w.str(f.name)
		}
	}
	// ART's STACK TRACE: serial 0, thread 0, no frames.
	w.record(hprof.TagStackTrace, make([]byte, 12))
	// Roots first (each counts toward a segment's 128 objects), then the
	// classes, then the objects, heap by heap.
	for _, r := range h.rootList() {
		s := w.object(0)
		w.u1(s, r.tag)
		w.u4(s, r.id)
	}
	for _, heap := range []byte{heapImage, heapZygote, heapApp} {
		for ci := range h.classes {
			if h.writtenHeap(&h.classes[ci]) == heap {
				h.writeClass(w, ci)
			}
		}
		for _, id := range h.order {
			if o := h.objs[id]; o != nil && o.heap == heap {
				h.writeObject(w, o)
			}
		}
	}
	w.flush()
	w.record(hprof.TagHeapDumpEnd, nil)
	return w.out.Bytes()
}

type hroot struct {
	tag byte
	id  uint32
}

// rootList is the dump's GC roots: classes, interned Strings, and from
// 8.1 the zygote's objects as VM-internal roots.
func (h *simHeap) rootList() []hroot {
	var out []hroot
	for _, id := range h.roots {
		tag := byte(hprof.RootStickyClass)
		if h.objs[id] != nil {
			tag = hprof.RootInternedString
		}
		out = append(out, hroot{tag, id})
	}
	if h.lay.vmRoots {
		out = append(out, hroot{hprof.RootVMInternal, uint32(h.static("com.android.internal.os.ZygoteInit", "sPreloaded").v)})
	}
	return out
}

func (h *simHeap) writeClass(w *hwriter, ci int) {
	c := &h.classes[ci]
	heap := h.writtenHeap(c)
	// The class's overhead (vtable and the like) as a byte[] whose id is
	// the class's address with the low bit set, before the class.
	n, fake := h.overhead(ci)
	if n > 0 {
		over := w.object(heap)
		w.u1(over, hprof.SubPrimArrayDump)
		w.u4(over, c.id|1)
		w.u4(over, 0)
		w.u4(over, uint32(n))
		w.u1(over, typeOf(hprof.Byte))
		over.Write(make([]byte, n))
	}
	s := w.object(heap)
	w.u1(s, hprof.SubClassDump)
	w.u4(s, c.id)
	w.u4(s, 0)
	super := uint32(0)
	if c.super >= 0 {
		super = h.classes[c.super].id
	}
	w.u4(s, super)
	w.u4(s, c.loader)
	for range 4 {
		w.u4(s, 0)
	}
	size := 0
	for _, f := range h.layout(ci) {
		size += f.t.Size(4)
	}
	w.u4(s, uint32(size))
	w.u2(s, 0)
	statics := append(append(fake, h.classStatics(c)...), c.statics...)
	w.u2(s, uint16(len(statics)))
	for _, st := range statics {
		w.u4(s, w.str(st.name))
		w.u1(s, typeOf(st.t))
		writeValue(s, st.t, st.v)
	}
	fields := c.fields
	if c.name == "java.lang.String" && h.lay.inline {
		fields = append(append([]hfield(nil), fields...), hfield{"value", hprof.Object})
	}
	w.u2(s, uint16(len(fields)))
	for _, f := range fields {
		w.u4(s, w.str(f.name))
		w.u1(s, typeOf(f.t))
	}
}

func writeValue(b *bytes.Buffer, t hprof.Type, v uint64) {
	n := t.Size(4)
	for k := n - 1; k >= 0; k-- {
		b.WriteByte(byte(v >> (8 * k)))
	}
}

func (h *simHeap) writeObject(w *hwriter, o *hobj) {
	s := w.object(o.heap)
	switch {
	case o.class < 0:
		w.u1(s, hprof.SubPrimArrayDump)
		w.u4(s, o.id)
		w.u4(s, 0)
		w.u4(s, o.n)
		w.u1(s, typeOf(o.prim))
		s.Write(o.data)
	case o.elems != nil || h.classes[o.class].name == "java.lang.Object[]":
		w.u1(s, hprof.SubObjectArrayDump)
		w.u4(s, o.id)
		w.u4(s, 0)
		w.u4(s, uint32(len(o.elems)))
		w.u4(s, h.classes[o.class].id)
		for _, e := range o.elems {
			if h.objs[e] == nil {
				e = 0
			}
			w.u4(s, e)
		}
	default:
		var data bytes.Buffer
		layout := h.layout(o.class)
		valueID := uint32(0)
		for i, f := range layout {
			v := o.vals[i]
			if f.t == hprof.Object && v != 0 && h.objs[uint32(v)] == nil && !h.isClass(uint32(v)) {
				v = 0 // collected
			}
			writeValue(&data, f.t, v)
			if i == len(h.classes[o.class].fields)-1 && o.data != nil {
				// Android 6+: the String's fake value field follows its
				// own fields: the characters' address (an empty String's:
				// the object's plus 8).
				valueID = o.id + 16
				if len(o.data) == 0 {
					valueID = o.id + 8
				}
				writeValue(&data, hprof.Object, uint64(valueID))
			}
		}
		w.u1(s, hprof.SubInstanceDump)
		w.u4(s, o.id)
		w.u4(s, 0)
		w.u4(s, h.classes[o.class].id)
		w.u4(s, uint32(data.Len()))
		s.Write(data.Bytes())
		if valueID != 0 {
			a := w.object(o.heap)
			w.u1(a, hprof.SubPrimArrayDump)
			w.u4(a, valueID)
			w.u4(a, 0)
			w.u4(a, uint32(len(o.data)/o.prim.Size(4)))
			w.u1(a, typeOf(o.prim))
			a.Write(o.data)
		}
	}
}
