package heapdump

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"unicode/utf16"

	"github.com/alloctrack/alloctrack/ddms/hprof"
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
	if err := g.stringRanges(r); err != nil {
		return nil, err
	}
	var strArrays []int32
	a.DuplicateStrings, strArrays = g.duplicates(watchString, maxDuplicates)
	a.DuplicateBitmaps, _ = g.duplicates(watchBitmap, maxDuplicates)
	preview := map[int32][]byte{} // array node -> its first bytes
	for _, n := range strArrays {
		preview[n] = nil
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
		for i, n := range strArrays {
			a.DuplicateStrings[i].Value = g.stringValue(a.DuplicateStrings[i].IDs[0], preview[n], g.kinds[g.kind[n]].class == uint64(hprof.Char))
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

// duplicates groups the reachable watched objects of kind by their
// backing array's contents (String.value, Bitmap.mBuffer).
func (g *Graph) duplicates(kind watchKind, max int) ([]Duplicate, []int32) {
	type group struct {
		objs    []int32
		arrays  map[int32]bool
		first   int32
		w, h    uint64
		objSize uint64
		size    uint64 // of the contents
	}
	groups := map[[2]uint64]*group{}
	for _, o := range g.watched {
		if o.kind != kind || g.idom[o.node] < 0 {
			continue
		}
		var arr int32 = -1
		switch {
		case o.has[0] && o.vals[0] != 0: // String.value, Bitmap.mBuffer
			arr = g.lookup(o.vals[0])
		case kind == watchBitmap && o.has[3]: // Android 15's dumpData
			if id, ok := g.pixels[o.vals[3]]; ok {
				arr = g.lookup(id)
			}
		}
		if arr < 0 {
			continue
		}
		h, size, ok := g.contents(o, arr)
		if !ok {
			continue
		}
		k := [2]uint64{h, size<<8 | uint64(g.kinds[g.kind[arr]].class)}
		gr := groups[k]
		if gr == nil {
			gr = &group{arrays: map[int32]bool{}, first: arr, w: o.vals[1], h: o.vals[2], objSize: g.size[o.node], size: size}
			groups[k] = gr
		}
		gr.objs = append(gr.objs, o.node)
		gr.arrays[arr] = true
	}
	var out []Duplicate
	arrays := map[uint64]int32{} // first object id -> first array
	for _, gr := range groups {
		if len(gr.objs) < 2 {
			continue
		}
		d := Duplicate{Copies: len(gr.objs), Buffers: len(gr.arrays), BufferBytes: gr.size}
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
	first := make([]int32, len(out))
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
func (g *Graph) names3(r io.Reader, rn *refNames, preview map[int32][]byte) (map[edge]string, error) {
	rd, err := hprof.NewReader(r)
	if err != nil {
		return nil, err
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
			if p, ok := preview[node]; ok && len(p) < 256 {
				preview[node] = append(p, b[:min(len(b), 256-len(p))]...)
			}
			return nil
		},
		PrimitiveArray: func(uint64, hprof.Type, uint32) error { node++; return nil },
	})
	return rn.refs, err
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
	err = rd.Walk(&hprof.Visitor{
		Values: func(id uint64, t hprof.Type, _ uint64, b []byte) error {
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
