package heapdump

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"unicode/utf16"

	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/cespare/xxhash/v2"
)

// What Analyze looks for, by the classes' names and their fields (see
// docs/heapdumps.md for where each rule comes from).
type watchKind uint8

const (
	watchActivity watchKind = iota + 1
	watchFragment
	watchString
	watchBitmap
)

var watchSpecs = []struct {
	kind   watchKind
	bases  []string
	fields []string
}{
	{watchActivity, []string{"android.app.Activity"}, []string{"mDestroyed", "mFinished"}},
	{watchFragment, []string{"android.app.Fragment", "androidx.fragment.app.Fragment", "android.support.v4.app.Fragment"}, []string{"mFragmentManager"}},
	{watchString, []string{"java.lang.String"}, []string{"value", "offset", "count"}},
	{watchBitmap, []string{"android.graphics.Bitmap"}, []string{"mBuffer", "mWidth", "mHeight", "mNativePtr"}},
}

type fieldAt struct {
	off uint32
	t   hprof.Type
	ok  bool
}

type watch struct {
	kind   watchKind
	fields []fieldAt
}

type watchedObj struct {
	node int32
	kind watchKind
	vals [4]uint64
	has  [4]bool
}

// namedField is a field of an instance's data, at its offset.
type namedField struct {
	name string
	off  uint32
	t    hprof.Type
}

// fieldsOf returns the fields of an instance of class in data order, with
// their names.
func (g *Graph) fieldsOf(class uint64, idSize int) []namedField {
	var out []namedField
	off := uint32(0)
	seen := 0
	for l := g.layout[class]; l != nil && seen < 1024; seen++ {
		for _, f := range l.fields {
			out = append(out, namedField{g.names[f.NameID], off, f.Type})
			off += uint32(f.Type.Size(idSize))
		}
		if l.super == 0 {
			break
		}
		l = g.layout[l.super]
	}
	return out
}

// classNameOf returns the dotted name of class id.
func (g *Graph) classNameOf(id uint64) string {
	return g.kindName(kindKey{class: id})
}

// findWatches finds the classes whose instances Analyze needs fields of.
func (g *Graph) findWatches() {
	g.watches = map[uint64]*watch{}
	for id := range g.layout {
		var kind watchKind
		var fields []string
		seen := 0
		for c := id; c != 0 && kind == 0 && seen < 1024; seen++ {
			name := g.classNameOf(c)
			for _, sp := range watchSpecs {
				if slices.Contains(sp.bases, name) {
					kind, fields = sp.kind, sp.fields
				}
			}
			l := g.layout[c]
			if l == nil {
				break
			}
			c = l.super
		}
		if kind == 0 {
			continue
		}
		w := &watch{kind: kind, fields: make([]fieldAt, len(fields))}
		all := g.fieldsOf(id, g.Header.IDSize)
		for i, name := range fields {
			for _, f := range all {
				if f.name == name {
					w.fields[i] = fieldAt{f.off, f.t, true}
					break
				}
			}
		}
		g.watches[id] = w
	}
}

// value reads a field of type t at data[off:].
func value(data []byte, off uint32, t hprof.Type, idSize int) (uint64, bool) {
	n := t.Size(idSize)
	if int(off)+n > len(data) {
		return 0, false
	}
	var v uint64
	for _, c := range data[off : int(off)+n] {
		v = v<<8 | uint64(c)
	}
	return v, true
}

func (g *Graph) watch(w *watch, node int32, data []byte, idSize int) {
	o := watchedObj{node: node, kind: w.kind}
	for i, f := range w.fields {
		if f.ok {
			o.vals[i], o.has[i] = value(data, f.off, f.t, idSize)
		}
	}
	g.watched = append(g.watched, o)
}

// Leak is a destroyed Activity or a Fragment without a FragmentManager
// that a GC root still reaches.
type Leak struct {
	Kind     string `json:"kind"` // "activity" or "fragment"
	Class    string `json:"class"`
	ID       uint64 `json:"id"`
	Why      string `json:"why"`
	Retained uint64 `json:"retained_bytes"`
	// Path is the shortest path from a GC root to the object: each step's
	// object, and how it refers to the next.
	Path []Step `json:"path"`
}

