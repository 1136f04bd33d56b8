// Package heapdump answers "what holds my memory" from a heap dump: a
// class histogram per heap (instances, and the bytes the dump gives them),
// read from an hprof stream with memory bounded by the dump's classes and
// names, not by its objects.
package heapdump

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// ClassCount is one class's objects in one heap.
type ClassCount struct {
	Heap  string `json:"heap"`  // "app", "image", "zygote" (Android); "default" otherwise
	Class string `json:"class"` // dotted, arrays as "int[]"
	// Instances is the number of objects; Bytes what the dump gives them:
	// an instance's field data, an array's elements. Object headers and
	// alignment are not in a dump, so the VM's own sizes are larger.
	Instances uint64 `json:"instances"`
	Bytes     uint64 `json:"bytes"`
	// Retained is the bytes the class's instances retain together (see
	// Graph.Histogram); set only when the histogram has retained sizes.
	Retained uint64 `json:"retained_bytes"`
}

// Histogram is a dump's classes per heap.
type Histogram struct {
	Header  hprof.Header
	Classes []ClassCount // by heap, then retained bytes, then bytes, largest first
	Objects uint64
	// Retained tells that the classes' Retained is set (a histogram of a
	// Graph); Unreachable counts the objects no GC root reaches, and
	// their bytes.
	Retained                      bool
	Unreachable, UnreachableBytes uint64
	// LeftOut counts the objects the dump made for itself and that no
	// count includes (Android 15's Bitmap.dumpData, from am dumpheap
	// -b), and their bytes; set only in a Graph's histogram.
	LeftOut, LeftOutBytes uint64
	// AppImage: the dump wrote the app's own image in heap 'I' (Android
	// 7.0 and 7.1): its classes count in app, its other objects (its
	// Strings) stay in image, so app leaves them out. Set only in a
	// Graph's histogram.
	AppImage bool
}

// heapName names Android's heap ids.
func heapName(id uint32) string {
	switch id {
	case 'A':
		return "app"
	case 'I':
		return "image"
	case 'Z':
		return "zygote"
	}
	return "default"
}

// ClassName turns a class name as a dump holds it into the dotted form:
// JDKs write "java/lang/String" and "[I", Android "java.lang.String" and
// "int[]".
func ClassName(s string) string {
	if strings.HasPrefix(s, "[") {
		return allocreport.DescriptorToDot(s)
	}
	return strings.ReplaceAll(s, "/", ".")
}

// Read reads a dump from r and returns its histogram.
func Read(r io.Reader) (*Histogram, error) {
	rd, err := hprof.NewReader(r)
	if err != nil {
		return nil, err
	}
	ids := rd.Header().IDSize
	names := map[uint64]string{}      // string id -> string (class and heap names)
	classNames := map[uint64]uint64{} // class id -> name string id
	type key struct {
		heap  uint32
		class uint64 // class id; for primitive arrays the element type
		prim  bool
	}
	counts := map[key]*ClassCount{}
	classDumps := map[uint32]uint64{} // classes by heap: instances of java.lang.Class
	heap := uint32(0)
	heapNames := map[uint32]uint64{}
	add := func(k key, bytes uint64) {
		c := counts[k]
		if c == nil {
			c = &ClassCount{}
			counts[k] = c
		}
		c.Instances++
		c.Bytes += bytes
	}
	h := &Histogram{Header: rd.Header()}
	v := &hprof.Visitor{
		String: func(id uint64, utf8 []byte) error {
			names[id] = string(utf8)
			return nil
		},
		LoadClass: func(_ uint32, classID, nameID uint64) error {
			classNames[classID] = nameID
			return nil
		},
		Segment: func() error {
			heap = 0 // ART starts every segment in the default heap
			return nil
		},
		HeapInfo: func(id uint32, nameID uint64) error {
			heap = id
			heapNames[id] = nameID
			return nil
		},
		ClassDump: func(*hprof.ClassDump) error {
			classDumps[heap]++
			return nil
		},
		Instance: func(_, classID uint64, size uint32) error {
			add(key{heap: heap, class: classID}, uint64(size))
			return nil
		},
		ObjectArray: func(_, classID uint64, n uint32) error {
			add(key{heap: heap, class: classID}, uint64(n)*uint64(ids))
			return nil
		},
		PrimitiveArray: func(_ uint64, t hprof.Type, n uint32) error {
			add(key{heap: heap, class: uint64(t), prim: true}, uint64(n)*uint64(t.Size(ids)))
			return nil
		},
	}
	if err := rd.Walk(v); err != nil {
		return nil, err
	}
	for k, c := range counts {
		c.Heap = heapName(k.heap)
		if id, ok := heapNames[k.heap]; ok && names[id] != "" {
			c.Heap = names[id]
		}
		switch nameID, ok := classNames[k.class]; {
		case k.prim:
			c.Class = hprof.Type(k.class).Name() + "[]"
		case ok && names[nameID] != "":
			c.Class = ClassName(names[nameID])
		default:
			c.Class = fmt.Sprintf("<class 0x%x>", k.class)
		}
		h.Objects += c.Instances
		h.Classes = append(h.Classes, *c)
	}
	// Classes are instances of java.lang.Class, as the JDK's histogram
	// counts them; a dump writes them as CLASS DUMPs.
	for hp, n := range classDumps {
		name := heapName(hp)
		if id, ok := heapNames[hp]; ok && names[id] != "" {
			name = names[id]
		}
		i := slices.IndexFunc(h.Classes, func(c ClassCount) bool { return c.Heap == name && c.Class == "java.lang.Class" })
		if i < 0 {
			h.Classes = append(h.Classes, ClassCount{Heap: name, Class: "java.lang.Class"})
			i = len(h.Classes) - 1
		}
		h.Classes[i].Instances += n
		h.Objects += n
	}
	slices.SortFunc(h.Classes, func(a, b ClassCount) int {
		if d := strings.Compare(a.Heap, b.Heap); d != 0 {
			return d
		}
		if d := cmp.Compare(b.Bytes, a.Bytes); d != 0 {
			return d
		}
		return strings.Compare(a.Class, b.Class)
	})
	return h, nil
}
