package heapdump

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"

	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/cespare/xxhash/v2"
)

// A Graph is a dump's objects and the references between them, with the
// dominator tree and every object's retained size.
//
// Nodes are the dump's objects in dump order (classes, instances and
// arrays), numbered from 1; node 0 is a virtual root that refers to every
// GC root the dump names. An instance refers to the objects its Object
// fields hold and to its class; an object array to its elements and its
// class; a class to its superclass, its class loader and its static
// Object fields' values (as Eclipse MAT models a heap). An object A
// dominates B when every path from the roots to B goes through A; B's
// retained size is the shallow size of everything A dominates, itself
// included: what the heap would lose if A were gone.
type Graph struct {
	Header hprof.Header
	ids    []uint64 // by node
	kind   []int32  // by node: index into kinds (-1: the root, a class)
	heap   []uint8  // by node: index into heaps
	size   []uint64 // shallow size by node
	idom   []int32  // immediate dominator by node; -1 unreachable
	ret    []uint64 // retained size by node
	// order is the reachable nodes in depth-first order from the root: a
	// node's dominators come before it.
	order []int32
	// For lookups: sorted is the ids in order, byID their nodes, and
	// bucket[k] the first position in sorted of the ids whose offset from
	// sorted[0], shifted right by shift, is k.
	sorted []uint64
	byID   []int32
	bucket []uint32
	shift  uint

	kinds  []kindKey
	heaps  []uint32 // heap ids by index
	names  map[uint64]string
	class  map[uint64]uint64 // class id -> name string id
	heapNm map[uint32]uint64 // heap id -> name string id
	layout map[uint64]*classLayout

	Dangling uint64 // references to ids the dump does not hold

	// Kept for Analyze: the references (succ[off[n]:off[n+1]] are node
	// n's), the GC roots' kinds, the watched instances' fields, and the
	// content hashes of byte[] and char[] arrays.
	succ    []int32
	off     []uint32
	rootTag map[int32]byte
	watches map[uint64]*watch // by class id
	watched []watchedObj
	hashes  map[int32]uint64
	// rangeHash is the hash of each String's characters that are part of
	// their array (Android 5), once Analyze has read them.
	rangeHash map[strRange]uint64

	// Android 15's Bitmap pixels (see findDumpData): the DumpData's id,
	// its natives and buffers arrays and count, and native pointer ->
	// buffer id once read.
	dumpData, pixNatives, pixBuffers uint64
	pixCount                         int
	pixels                           map[uint64]uint64
	// leftOut is Bitmap.dumpData's objects (left out of every count: see
	// leaveOutDumpData) and their sizes; pixFormat the pixel format each
	// compressed image tells, by its id.
	leftOut      map[int32]uint64
	leftOutBytes uint64
	// appImage7: classes of the app's own image were moved from 'I' to
	// the app heap (Android 7.x; see appImage).
	appImage7 bool
	pixFormat map[uint64]pixelFormat
}

// kindKey is what a histogram row counts: a class, or a primitive array
// type.
type kindKey struct {
	class uint64
	prim  bool
}

// namedStatic is an Object static field and its value.
type namedStatic struct {
	name  string
	value uint64
}

type classLayout struct {
	super, loader uint64
	fields        []hprof.Field
	named         []namedStatic // Object statics, not null
	refs          []uint32      // byte offsets of Object fields in an instance's data (own, then supers')
	done          bool
}