// Step is one object on a path from a GC root.
type Step struct {
	Class string `json:"class"`
	ID    uint64 `json:"id"`
	// Root is the kind of GC root, on the first step.
	Root string `json:"root,omitempty"`
	// Ref is how the object refers to the next one: a field name,
	// "[i]" (an array element), "static NAME", "<class>",
	// "<superclass>" or "<class loader>".
	Ref string `json:"ref,omitempty"`
}

// Duplicate is a group of reachable Strings or Bitmaps with equal
// contents.
type Duplicate struct {
	// Value is the string's first characters, or a Bitmap's size "WxH".
	Value string `json:"value"`
	// Copies is how many Strings or Bitmaps hold the contents, Buffers
	// in how many distinct arrays, each of BufferBytes.
	Copies      int    `json:"copies"`
	Buffers     int    `json:"buffers"`
	BufferBytes uint64 `json:"buffer_bytes"`
	// Config is, for Android 15's Bitmaps (am dumpheap -b), the config
	// their compressed image tells (ARGB_8888 when it does not tell):
	// Buffers then counts their distinct pixels and BufferBytes is width
	// x height x the config's bytes per pixel.
	Config string `json:"config,omitempty"`
	// Wasted is what all but one copy take: the arrays beyond the first
	// and the objects beyond the first.
	Wasted uint64   `json:"wasted_bytes"`
	IDs    []uint64 `json:"ids"` // the first few objects
}

// Analysis is what a dump answers.
type Analysis struct {
	Histogram        *Histogram  `json:"-"`
	Leaks            []Leak      `json:"leaks"`
	DuplicateStrings []Duplicate `json:"duplicate_strings"`
	DuplicateBitmaps []Duplicate `json:"duplicate_bitmaps"`
	// Dangling counts references to objects the dump does not hold.
	Dangling uint64 `json:"dangling_references"`
}

// rootName names a GC root tag.
func rootName(tag byte) string {
	switch tag {
	case hprof.RootJNIGlobal:
		return "JNI global"
	case hprof.RootJNILocal:
		return "JNI local"
	case hprof.RootJavaFrame:
		return "Java frame"
	case hprof.RootNativeStack:
		return "native stack"
	case hprof.RootStickyClass:
		return "system class"
	case hprof.RootThreadBlock:
		return "thread block"
	case hprof.RootMonitorUsed:
		return "monitor"
	case hprof.RootThreadObject:
		return "thread"
	case hprof.RootInternedString:
		return "interned string"
	case hprof.RootDebugger:
		return "debugger"
	case hprof.RootVMInternal:
		return "VM internal"
	case hprof.RootJNIMonitor:
		return "JNI monitor"
	case hprof.RootFinalizing:
		return "finalizing"
	case hprof.RootReferenceCleanup:
		return "reference cleanup"
	}
	return "unknown"
}

// nodeClass names the class of node n ("class X" for a class object).
func (g *Graph) nodeClass(n int32) string {
	if g.kind[n] < 0 {
		return "class " + g.classNameOf(g.ids[n])
	}
	return g.kindName(g.kinds[g.kind[n]])
}

// Analyze finds the leaks and the duplicates; r is the dump again, read a
// third time for the names of the fields on the leaks' paths and the
// duplicates' previews.
func (g *Graph) Analyze(r io.ReadSeeker, maxDuplicates int) (*Analysis, error) {
	a := &Analysis{Histogram: g.Histogram(), Dangling: g.Dangling}
	reachable := func(n int32) bool { return g.idom[n] >= 0 }
	var leakNodes []int32
	for _, o := range g.watched {
		if !reachable(o.node) {
			continue
		}
		l := Leak{Class: g.nodeClass(o.node), ID: g.ids[o.node], Retained: g.ret[o.node]}
		switch {
		case o.kind == watchActivity && o.has[0] && o.vals[0] != 0:
			l.Kind, l.Why = "activity", "mDestroyed is true"
		case o.kind == watchFragment && o.has[0] && o.vals[0] == 0:
			l.Kind, l.Why = "fragment", "mFragmentManager is null"
		default:
			continue
		}
		a.Leaks = append(a.Leaks, l)
		leakNodes = append(leakNodes, o.node)
	}
	paths := g.leakPaths(a.Leaks, leakNodes)
	if g.pixNatives != 0 {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		if err := g.readPixels(r); err != nil {
			return nil, err
		}
	}
	if err := g.hashRanges(r); err != nil {
		return nil, err
	}
	var strRanges []strRange
	a.DuplicateStrings, strRanges = g.duplicates(watchString, maxDuplicates)
	a.DuplicateBitmaps, _ = g.duplicates(watchBitmap, maxDuplicates)
	preview := map[strRange][]byte{} // a String's chars -> their first bytes
	for _, rg := range strRanges {
		preview[rg] = nil
	}
	want, from := wantedEdges(paths, g.ids)
	if len(want) > 0 || len(preview) > 0 {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		refs, err := g.names3(r, &refNames{want: want, from: from, refs: map[edge]string{}}, preview)
		if err != nil {
			return nil, err
		}
		for i, path := range paths {
			for j := range len(path) - 1 {
				a.Leaks[i].Path[j].Ref = refs[edge{path[j], g.ids[path[j+1]]}]
			}
		}
		for i, rg := range strRanges {
			a.DuplicateStrings[i].Value = decodeString(preview[rg], g.kinds[g.kind[rg.arr]].class == uint64(hprof.Char))
		}
	}
	slices.SortFunc(a.Leaks, func(x, y Leak) int {
		if c := cmp.Compare(y.Retained, x.Retained); c != 0 {
			return c
		}
		return cmp.Compare(x.ID, y.ID)
	})
	return a, nil
}

