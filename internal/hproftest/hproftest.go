// Package hproftest builds hprof dumps for tests.
package hproftest

import (
	"bytes"
	"encoding/binary"

	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// Dump builds an hprof dump with 4-byte ids, record by record.
type Dump struct{ b bytes.Buffer }

// NewDump starts a dump of the given version.
func NewDump(version string) *Dump {
	d := &Dump{}
	d.b.WriteString(version)
	d.b.WriteByte(0)
	d.U4(4)
	d.b.Write(make([]byte, 8)) // time
	return d
}

// U1 and U4 write raw bytes.
func (d *Dump) U1(v byte)   { d.b.WriteByte(v) }
func (d *Dump) U4(v uint32) { d.b.Write(binary.BigEndian.AppendUint32(nil, v)) }

// Bytes is the dump so far.
func (d *Dump) Bytes() []byte { return d.b.Bytes() }

// Record writes a top-level record.
func (d *Dump) Record(tag byte, body []byte) {
	d.U1(tag)
	d.U4(0)
	d.U4(uint32(len(body)))
	d.b.Write(body)
}

// body builds a record's body.
type body struct{ bytes.Buffer }

func (b *body) u1(v byte)   { b.WriteByte(v) }
func (b *body) u2(v uint16) { b.Write(binary.BigEndian.AppendUint16(nil, v)) }
func (b *body) u4(v uint32) { b.Write(binary.BigEndian.AppendUint32(nil, v)) }

// AndroidDump is an Android-style dump (1.0.3): strings and classes, then
// one segment with a zygote object, Android's roots, app objects of every
// kind, and an obsolete NODATA array, then HEAP DUMP END.
func AndroidDump() []byte {
	d := NewDump("JAVA PROFILE 1.0.3")
	for id, s := range map[uint32]string{1: "com.example.Foo", 2: "com.example.Foo[]", 3: "zygote", 4: "app", 5: "x", 6: "y", 7: "$classOverhead"} {
		var b body
		b.u4(id)
		b.WriteString(s)
		d.Record(hprof.TagString, b.Bytes())
	}
	for serial, c := range [][2]uint32{{0x100, 1}, {0x200, 2}} {
		var b body
		b.u4(uint32(serial + 1))
		b.u4(c[0])
		b.u4(0)
		b.u4(c[1])
		d.Record(hprof.TagLoadClass, b.Bytes())
	}
	var s body
	s.u1(hprof.SubHeapDumpInfo)
	s.u4('Z')
	s.u4(3)
	// CLASS DUMP of Foo: a constant, a static int, two instance fields.
	s.u1(hprof.SubClassDump)
	s.u4(0x100)
	s.u4(0)
	for range 6 {
		s.u4(0) // super, loader, signers, domain, reserved ×2
	}
	s.u4(8)
	s.u2(1)
	s.u2(0)
	s.u1(byte(hprof.Long))
	s.Write(make([]byte, 8))
	s.u2(1)
	s.u4(7)
	s.u1(byte(hprof.Int))
	s.u4(42)
	s.u2(2)
	s.u4(5)
	s.u1(byte(hprof.Int))
	s.u4(6)
	s.u1(byte(hprof.Object))
	// A zygote Foo.
	s.u1(hprof.SubInstanceDump)
	s.u4(0x1000)
	s.u4(0)
	s.u4(0x100)
	s.u4(8)
	s.Write(make([]byte, 8))
	// Android's roots.
	s.u1(hprof.RootInternedString)
	s.u4(0x1000)
	s.u1(hprof.RootJNIMonitor)
	s.u4(0x1000)
	s.u4(1)
	s.u4(0xffffffff)
	s.u1(hprof.RootVMInternal)
	s.u4(0x1000)
	s.u1(hprof.SubHeapDumpInfo)
	s.u4('A')
	s.u4(4)
	for i := range 3 {
		s.u1(hprof.SubInstanceDump)
		s.u4(0x2000 + uint32(i))
		s.u4(0)
		s.u4(0x100)
		s.u4(8)
		s.Write(make([]byte, 8))
	}
	s.u1(hprof.SubObjectArrayDump)
	s.u4(0x3000)
	s.u4(0)
	s.u4(2)
	s.u4(0x200)
	s.u4(0x2000)
	s.u4(0x2001)
	s.u1(hprof.SubPrimArrayDump)
	s.u4(0x3001)
	s.u4(0)
	s.u4(5)
	s.u1(byte(hprof.Int))
	s.Write(make([]byte, 20))
	s.u1(hprof.SubPrimArrayNoData)
	s.u4(0x3002)
	s.u4(0)
	s.u4(100)
	s.u1(byte(hprof.Byte))
	s.u1(hprof.SubUnreachable)
	s.u4(0x3003)
	d.Record(hprof.TagHeapDumpSegment, s.Bytes())
	d.Record(hprof.TagHeapDumpEnd, nil)
	return d.Bytes()
}

// ManyObjects is an Android-style dump of n instances of one class (16
// bytes of fields each) and n/4 int[] of 8 elements, in segments of at
// most 10,000 objects: a large dump for benchmarks.
func ManyObjects(n int) []byte {
	d := NewDump("JAVA PROFILE 1.0.3")
	var b body
	b.u4(1)
	b.WriteString("com.example.Big")
	d.Record(hprof.TagString, b.Bytes())
	b.Reset()
	b.u4(1)
	b.u4(0x100)
	b.u4(0)
	b.u4(1)
	d.Record(hprof.TagLoadClass, b.Bytes())
	for start := 0; start < n; start += 10000 {
		var s body
		for i := start; i < min(n, start+10000); i++ {
			s.u1(hprof.SubInstanceDump)
			s.u4(uint32(0x10000 + i))
			s.u4(0)
			s.u4(0x100)
			s.u4(16)
			s.Write(make([]byte, 16))
			if i%4 == 0 {
				s.u1(hprof.SubPrimArrayDump)
				s.u4(uint32(0x80000000 + i))
				s.u4(0)
				s.u4(8)
				s.u1(byte(hprof.Int))
				s.Write(make([]byte, 32))
			}
		}
		d.Record(hprof.TagHeapDumpSegment, s.Bytes())
	}
	d.Record(hprof.TagHeapDumpEnd, nil)
	return d.Bytes()
}