// ReadGraph reads a dump twice: objects first, then references.
func ReadGraph(r io.ReadSeeker) (*Graph, error) {
	g := &Graph{names: map[uint64]string{}, class: map[uint64]uint64{}, heapNm: map[uint32]uint64{}, layout: map[uint64]*classLayout{},
		ids: []uint64{0}, kind: []int32{-1}, heap: []uint8{0}, size: []uint64{0}}
	rd, err := hprof.NewReader(r)
	if err != nil {
		return nil, err
	}
	g.Header = rd.Header()
	ids := g.Header.IDSize
	kinds := map[kindKey]int32{}
	kindOf := func(k kindKey) int32 {
		i, ok := kinds[k]
		if !ok {
			i = int32(len(g.kinds))
			kinds[k] = i
			g.kinds = append(g.kinds, k)
		}
		return i
	}
	heapIdx := map[uint32]uint8{0: 0}
	g.heaps = []uint32{0}
	heap := uint8(0)
	type root struct {
		id  uint64
		tag byte
	}
	var roots []root
	node := func(id uint64, kind int32, size uint64) {
		g.ids = append(g.ids, id)
		g.kind = append(g.kind, kind)
		g.heap = append(g.heap, heap)
		g.size = append(g.size, size)
	}
	err = rd.Walk(&hprof.Visitor{
		String:    func(id uint64, b []byte) error { g.names[id] = string(b); return nil },
		LoadClass: func(_ uint32, c, name uint64) error { g.class[c] = name; return nil },
		Segment:   func() error { heap = 0; return nil },
		HeapInfo: func(id uint32, name uint64) error {
			i, ok := heapIdx[id]
			if !ok {
				if len(g.heaps) == 255 {
					return &hprof.FormatError{Offset: rd.Offset(), What: "more than 255 heaps"}
				}
				i = uint8(len(g.heaps))
				heapIdx[id] = i
				g.heaps = append(g.heaps, id)
			}
			heap = i
			g.heapNm[id] = name
			return nil
		},
		ClassDump: func(c *hprof.ClassDump) error {
			l := &classLayout{super: c.SuperID, loader: c.LoaderID, fields: c.Fields}
			for _, s := range c.Statics {
				if s.Type == hprof.Object && s.Value != 0 {
					l.named = append(l.named, namedStatic{g.names[s.NameID], s.Value})
				}
			}
			g.layout[c.ID] = l
			node(c.ID, -1, 0)
			return nil
		},
		Instance: func(id, class uint64, size uint32) error {
			node(id, kindOf(kindKey{class: class}), uint64(size))
			return nil
		},
		ObjectArray: func(id, class uint64, n uint32) error {
			node(id, kindOf(kindKey{class: class}), uint64(n)*uint64(ids))
			return nil
		},
		PrimitiveArray: func(id uint64, t hprof.Type, n uint32) error {
			node(id, kindOf(kindKey{class: uint64(t), prim: true}), uint64(n)*uint64(t.Size(ids)))
			return nil
		},
		Root: func(tag byte, id uint64) error { roots = append(roots, root{id, tag}); return nil },
	})
	if err != nil {
		return nil, err
	}
	g.index()
	if err := g.appImage(); err != nil {
		return nil, err
	}
	runtime.GC() // the first read's outgrown slices
	g.rootTag = map[int32]byte{}
	rootIDs := make([]uint64, 0, len(roots))
	for _, rt := range roots {
		rootIDs = append(rootIDs, rt.id)
		if n := g.lookup(rt.id); n > 0 {
			if _, ok := g.rootTag[n]; !ok {
				g.rootTag[n] = rt.tag
			}
		}
	}
	g.findWatches()
	g.findDumpData()
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if g.succ, g.off, err = g.references(r, rootIDs); err != nil {
		return nil, err
	}
	g.leaveOutDumpData()
	g.dominators(g.succ, g.off)
	return g, nil
}

// appImage counts in the app heap what Android 7.0 and 7.1 write in heap
// 'I' for the app's own image (fact 6 in docs/heapdumps.md): the classes
// a class loader defined (the boot image's have none) and their overhead
// arrays. The image's other objects (its Strings) cannot be told from the
// boot image's and stay there.
func (g *Graph) appImage() error {
	img, app := slices.Index(g.heaps, 'I'), slices.Index(g.heaps, 'A')
	if img < 0 {
		return nil
	}
	for n := 1; n < len(g.ids); n++ {
		l := g.layout[g.ids[n]]
		if g.kind[n] >= 0 || int(g.heap[n]) != img || l == nil || l.loader == 0 {
			continue
		}
		if app < 0 {
			if len(g.heaps) == 255 {
				return fmt.Errorf("hprof: more than 255 heaps")
			}
			app = len(g.heaps)
			g.heaps = append(g.heaps, 'A')
		}
		g.heap[n] = uint8(app)
		g.appImage7 = true
		for _, st := range l.named {
			if m := g.lookup(st.value); m > 0 && int(g.heap[m]) == img && overheadStatic(st.name) {
				g.heap[m] = uint8(app)
			}
		}
	}
	return nil
}