// edge is a reference from node from to the object with id to.
type edge struct {
	from int32
	to   uint64
}

// leakPaths sets each leak's path from a GC root (its objects, the first
// one's root kind) and returns the paths' nodes, by leak.
func (g *Graph) leakPaths(leaks []Leak, nodes []int32) [][]int32 {
	if len(nodes) == 0 {
		return nil
	}
	parent := g.bfs()
	paths := make([][]int32, len(nodes))
	for i, n := range nodes {
		var path []int32
		for v := n; v > 0; v = parent[v] {
			path = append(path, v)
		}
		slices.Reverse(path)
		for _, v := range path {
			leaks[i].Path = append(leaks[i].Path, Step{Class: g.nodeClass(v), ID: g.ids[v]})
		}
		leaks[i].Path[0].Root = rootName(g.rootTag[path[0]])
		paths[i] = path
	}
	return paths
}

// wantedEdges returns the references the paths take (paths that share a
// node may leave it by different references), and the nodes they leave.
func wantedEdges(paths [][]int32, ids []uint64) (map[edge]bool, map[int32]bool) {
	want, from := map[edge]bool{}, map[int32]bool{}
	for _, path := range paths {
		for j := range len(path) - 1 {
			want[edge{path[j], ids[path[j+1]]}] = true
			from[path[j]] = true
		}
	}
	return want, from
}

// bfs returns each reachable node's parent on a shortest path from the
// roots (node 0).
func (g *Graph) bfs() []int32 {
	parent := make([]int32, len(g.ids))
	for i := range parent {
		parent[i] = -1
	}
	parent[0] = 0
	queue := []int32{0}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range g.succ[g.off[v]:g.off[v+1]] {
			if parent[w] < 0 {
				parent[w] = v
				queue = append(queue, w)
			}
		}
	}
	return parent
}

// decodeString returns the first characters of a string's value array:
// UTF-16 (char[]) or Latin-1 (byte[], compact strings).
func decodeString(b []byte, chars bool) string {
	const max = 60
	if chars {
		u := make([]uint16, 0, len(b)/2)
		for i := 0; i+1 < len(b); i += 2 {
			u = append(u, binary.BigEndian.Uint16(b[i:]))
		}
		s := string(utf16.Decode(u))
		if r := []rune(s); len(r) > max {
			s = string(r[:max]) + "…"
		}
		return s
	}
	// byte[]: Latin-1 (compact strings).
	r := make([]rune, 0, len(b))
	for _, c := range b {
		r = append(r, rune(c))
	}
	if len(r) > max {
		return string(r[:max]) + "…"
	}
	return string(r)
}

// dupGroup is the objects whose contents are equal.
type dupGroup struct {
	objs    []int32
	arrays  map[int32]bool
	first   strRange
	w, h    uint64
	objSize uint64
	// Android 15's: the Bitmaps' distinct pixels (native pointers), and
	// their format.
	natives map[uint64]bool
	format  pixelFormat
}

// backing returns the node of a watched object's backing array (-1: none),
// and whether it is an Android 15 Bitmap's compressed image.
func (g *Graph) backing(o watchedObj) (int32, bool) {
	switch {
	case o.has[0] && o.vals[0] != 0: // String.value, Bitmap.mBuffer
		return g.lookup(o.vals[0]), false
	case o.kind == watchBitmap && o.has[3]: // Android 15's dumpData
		if id, ok := g.pixels[o.vals[3]]; ok {
			return g.lookup(id), true
		}
	}
	return -1, false
}

