package heapdump

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/alloctrack/alloctrack/internal/hproftest"
)

// model is a random heap as the test sees it: objects with shallow sizes
// and references, and roots.
type model struct {
	size  map[uint32]uint64
	refs  map[uint32][]uint32
	class map[uint32]string // instances' and arrays' class names
	roots []uint32
	all   []uint32
}

// randomHeap builds a random dump: 5 classes (a chain of superclasses,
// with Object and int fields, one with a static), instances whose fields
// point at random objects (or null, or a missing id), object arrays,
// primitive arrays, and a few roots; and the model of its references as
// MAT draws them (instance -> fields and class, array -> elements and
// class, class -> superclass and statics).
func randomHeap(seed uint64, n int) ([]byte, *model) {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := hproftest.NewBuilder("JAVA PROFILE 1.0.3")
	m := &model{size: map[uint32]uint64{}, refs: map[uint32][]uint32{}, class: map[uint32]string{}}
	const classBase, objBase = 0x100, 0x10000
	nObj := uint32(n)
	pick := func() uint32 {
		switch rng.IntN(10) {
		case 0, 1:
			return 0
		case 2:
			return 0xdead0000 // not in the dump
		}
		return objBase + rng.Uint32N(nObj)
	}
	var statics [5]uint32
	for c := range uint32(5) {
		id := classBase + c
		super := uint32(0)
		if c > 0 && c%2 == 0 {
			super = id - 1
		}
		var st []hproftest.StaticRef
		if c == 3 {
			statics[c] = objBase + rng.Uint32N(nObj)
			st = append(st, hproftest.StaticRef{Name: "INSTANCE", Value: statics[c]})
		}
		fields := []hproftest.Field{{Name: "a", Type: hprof.Object}, {Name: "n", Type: hprof.Int}, {Name: "b", Type: hprof.Object}}
		b.Class(id, super, fmt.Sprintf("com.example.C%d", c), fields, st)
		m.size[id] = 0
		m.class[id] = "java.lang.Class"
		m.all = append(m.all, id)
		if super != 0 {
			m.refs[id] = append(m.refs[id], super)
		}
		if statics[c] != 0 {
			m.refs[id] = append(m.refs[id], statics[c])
		}
	}
	b.Class(classBase+9, 0, "java.lang.Object[]", nil, nil)
	m.size[classBase+9] = 0
	m.class[classBase+9] = "java.lang.Class"
	m.all = append(m.all, classBase+9)
	for i := range nObj {
		id := objBase + i
		m.all = append(m.all, id)
		switch rng.IntN(6) {
		case 0: // an object array
			k := rng.IntN(4)
			var el []uint32
			for range k {
				el = append(el, pick())
			}
			b.ObjectArray(id, classBase+9, el...)
			m.size[id] = uint64(4 * k)
			m.class[id] = "java.lang.Object[]"
			m.refs[id] = append(m.refs[id], classBase+9)
			m.refs[id] = append(m.refs[id], el...)
		case 1: // a primitive array
			k := uint32(rng.IntN(5))
			b.PrimitiveArray(id, hprof.Long, k, make([]byte, 8*k))
			m.size[id] = uint64(8 * k)
			m.class[id] = "long[]"
		default:
			c := rng.Uint32N(5)
			levels := 1
			if c > 0 && c%2 == 0 {
				levels = 2
			}
			var vals []uint64
			for range levels {
				a, bb := pick(), pick()
				vals = append(vals, uint64(a), uint64(rng.Uint32()), uint64(bb))
				m.refs[id] = append(m.refs[id], a, bb)
			}
			b.Instance(id, classBase+c, vals...)
			m.size[id] = uint64(12 * levels)
			m.class[id] = fmt.Sprintf("com.example.C%d", c)
			m.refs[id] = append(m.refs[id], classBase+c)
		}
	}
	for range 3 {
		r := objBase + rng.Uint32N(nObj)
		m.roots = append(m.roots, r)
		b.Root(hprof.RootUnknown, r)
	}
	m.roots = append(m.roots, classBase+3)
	b.Root(hprof.RootStickyClass, classBase+3)
	return b.Bytes(), m
}

// reach returns the objects reachable from the roots without passing
// through any object in cut.
func (m *model) reach(cut map[uint32]bool) map[uint32]bool {
	seen := map[uint32]bool{}
	var stack []uint32
	for _, r := range m.roots {
		if !cut[r] && !seen[r] {
			seen[r] = true
			stack = append(stack, r)
		}
	}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, w := range m.refs[v] {
			if _, ok := m.size[w]; !ok || cut[w] || seen[w] {
				continue
			}
			seen[w] = true
			stack = append(stack, w)
		}
	}
	return seen
}

// TestRetainedAgainstBruteForce checks every object's retained size, and
// every class's, against removing the object (or each instance) and
// counting what no root reaches any more.
func TestRetainedAgainstBruteForce(t *testing.T) {
	for seed := range uint64(40) {
		dump, m := randomHeap(seed, 60+int(seed)*7)
		g, err := ReadGraph(bytes.NewReader(dump))
		if err != nil {
			t.Fatal(err)
		}
		all := m.reach(nil)
		if g.Reachable() != len(all) {
			t.Fatalf("seed %d: %d reachable, brute force %d", seed, g.Reachable(), len(all))
		}
		lost := map[uint32]map[uint32]bool{} // object -> what it alone keeps
		for _, v := range m.all {
			got, ok := g.Retained(uint64(v))
			if ok != all[v] {
				t.Fatalf("seed %d: 0x%x reachable %v, brute force %v", seed, v, ok, all[v])
			}
			if !ok {
				continue
			}
			without := m.reach(map[uint32]bool{v: true})
			lost[v] = map[uint32]bool{}
			want := uint64(0)
			for u := range all {
				if !without[u] {
					want += m.size[u]
					lost[v][u] = true
				}
			}
			if got != want {
				t.Fatalf("seed %d: 0x%x retains %d, brute force %d", seed, v, got, want)
			}
			// Its immediate dominator, removed, cuts it off (unless it is
			// the roots).
			if d, _ := g.Dominator(uint64(v)); d != 0 && m.reach(map[uint32]bool{uint32(d): true})[v] {
				t.Fatalf("seed %d: 0x%x still reachable without its dominator 0x%x", seed, v, d)
			}
		}
		// Classes: the union of their instances' retained sets.
		want := map[string]uint64{}
		union := map[string]map[uint32]bool{}
		for v, c := range m.class {
			if lost[v] == nil {
				continue
			}
			if union[c] == nil {
				union[c] = map[uint32]bool{}
			}
			for u := range lost[v] {
				union[c][u] = true
			}
		}
		for c, set := range union {
			for u := range set {
				want[c] += m.size[u]
			}
		}
		h := g.Histogram()
		for _, row := range h.Classes {
			if row.Retained != want[row.Class] {
				t.Errorf("seed %d: class %s retains %d, brute force %d", seed, row.Class, row.Retained, want[row.Class])
			}
		}
		if h.Unreachable != uint64(len(m.class)-countReached(m, all)) {
			t.Errorf("seed %d: %d unreachable", seed, h.Unreachable)
		}
	}
}

func countReached(m *model, all map[uint32]bool) int {
	n := 0
	for v := range m.class {
		if all[v] {
			n++
		}
	}
	return n
}