// overheadStatic tells whether a static is ART's fake one for a class's
// overhead array.
func overheadStatic(name string) bool {
	return name == "$classOverhead" || name == "$staticOverhead"
}

// index sorts the nodes by id.
func (g *Graph) index() {
	g.byID = make([]int32, len(g.ids)-1)
	for i := range g.byID {
		g.byID[i] = int32(i + 1)
	}
	slices.SortStableFunc(g.byID, func(a, b int32) int { return cmp.Compare(g.ids[a], g.ids[b]) })
	g.sorted = make([]uint64, len(g.byID))
	for i, n := range g.byID {
		g.sorted[i] = g.ids[n]
	}
	if len(g.sorted) == 0 {
		return
	}
	// About one bucket per 8 ids, at most 2^22.
	span := g.sorted[len(g.sorted)-1] - g.sorted[0]
	buckets := min(uint64(1)<<22, max(1, uint64(len(g.sorted)/8)))
	for g.shift = 0; span>>g.shift >= buckets; g.shift++ {
	}
	g.bucket = make([]uint32, (span>>g.shift)+2)
	k := uint64(0)
	for i, id := range g.sorted {
		for b := (id - g.sorted[0]) >> g.shift; k <= b; k++ {
			g.bucket[k] = uint32(i)
		}
	}
	for ; k < uint64(len(g.bucket)); k++ {
		g.bucket[k] = uint32(len(g.sorted))
	}
}

// lookup returns the node of an object id, or -1.
func (g *Graph) lookup(id uint64) int32 {
	if len(g.sorted) == 0 || id < g.sorted[0] || id > g.sorted[len(g.sorted)-1] {
		return -1
	}
	k := (id - g.sorted[0]) >> g.shift
	lo, hi := g.bucket[k], g.bucket[k+1]
	i, ok := slices.BinarySearch(g.sorted[lo:hi], id)
	if !ok {
		return -1
	}
	return g.byID[int(lo)+i]
}

// refOffsets returns the offsets of the Object fields in an instance of
// class, its own fields first, then its superclasses'.
func (g *Graph) refOffsets(class uint64, idSize int) []uint32 {
	l := g.layout[class]
	if l == nil {
		return nil
	}
	if l.done {
		return l.refs
	}
	off := uint32(0)
	seen := 0
	for c := l; c != nil && seen < 1024; seen++ {
		for _, f := range c.fields {
			if f.Type == hprof.Object {
				l.refs = append(l.refs, off)
			}
			off += uint32(f.Type.Size(idSize))
		}
		if c.super == 0 {
			break
		}
		c = g.layout[c.super]
	}
	l.done = true
	return l.refs
}