// dupGroups groups the reachable watched objects of kind by their
// contents: String.value (a String's range of it before Android 6),
// Bitmap.mBuffer, Android 15's compressed pixels.
func (g *Graph) dupGroups(kind watchKind) map[[2]uint64]*dupGroup {
	groups := map[[2]uint64]*dupGroup{}
	for _, o := range g.watched {
		if o.kind != kind || g.idom[o.node] < 0 {
			continue
		}
		arr, compressed := g.backing(o)
		if arr < 0 {
			continue
		}
		rg, h, ok := g.contents(o, arr)
		if !ok {
			continue
		}
		k := [2]uint64{h, rg.n<<8 | uint64(g.kinds[g.kind[arr]].class)}
		gr := groups[k]
		if gr == nil {
			gr = &dupGroup{arrays: map[int32]bool{}, first: rg, w: o.vals[1], h: o.vals[2], objSize: g.size[o.node]}
			groups[k] = gr
		}
		gr.objs = append(gr.objs, o.node)
		gr.arrays[arr] = true
		if compressed {
			if gr.natives == nil {
				gr.natives, gr.format = map[uint64]bool{}, g.pixFormat[g.ids[arr]]
			}
			gr.natives[o.vals[3]] = true
		}
	}
	return groups
}

// duplicates returns the groups of equal watched objects of kind, the
// most wasteful first (at most max of them when max > 0), and the range
// of each one's first copy.
func (g *Graph) duplicates(kind watchKind, max int) ([]Duplicate, []strRange) {
	var out []Duplicate
	arrays := map[uint64]strRange{} // first object id -> first array
	for _, gr := range g.dupGroups(kind) {
		copies := len(gr.objs)
		if kind == watchString {
			copies = len(gr.arrays) // Strings that share an array are one
		}
		if copies < 2 {
			continue
		}
		d := Duplicate{Copies: copies, Buffers: len(gr.arrays), BufferBytes: gr.first.n}
		if gr.natives != nil { // the pixels, not their compressed image
			d.Buffers, d.Config = len(gr.natives), gr.format.config
			d.BufferBytes = uint64(uint32(gr.w)) * uint64(uint32(gr.h)) * gr.format.bytes
		}
		d.Wasted = uint64(d.Buffers-1)*d.BufferBytes + uint64(d.Copies-1)*gr.objSize
		for _, n := range gr.objs[:min(5, len(gr.objs))] {
			d.IDs = append(d.IDs, g.ids[n])
		}
		if kind == watchBitmap {
			d.Value = fmt.Sprintf("%dx%d", int32(gr.w), int32(gr.h))
		}
		arrays[d.IDs[0]] = gr.first
		out = append(out, d)
	}
	slices.SortFunc(out, func(x, y Duplicate) int {
		if c := cmp.Compare(y.Wasted, x.Wasted); c != 0 {
			return c
		}
		return cmp.Compare(x.IDs[0], y.IDs[0])
	})
	if max > 0 && len(out) > max {
		out = out[:max]
	}
	first := make([]strRange, len(out))
	for i, d := range out {
		first[i] = arrays[d.IDs[0]]
	}
	return out, first
}

// refNames collects, for each wanted edge, the first reference by which
// its node refers to its target.
type refNames struct {
	want map[edge]bool
	from map[int32]bool // the nodes of want's edges
	refs map[edge]string
}

// wants tells whether edge (n, to) is wanted and not named yet.
func (rn *refNames) wants(n int32, to uint64) bool {
	e := edge{n, to}
	_, done := rn.refs[e]
	return rn.want[e] && !done
}

// note names edge (n, to) if it is wanted and not named yet.
func (rn *refNames) note(n int32, to uint64, name string) {
	if rn.wants(n, to) {
		rn.refs[edge{n, to}] = name
	}
}

// class notes how a CLASS DUMP (node n) refers to what it refers to.
func (rn *refNames) class(g *Graph, n int32, c *hprof.ClassDump) {
	for _, s := range c.Statics {
		if s.Type == hprof.Object {
			rn.note(n, s.Value, "static "+g.names[s.NameID])
		}
	}
	rn.note(n, c.SuperID, "<superclass>")
	rn.note(n, c.LoaderID, "<class loader>")
}

