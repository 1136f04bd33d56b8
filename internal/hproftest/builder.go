package hproftest

import (
	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// Builder writes a dump with 4-byte ids from objects and references:
// STRING and LOAD CLASS records as they are needed, then every sub-record
// in one HEAP DUMP SEGMENT.
type Builder struct {
	d       *Dump
	strings map[string]uint32
	next    uint32 // next string id
	serial  uint32
	subs    []body // sub-records, one per object or root
	layout  map[uint32][]hprof.Type
	super   map[uint32]uint32
}

// NewBuilder starts a dump of the given version ("JAVA PROFILE 1.0.3").
func NewBuilder(version string) *Builder {
	return &Builder{d: NewDump(version), strings: map[string]uint32{}, next: 1, layout: map[uint32][]hprof.Type{}, super: map[uint32]uint32{}}
}

// String returns the id of s, writing a STRING record the first time.
func (b *Builder) String(s string) uint32 {
	if id, ok := b.strings[s]; ok {
		return id
	}
	id := b.next
	b.next++
	b.strings[s] = id
	var r body
	r.u4(id)
	r.WriteString(s)
	b.d.Record(hprof.TagString, r.Bytes())
	return id
}

// Field is an instance field of a class.
type Field struct {
	Name string
	Type hprof.Type
}

// StaticRef is a static Object field.
type StaticRef struct {
	Name  string
	Value uint32
}

// Class writes a LOAD CLASS record and a CLASS DUMP for class id.
func (b *Builder) Class(id, super uint32, name string, fields []Field, statics []StaticRef) {
	b.serial++
	var r body
	r.u4(b.serial)
	r.u4(id)
	r.u4(0)
	r.u4(b.String(name))
	b.d.Record(hprof.TagLoadClass, r.Bytes())
	var s body
	s.u1(hprof.SubClassDump)
	s.u4(id)
	s.u4(0)
	s.u4(super)
	for range 5 {
		s.u4(0) // loader, signers, domain, reserved ×2
	}
	size := uint32(0)
	for _, f := range fields {
		size += uint32(f.Type.Size(4))
	}
	s.u4(size)
	s.u2(0)
	s.u2(uint16(len(statics)))
	for _, st := range statics {
		s.u4(b.String(st.Name))
		s.u1(byte(hprof.Object))
		s.u4(st.Value)
	}
	s.u2(uint16(len(fields)))
	var types []hprof.Type
	for _, f := range fields {
		s.u4(b.String(f.Name))
		s.u1(byte(f.Type))
		types = append(types, f.Type)
	}
	b.layout[id], b.super[id] = types, super
	b.subs = append(b.subs, s)
}

// Instance writes an instance of class; values are its fields' values, the
// class's own first, then its superclass's (as a dump orders them).
func (b *Builder) Instance(id, class uint32, values ...uint64) {
	var data body
	i := 0
	for c := class; c != 0; c = b.super[c] {
		for _, t := range b.layout[c] {
			v := uint64(0)
			if i < len(values) {
				v = values[i]
			}
			i++
			for k := t.Size(4) - 1; k >= 0; k-- {
				data.u1(byte(v >> (8 * k)))
			}
		}
	}
	var s body
	s.u1(hprof.SubInstanceDump)
	s.u4(id)
	s.u4(0)
	s.u4(class)
	s.u4(uint32(data.Len()))
	s.Write(data.Bytes())
	b.subs = append(b.subs, s)
}

// ObjectArray writes an object array of class with elements.
func (b *Builder) ObjectArray(id, class uint32, elems ...uint32) {
	var s body
	s.u1(hprof.SubObjectArrayDump)
	s.u4(id)
	s.u4(0)
	s.u4(uint32(len(elems)))
	s.u4(class)
	for _, e := range elems {
		s.u4(e)
	}
	b.subs = append(b.subs, s)
}

// PrimitiveArray writes a primitive array of n elements of type t with
// the given data (n times t's size bytes).
func (b *Builder) PrimitiveArray(id uint32, t hprof.Type, n uint32, data []byte) {
	var s body
	s.u1(hprof.SubPrimArrayDump)
	s.u4(id)
	s.u4(0)
	s.u4(n)
	s.u1(byte(t))
	s.Write(data)
	b.subs = append(b.subs, s)
}

// Root writes a root of a kind that carries only the object's id
// (hprof.RootUnknown, RootStickyClass, RootInternedString, …).
func (b *Builder) Root(tag byte, id uint32) {
	var s body
	s.u1(tag)
	s.u4(id)
	b.subs = append(b.subs, s)
}

// HeapInfo writes Android's HEAP DUMP INFO: the objects that follow are in
// heap ('A' app, 'I' image, 'Z' zygote), until the segment ends.
func (b *Builder) HeapInfo(heap byte, name string) {
	var s body
	s.u1(hprof.SubHeapDumpInfo)
	s.u4(uint32(heap))
	s.u4(b.String(name))
	b.subs = append(b.subs, s)
}

// Bytes writes the sub-records in one segment and ends the dump.
func (b *Builder) Bytes() []byte {
	var seg body
	for _, s := range b.subs {
		seg.Write(s.Bytes())
	}
	b.d.Record(hprof.TagHeapDumpSegment, seg.Bytes())
	b.d.Record(hprof.TagHeapDumpEnd, nil)
	return b.d.Bytes()
}