// references reads the dump again for its references: succ[off[n]:off[n+1]]
// are node n's successors.
func (g *Graph) references(r io.Reader, roots []uint64) (succ []int32, off []uint32, err error) {
	rd, err := hprof.NewReader(r)
	if err != nil {
		return nil, nil, err
	}
	ids := rd.Header().IDSize
	off = make([]uint32, 1, len(g.ids)+1)
	g.hashes = map[int32]uint64{}
	digest := xxhash.New()
	hashed := int32(-1) // the node whose values digest holds
	add := func(id uint64) {
		if id == 0 {
			return
		}
		n := g.lookup(id)
		if n < 0 {
			g.Dangling++
			return
		}
		succ = append(succ, n)
	}
	for _, id := range roots {
		add(id)
	}
	next := func() {
		off = append(off, uint32(len(succ)))
	}
	next()
	err = rd.Walk(&hprof.Visitor{
		ClassDump: func(c *hprof.ClassDump) error {
			add(c.SuperID)
			add(c.LoaderID)
			for _, s := range c.Statics {
				if s.Type == hprof.Object {
					add(s.Value)
				}
			}
			next()
			return nil
		},
		InstanceData: func(id, class uint64, data []byte) error {
			if id == g.dumpData && id != 0 {
				g.dumpDataFields(class, data, ids)
			}
			if w := g.watches[class]; w != nil {
				g.watch(w, int32(len(off)-1), data, ids)
			}
			for _, o := range g.refOffsets(class, ids) {
				if int(o)+ids <= len(data) {
					add(hprof.ID(data[o:], ids))
				}
			}
			add(class)
			return nil
		},
		Instance: func(uint64, uint64, uint32) error { next(); return nil },
		Elements: func(_ uint64, _ uint32, b []byte) error {
			for i := 0; i+ids <= len(b); i += ids {
				add(hprof.ID(b[i:], ids))
			}
			return nil
		},
		ObjectArray: func(_, class uint64, _ uint32) error {
			add(class)
			next()
			return nil
		},
		Values: func(_ uint64, t hprof.Type, first uint64, b []byte) error {
			if t == hprof.Byte || t == hprof.Char {
				if first == 0 {
					digest.Reset()
					hashed = int32(len(off) - 1)
				}
				digest.Write(b)
			}
			return nil
		},
		PrimitiveArray: func(_ uint64, t hprof.Type, n uint32) error {
			cur := int32(len(off) - 1)
			switch {
			case hashed == cur:
				g.hashes[cur] = digest.Sum64()
			case (t == hprof.Byte || t == hprof.Char) && n == 0:
				g.hashes[cur] = xxhash.Sum64(nil)
			}
			next()
			return nil
		},
	})
	if err != nil {
		return nil, nil, err
	}
	if len(succ) > math.MaxUint32-1 {
		return nil, nil, fmt.Errorf("hprof: more than %d references", uint32(math.MaxUint32))
	}
	if len(off) != len(g.ids)+1 {
		return nil, nil, fmt.Errorf("hprof: the dump changed between two reads (%d objects, then %d)", len(g.ids)-1, len(off)-2)
	}
	return succ, off, nil
}