// names3 reads the dump a third time: how each edge rn wants is made,
// and the first bytes of the arrays in preview.
func (g *Graph) names3(r io.Reader, rn *refNames, preview map[strRange][]byte) (map[edge]string, error) {
	rd, err := hprof.NewReader(r)
	if err != nil {
		return nil, err
	}
	byNode := map[int32][]strRange{}
	for rg := range preview {
		byNode[rg.arr] = append(byNode[rg.arr], rg)
	}
	ids := rd.Header().IDSize
	node := int32(1)
	err = rd.Walk(&hprof.Visitor{
		ClassDump: func(c *hprof.ClassDump) error {
			if rn.from[node] {
				rn.class(g, node, c)
			}
			node++
			return nil
		},
		InstanceData: func(_, class uint64, data []byte) error {
			if !rn.from[node] {
				return nil
			}
			for _, f := range g.fieldsOf(class, ids) {
				if v, ok := value(data, f.off, f.t, ids); ok && f.t == hprof.Object {
					rn.note(node, v, f.name)
				}
			}
			rn.note(node, class, "<class>")
			return nil
		},
		Instance: func(uint64, uint64, uint32) error { node++; return nil },
		Elements: func(_ uint64, first uint32, b []byte) error {
			if !rn.from[node] {
				return nil
			}
			for i := 0; i+ids <= len(b); i += ids {
				if to := hprof.ID(b[i:], ids); rn.wants(node, to) {
					rn.note(node, to, fmt.Sprintf("[%d]", int(first)+i/ids))
				}
			}
			return nil
		},
		ObjectArray: func(_, class uint64, _ uint32) error {
			rn.note(node, class, "<class>")
			node++
			return nil
		},
		Values: func(_ uint64, _ hprof.Type, first uint64, b []byte) error {
			for _, rg := range byNode[node] {
				if p := preview[rg]; len(p) < 256 {
					preview[rg] = append(p, rg.cut(first, b, 256-len(p))...)
				}
			}
			return nil
		},
		PrimitiveArray: func(uint64, hprof.Type, uint32) error { node++; return nil },
	})
	return rn.refs, err
}

// A String before Android 6 (and in Java 6) is count chars of its value
// array from offset, and substring shares the line's char[] (fact 8 in
// docs/heapdumps.md): its text is that range, and two Strings that share
// one array are one copy. Later Strings are their whole array.

// strRange is a String's characters: n bytes of array node arr from byte
// off.
type strRange struct {
	arr    int32
	off, n uint64
}

// cut returns the part of chunk b (at byte first of the array) that lies
// in the range, at most limit bytes.
func (rg strRange) cut(first uint64, b []byte, limit int) []byte {
	lo, hi := max(rg.off, first), min(rg.off+rg.n, first+uint64(len(b)))
	if lo >= hi {
		return nil
	}
	return b[lo-first : lo-first+min(hi-lo, uint64(limit))]
}

// rangeOf returns a watched String's characters in array node arr, and
// false when its offset and count do not fit the array.
func (g *Graph) rangeOf(o watchedObj, arr int32) (strRange, bool) {
	whole := strRange{arr, 0, g.arraySize(arr)}
	if o.kind != watchString || !o.has[1] || !o.has[2] {
		return whole, true
	}
	unit := uint64(2)
	if g.kinds[g.kind[arr]].class == uint64(hprof.Byte) {
		unit = 1
	}
	off, n := int32(o.vals[1]), int32(o.vals[2])
	if off < 0 || n < 0 || (uint64(off)+uint64(n))*unit > g.size[arr] {
		return strRange{}, false
	}
	return strRange{arr, uint64(off) * unit, uint64(n) * unit}, true
}

// contents returns the range of a watched object's array that holds its
// contents, and their hash.
func (g *Graph) contents(o watchedObj, arr int32) (strRange, uint64, bool) {
	if g.kind[arr] < 0 || !g.kinds[g.kind[arr]].prim {
		return strRange{}, 0, false // a class or an object array
	}
	rg, ok := g.rangeOf(o, arr)
	if !ok {
		return rg, 0, false
	}
	if rg.off == 0 && rg.n == g.arraySize(arr) {
		h, ok := g.hashes[arr]
		return rg, h, ok
	}
	h, ok := g.rangeHash[rg]
	return rg, h, ok
}

// hashRanges reads the dump once more for the hashes of the Strings whose
// text is part of their array, when there are any.
func (g *Graph) hashRanges(r io.ReadSeeker) error {
	if g.rangeHash != nil {
		return nil // read already
	}
	g.rangeHash = map[strRange]uint64{}
	want := map[int32]map[strRange]*xxhash.Digest{}
	for _, o := range g.watched {
		if o.kind != watchString || g.idom[o.node] < 0 || !o.has[0] {
			continue
		}
		arr := g.lookup(o.vals[0])
		if arr < 0 || g.kind[arr] < 0 || !g.kinds[g.kind[arr]].prim {
			continue
		}
		if rg, ok := g.rangeOf(o, arr); ok && (rg.off != 0 || rg.n != g.size[arr]) {
			if want[arr] == nil {
				want[arr] = map[strRange]*xxhash.Digest{}
			}
			want[arr][rg] = xxhash.New()
		}
	}
	if len(want) == 0 {
		return nil
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	rd, err := hprof.NewReader(r)
	if err != nil {
		return err
	}
	err = rd.Walk(&hprof.Visitor{Values: func(id uint64, _ hprof.Type, first uint64, b []byte) error {
		for rg, d := range want[g.lookup(id)] {
			d.Write(rg.cut(first, b, len(b)))
		}
		return nil
	}})
	for _, ranges := range want {
		for rg, d := range ranges {
			g.rangeHash[rg] = d.Sum64()
		}
	}
	return err
}

// Android 15 and later (am dumpheap -b FORMAT) put every live Bitmap's
// pixels, compressed, in the dump: android.graphics.Bitmap's static
// dumpData is a Bitmap$DumpData whose natives (long[]) and buffers
// (byte[][]) pair each Bitmap's mNativePtr with its compressed pixels,
// count of them in use (frameworks/base Bitmap.java, Android 15).

// findDumpData notes the id of Bitmap.dumpData, after the first read.
func (g *Graph) findDumpData() {
	for id, l := range g.layout {
		if g.classNameOf(id) != "android.graphics.Bitmap" {
			continue
		}
		for _, st := range l.named {
			if st.name == "dumpData" {
				g.dumpData = st.value
			}
		}
	}
}

// dumpDataFields reads Bitmap$DumpData's natives, buffers and count, in the
// second read.
func (g *Graph) dumpDataFields(class uint64, data []byte, idSize int) {
	for _, f := range g.fieldsOf(class, idSize) {
		v, ok := value(data, f.off, f.t, idSize)
		if !ok {
			continue
		}
		switch f.name {
		case "natives":
			g.pixNatives = v
		case "buffers":
			g.pixBuffers = v
		case "count":
			g.pixCount = int(int32(v))
		}
	}
}

// readPixels reads the dump once more for dumpData's natives and buffers,
// and pairs them: g.pixels maps a native pointer to its buffer's id.
func (g *Graph) readPixels(r io.Reader) error {
	if g.pixels != nil {
		return nil // read already
	}
	rd, err := hprof.NewReader(r)
	if err != nil {
		return err
	}
	ids := rd.Header().IDSize
	var natives []uint64
	var buffers []uint64
	images := map[uint64]bool{} // the compressed images' ids
	for n := range g.leftOut {
		if k := g.kind[n]; k >= 0 && g.kinds[k].prim {
			images[g.ids[n]] = true
		}
	}
	g.pixFormat = map[uint64]pixelFormat{}
	err = rd.Walk(&hprof.Visitor{
		Values: func(id uint64, t hprof.Type, first uint64, b []byte) error {
			if first == 0 && t == hprof.Byte && images[id] {
				g.pixFormat[id], _ = pngFormat(b)
			}
			if id == g.pixNatives && t == hprof.Long {
				for i := 0; i+8 <= len(b); i += 8 {
					natives = append(natives, binary.BigEndian.Uint64(b[i:]))
				}
			}
			return nil
		},
		Elements: func(id uint64, _ uint32, b []byte) error {
			if id == g.pixBuffers {
				for i := 0; i+ids <= len(b); i += ids {
					buffers = append(buffers, hprof.ID(b[i:], ids))
				}
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	g.pixels = map[uint64]uint64{}
	for i := range min(len(natives), len(buffers), max(0, g.pixCount)) {
		if buffers[i] != 0 {
			g.pixels[natives[i]] = buffers[i]
		}
	}
	return nil
}