// dominators computes the immediate dominators (Lengauer and Tarjan's
// algorithm, with path compression) and the retained sizes. It works on
// the nodes' depth-first numbers, not their dump order: the algorithm's
// arrays are then walked mostly in order, which keeps a large graph's
// accesses in the processor's caches.
func (g *Graph) dominators(succ []int32, off []uint32) {
	n := len(g.ids)
	num := make([]int32, n) // node -> depth-first number; -1: not reached
	for v := range num {
		num[v] = -1
	}
	vertex := make([]int32, 0, n) // number -> node
	parent := make([]int32, n)    // by number: the parent's number
	type frame struct {
		v    int32
		next uint32
	}
	stack := []frame{{0, off[0]}}
	num[0] = 0
	vertex = append(vertex, 0)
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next == off[top.v+1] {
			stack = stack[:len(stack)-1]
			continue
		}
		w := succ[top.next]
		top.next++
		if num[w] < 0 {
			num[w] = int32(len(vertex))
			parent[len(vertex)] = num[top.v]
			vertex = append(vertex, w)
			stack = append(stack, frame{w, off[w]})
		}
	}
	m := len(vertex)
	// Predecessors by number: counted into pstart[j+2], summed (pstart[j+1]
	// is then where j's begin), and filled front to back, each moving
	// pstart[j+1] on; at the end pred[pstart[j]:pstart[j+1]] are j's.
	pstart := make([]uint32, m+2)
	for _, v := range vertex {
		for _, w := range succ[off[v]:off[v+1]] {
			pstart[num[w]+2]++
		}
	}
	for i := 2; i < m+2; i++ {
		pstart[i] += pstart[i-1]
	}
	pred := make([]int32, pstart[m+1])
	for i, v := range vertex {
		for _, w := range succ[off[v]:off[v+1]] {
			j := num[w] + 1
			pred[pstart[j]] = int32(i)
			pstart[j]++
		}
	}
	num = nil
	runtime.GC()
	semi := make([]int32, m)
	label := make([]int32, m)
	ancestor := make([]int32, m)
	idom := make([]int32, m)
	bucket := make([]int32, m) // heads of linked lists through bnext
	bnext := make([]int32, m)
	for i := range m {
		semi[i], label[i], ancestor[i], idom[i], bucket[i] = int32(i), int32(i), -1, -1, -1
	}
	var path []int32
	eval := func(v int32) int32 {
		if ancestor[v] < 0 {
			return v
		}
		// Compress the path from v to the root of its tree.
		path = path[:0]
		for u := v; ancestor[ancestor[u]] >= 0; u = ancestor[u] {
			path = append(path, u)
		}
		for i := len(path) - 1; i >= 0; i-- {
			u := path[i]
			a := ancestor[u]
			if semi[label[a]] < semi[label[u]] {
				label[u] = label[a]
			}
			ancestor[u] = ancestor[a]
		}
		return label[v]
	}
	for w := int32(m - 1); w >= 1; w-- {
		for _, v := range pred[pstart[w]:pstart[w+1]] {
			if u := eval(v); semi[u] < semi[w] {
				semi[w] = semi[u]
			}
		}
		s := semi[w]
		bnext[w] = bucket[s]
		bucket[s] = w
		p := parent[w]
		ancestor[w] = p
		for v := bucket[p]; v >= 0; v = bnext[v] {
			if u := eval(v); semi[u] < semi[v] {
				idom[v] = u
			} else {
				idom[v] = p
			}
		}
		bucket[p] = -1
	}
	for w := 1; w < m; w++ {
		if idom[w] != semi[w] {
			idom[w] = idom[idom[w]]
		}
	}
	// What follows needs none of these: let them go before it allocates.
	semi, label, ancestor, bucket, bnext, pred, pstart, parent = nil, nil, nil, nil, nil, nil, nil, nil
	runtime.GC()
	// Back to nodes; retained sizes summed up the tree by number (a
	// dominator's number is below those it dominates).
	ret := make([]uint64, m)
	for i, v := range vertex {
		ret[i] = g.size[v]
	}
	for w := m - 1; w >= 1; w-- {
		ret[idom[w]] += ret[w]
	}
	g.idom = make([]int32, n)
	g.ret = make([]uint64, n)
	for v := range g.idom {
		g.idom[v] = -1
	}
	for i, v := range vertex {
		g.ret[v] = ret[i]
		if i > 0 {
			g.idom[v] = vertex[idom[i]]
		}
	}
	g.order = vertex
}

// Objects is the number of objects in the dump (classes included).
func (g *Graph) Objects() int { return len(g.ids) - 1 }

// Reachable is the number of objects reachable from the GC roots.
func (g *Graph) Reachable() int { return len(g.order) - 1 }

// Retained returns the retained size of the object with id, and whether
// it is reachable.
func (g *Graph) Retained(id uint64) (uint64, bool) {
	n := g.lookup(id)
	if n < 0 || g.idom[n] < 0 {
		return 0, false
	}
	return g.ret[n], true
}

// Dominator returns the id of the immediate dominator of the object with
// id (0: the roots), and whether the object is reachable.
func (g *Graph) Dominator(id uint64) (uint64, bool) {
	n := g.lookup(id)
	if n < 0 || g.idom[n] < 0 {
		return 0, false
	}
	return g.ids[g.idom[n]], true
}

// className names a kind.
func (g *Graph) kindName(k kindKey) string {
	if k.prim {
		return hprof.Type(k.class).Name() + "[]"
	}
	if nameID, ok := g.class[k.class]; ok && g.names[nameID] != "" {
		return ClassName(g.names[nameID])
	}
	return fmt.Sprintf("<class 0x%x>", k.class)
}

// heapName names the heap of index i.
func (g *Graph) heapName(i uint8) string {
	id := g.heaps[i]
	if nm, ok := g.heapNm[id]; ok && g.names[nm] != "" {
		return g.names[nm]
	}
	return heapName(id)
}

// Histogram returns the class histogram per heap with retained sizes: a
// class's retained bytes are those of the union of its instances'
// retained sets (each instance not dominated by another instance of its
// class counted once with all it dominates), so a linked list's nodes do
// not count each other again.
func (g *Graph) Histogram() *Histogram {
	type key struct {
		heap uint8
		kind int32
	}
	// Classes count as instances of java.lang.Class (a dump writes them
	// as CLASS DUMPs, and the JDK's histogram counts them so).
	classKind := int32(len(g.kinds))
	for i, k := range g.kinds {
		if !k.prim && g.kindName(k) == "java.lang.Class" {
			classKind = int32(i)
		}
	}
	kindOf := func(n int32) int32 {
		if _, out := g.leftOut[n]; out {
			return -1
		}
		if n > 0 && g.kind[n] < 0 {
			return classKind
		}
		return g.kind[n]
	}
	rows := map[key]*ClassCount{}
	row := func(n int32) *ClassCount {
		k := key{g.heap[n], kindOf(n)}
		c := rows[k]
		if c == nil {
			c = &ClassCount{Heap: g.heapName(k.heap), Class: "java.lang.Class"}
			if k.kind < int32(len(g.kinds)) {
				c.Class = g.kindName(g.kinds[k.kind])
			}
			rows[k] = c
		}
		return c
	}
	h := &Histogram{Header: g.Header, Retained: true, LeftOut: uint64(len(g.leftOut)), LeftOutBytes: g.leftOutBytes, AppImage: g.appImage7}
	for n := 1; n < len(g.ids); n++ {
		if _, out := g.leftOut[int32(n)]; out {
			continue
		}
		c := row(int32(n))
		c.Instances++
		c.Bytes += g.size[n]
		if g.idom[n] < 0 {
			h.Unreachable++
			h.UnreachableBytes += g.size[n]
		}
	}
	// Walk the dominator tree, counting how many instances of each kind
	// are on the path from the root: an instance with none above it
	// brings its retained size to its class.
	children := make([]int32, len(g.order))
	first := make([]uint32, len(g.ids)+1)
	for _, w := range g.order[1:] {
		first[g.idom[w]+1]++
	}
	for i := 1; i <= len(g.ids); i++ {
		first[i] += first[i-1]
	}
	fill := slices.Clone(first[:len(g.ids)])
	for _, w := range g.order[1:] {
		children[fill[g.idom[w]]] = w
		fill[g.idom[w]]++
	}
	above := make([]int32, len(g.kinds)+1)
	type visit struct {
		v    int32
		next uint32
	}
	stack := []visit{{0, first[0]}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next == first[top.v+1] {
			if k := kindOf(top.v); k >= 0 {
				above[k]--
			}
			stack = stack[:len(stack)-1]
			continue
		}
		w := children[top.next]
		top.next++
		if k := kindOf(w); k >= 0 {
			if above[k] == 0 {
				row(w).Retained += g.ret[w]
			}
			above[k]++
		}
		stack = append(stack, visit{w, first[w]})
	}
	for _, c := range rows {
		h.Objects += c.Instances
		h.Classes = append(h.Classes, *c)
	}
	slices.SortFunc(h.Classes, func(a, b ClassCount) int {
		if d := strings.Compare(a.Heap, b.Heap); d != 0 {
			return d
		}
		if d := cmp.Compare(b.Retained, a.Retained); d != 0 {
			return d
		}
		if d := cmp.Compare(b.Bytes, a.Bytes); d != 0 {
			return d
		}
		return strings.Compare(a.Class, b.Class)
	})
	return h
}
