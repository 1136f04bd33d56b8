// Package hprof reads heap dumps in the hprof binary format: the standard
// "JAVA PROFILE 1.0.2" that JDKs write and Android's "JAVA PROFILE 1.0.3",
// with Android's heap sub-records (docs/heapdumps.md at the repository
// root).
//
// A Reader walks a dump as a stream, record by record, and hands each to a
// Visitor's callbacks, in the manner of a SAX parser: nothing of a record
// outlives its callback unless the visitor keeps it, and array and field
// data the visitor does not ask for are skipped, not read into memory, so a
// dump of hundreds of megabytes is read in a small, bounded buffer. A
// truncated or malformed dump is a *FormatError that names the offset; no
// length in a dump makes the reader allocate more than its buffer.
package hprof

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// Record tags (top level).
const (
	TagString          = 0x01
	TagLoadClass       = 0x02
	TagStackTrace      = 0x05 // serial, thread serial, frame count, frame ids
	TagHeapDump        = 0x0C
	TagHeapDumpSegment = 0x1C
	TagHeapDumpEnd     = 0x2C
)

// Heap dump sub-record tags: the standard ones, then Android's.
const (
	RootUnknown        = 0xFF
	RootJNIGlobal      = 0x01
	RootJNILocal       = 0x02
	RootJavaFrame      = 0x03
	RootNativeStack    = 0x04
	RootStickyClass    = 0x05
	RootThreadBlock    = 0x06
	RootMonitorUsed    = 0x07
	RootThreadObject   = 0x08
	SubClassDump       = 0x20
	SubInstanceDump    = 0x21
	SubObjectArrayDump = 0x22
	SubPrimArrayDump   = 0x23

	SubHeapDumpInfo      = 0xFE // Android: the heap the next objects are in
	RootInternedString   = 0x89
	RootFinalizing       = 0x8A // obsolete
	RootDebugger         = 0x8B
	RootReferenceCleanup = 0x8C // obsolete
	RootVMInternal       = 0x8D
	RootJNIMonitor       = 0x8E
	SubUnreachable       = 0x90 // obsolete
	SubPrimArrayNoData   = 0xC3 // obsolete: a primitive array without its values
)

// Type is a basic type of a field or array element.
type Type byte

// The basic types.
const (
	Object  Type = 2
	Boolean Type = 4
	Char    Type = 5
	Float   Type = 6
	Double  Type = 7
	Byte    Type = 8
	Short   Type = 9
	Int     Type = 10
	Long    Type = 11
)

// Size returns the size of a value of type t, idSize for Object; 0 for an
// unknown type.
func (t Type) Size(idSize int) int {
	switch t {
	case Object:
		return idSize
	case Boolean, Byte:
		return 1
	case Char, Short:
		return 2
	case Float, Int:
		return 4
	case Double, Long:
		return 8
	}
	return 0
}

// Name is the Java name of the type ("int", …; "Object" for Object).
func (t Type) Name() string {
	switch t {
	case Object:
		return "Object"
	case Boolean:
		return "boolean"
	case Char:
		return "char"
	case Float:
		return "float"
	case Double:
		return "double"
	case Byte:
		return "byte"
	case Short:
		return "short"
	case Int:
		return "int"
	case Long:
		return "long"
	}
	return fmt.Sprintf("type %d", byte(t))
}

// Header is a dump's file header.
type Header struct {
	Version string // "JAVA PROFILE 1.0.2" or "JAVA PROFILE 1.0.3"
	IDSize  int    // 4 or 8
	Time    time.Time
}

// FormatError is a malformed dump: what is wrong and at which byte.
type FormatError struct {
	Offset int64
	What   string
}

func (e *FormatError) Error() string { return fmt.Sprintf("hprof: %s at offset %d", e.What, e.Offset) }

// ClassDump is a class's CLASS DUMP sub-record, without its constant pool
// and static values.
type ClassDump struct {
	ID, SuperID, LoaderID uint64
	InstanceSize          uint32
	// Fields are the class's own instance fields (not its superclasses').
	Fields []Field
	// Statics are the class's static fields.
	Statics []Static
}

// Static is a static field and its value: an object id for an Object
// field, the value's bits for the others.
type Static struct {
	NameID uint64
	Type   Type
	Value  uint64
}

// MaxInstanceData is the most field data of one instance that the reader
// hands to Visitor.InstanceData: 65,535 fields of 8 bytes each, the most
// a class can declare, times 16 levels of superclasses, fit.
const MaxInstanceData = 8 << 20

// Field is an instance field.
type Field struct {
	NameID uint64
	Type   Type
}

// Visitor receives a dump's records. Any callback may be nil; one that
// returns an error stops the walk with it. Byte slices are valid only
// during the call.
type Visitor struct {
	String    func(id uint64, utf8 []byte) error
	LoadClass func(serial uint32, classID, nameID uint64) error
	// HeapInfo (Android) says which heap the objects that follow are in:
	// 'A' app, 'I' image, 'Z' zygote, 0 default.
	HeapInfo  func(heapID uint32, nameID uint64) error
	ClassDump func(c *ClassDump) error
	// Instance is an object of class classID whose field data takes size
	// bytes in the dump.
	Instance       func(id, classID uint64, size uint32) error
	ObjectArray    func(id, arrayClassID uint64, n uint32) error
	PrimitiveArray func(id uint64, elem Type, n uint32) error
	// InstanceData, when set, receives each instance's field data (its
	// class's fields, then its superclass's, and so on), before Instance
	// is called; it is read only when set. More than MaxInstanceData
	// bytes is a FormatError.
	InstanceData func(id, classID uint64, data []byte) error
	// Elements, when set, receives an object array's element ids (IDSize
	// bytes each, big-endian), in chunks starting at element first,
	// before ObjectArray is called.
	Elements func(arrayID uint64, first uint32, ids []byte) error
	// Values, when set, receives a primitive array's values (big-endian),
	// in chunks starting at byte offset first, before PrimitiveArray is
	// called.
	Values func(arrayID uint64, elem Type, first uint64, data []byte) error
	Root   func(tag byte, id uint64) error
	// Segment is called at the start of each HEAP DUMP (SEGMENT) record;
	// ART starts each in the default heap.
	Segment func() error
}

// Reader reads one dump.
type Reader struct {
	r      *bufio.Reader
	off    int64
	header Header
	buf    []byte // instance and array data handed to a visitor
}

// NewReader reads the dump's header from r.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{r: bufio.NewReaderSize(r, 64<<10)}
	v, err := rd.r.ReadSlice(0)
	if err != nil {
		return nil, &FormatError{0, "no NUL-terminated version string: not an hprof file"}
	}
	rd.off += int64(len(v))
	version := string(v[:len(v)-1])
	if version != "JAVA PROFILE 1.0.2" && version != "JAVA PROFILE 1.0.3" && version != "JAVA PROFILE 1.0.1" {
		return nil, &FormatError{0, fmt.Sprintf("version %q: not an hprof file", truncate(version, 40))}
	}
	var b [12]byte
	if err := rd.full(b[:]); err != nil {
		return nil, err
	}
	ids := int(binary.BigEndian.Uint32(b[:4]))
	if ids != 4 && ids != 8 {
		return nil, &FormatError{rd.off - 12, fmt.Sprintf("identifier size %d (want 4 or 8)", ids)}
	}
	ms := int64(binary.BigEndian.Uint64(b[4:]))
	rd.header = Header{Version: version, IDSize: ids, Time: time.UnixMilli(ms)}
	return rd, nil
}

// Header returns the dump's header.
func (rd *Reader) Header() Header { return rd.header }

// Offset is how many bytes of the dump were read.
func (rd *Reader) Offset() int64 { return rd.off }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// full reads exactly len(b) bytes.
func (rd *Reader) full(b []byte) error {
	n, err := io.ReadFull(rd.r, b)
	rd.off += int64(n)
	if err != nil {
		return &FormatError{rd.off, fmt.Sprintf("truncated: %d more bytes expected", len(b)-n)}
	}
	return nil
}

// skip discards n bytes.
func (rd *Reader) skip(n int64) error {
	for n > 0 {
		step := min(n, 1<<30)
		d, err := rd.r.Discard(int(step))
		rd.off += int64(d)
		n -= int64(d)
		if err != nil {
			return &FormatError{rd.off, fmt.Sprintf("truncated: %d more bytes expected", n)}
		}
	}
	return nil
}

// Walk reads every record to the end of the dump, handing each to v.
func (rd *Reader) Walk(v *Visitor) error {
	var h [9]byte
	var buf []byte
	for {
		start := rd.off
		n, err := io.ReadFull(rd.r, h[:])
		rd.off += int64(n)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &FormatError{start, "truncated record header"}
		}
		tag := h[0]
		length := int64(binary.BigEndian.Uint32(h[5:]))
		switch tag {
		case TagString, TagLoadClass:
			// Bounded by the record's u4 length (4 GiB at most), and read
			// only when asked for.
			if (tag == TagString && v.String == nil) || (tag == TagLoadClass && v.LoadClass == nil) {
				if err := rd.skip(length); err != nil {
					return err
				}
				continue
			}
			if length > 1<<24 {
				return &FormatError{start, fmt.Sprintf("record 0x%02x of %d bytes", tag, length)}
			}
			buf = grow(buf, int(length))
			if err := rd.full(buf); err != nil {
				return err
			}
			if err := rd.small(tag, buf, start, v); err != nil {
				return err
			}
		case TagHeapDump, TagHeapDumpSegment:
			if v.Segment != nil {
				if err := v.Segment(); err != nil {
					return err
				}
			}
			if err := rd.heap(length, v); err != nil {
				return err
			}
		default:
			if err := rd.skip(length); err != nil {
				return err
			}
		}
	}
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

func (rd *Reader) id(b []byte) uint64 { return ID(b, rd.header.IDSize) }

// ID reads an identifier of size bytes (a dump's IDSize, 4 or 8) from the
// start of b, big-endian.
func ID(b []byte, size int) uint64 {
	if size == 8 {
		return binary.BigEndian.Uint64(b)
	}
	return uint64(binary.BigEndian.Uint32(b))
}

// small hands a STRING or LOAD CLASS record to v.
func (rd *Reader) small(tag byte, b []byte, start int64, v *Visitor) error {
	ids := rd.header.IDSize
	switch tag {
	case TagString:
		if len(b) < ids {
			return &FormatError{start, "STRING record shorter than an id"}
		}
		return v.String(rd.id(b), b[ids:])
	case TagLoadClass:
		if len(b) != 8+2*ids {
			return &FormatError{start, fmt.Sprintf("LOAD CLASS record of %d bytes (want %d)", len(b), 8+2*ids)}
		}
		return v.LoadClass(binary.BigEndian.Uint32(b), rd.id(b[4:]), rd.id(b[8+ids:]))
	}
	return nil
}

// heap reads the sub-records of a HEAP DUMP (SEGMENT) of length bytes.
func (rd *Reader) heap(length int64, v *Visitor) error {
	end := rd.off + length
	ids := rd.header.IDSize
	var b [64]byte
	need := func(n int) ([]byte, error) {
		if rd.off+int64(n) > end {
			return nil, &FormatError{rd.off, fmt.Sprintf("sub-record runs past its segment's end (offset %d)", end)}
		}
		if err := rd.full(b[:n]); err != nil {
			return nil, err
		}
		return b[:n], nil
	}
	skip := func(n int64) error {
		if n < 0 || rd.off+n > end {
			return &FormatError{rd.off, fmt.Sprintf("sub-record of %d more bytes runs past its segment's end (offset %d)", n, end)}
		}
		return rd.skip(n)
	}
	root := func(tag byte, extra int) error {
		p, err := need(ids + extra)
		if err != nil {
			return err
		}
		if v.Root != nil {
			return v.Root(tag, rd.id(p))
		}
		return nil
	}
	for rd.off < end {
		start := rd.off
		p, err := need(1)
		if err != nil {
			return err
		}
		sub := p[0]
		switch sub {
		case RootUnknown, RootStickyClass, RootMonitorUsed, RootInternedString, RootFinalizing,
			RootDebugger, RootReferenceCleanup, RootVMInternal, SubUnreachable:
			err = root(sub, 0)
		case RootJNIGlobal:
			err = root(sub, ids)
		case RootJNILocal, RootJavaFrame, RootJNIMonitor, RootThreadObject:
			err = root(sub, 8)
		case RootNativeStack, RootThreadBlock:
			err = root(sub, 4)
		case SubHeapDumpInfo:
			if p, err = need(4 + ids); err == nil && v.HeapInfo != nil {
				err = v.HeapInfo(binary.BigEndian.Uint32(p), rd.id(p[4:]))
			}
		case SubClassDump:
			err = rd.classDump(need, skip, v)
		case SubInstanceDump:
			if p, err = need(2*ids + 8); err == nil {
				id, class := rd.id(p), rd.id(p[ids+4:])
				size := binary.BigEndian.Uint32(p[2*ids+4:])
				if v.InstanceData != nil {
					err = rd.instanceData(start, end, id, class, size, v)
				} else {
					err = skip(int64(size))
				}
				if err == nil && v.Instance != nil {
					err = v.Instance(id, class, size)
				}
			}
		case SubObjectArrayDump:
			if p, err = need(2*ids + 8); err == nil {
				id := rd.id(p)
				n := binary.BigEndian.Uint32(p[ids+4:])
				class := rd.id(p[ids+8:])
				if v.Elements != nil {
					err = rd.chunks(end, uint64(n)*uint64(ids), func(off uint64, b []byte) error { return v.Elements(id, uint32(off/uint64(ids)), b) }, ids)
				} else {
					err = skip(int64(n) * int64(ids))
				}
				if err == nil && v.ObjectArray != nil {
					err = v.ObjectArray(id, class, n)
				}
			}
		case SubPrimArrayDump, SubPrimArrayNoData:
			if p, err = need(ids + 9); err == nil {
				id := rd.id(p)
				n := binary.BigEndian.Uint32(p[ids+4:])
				t := Type(p[ids+8])
				size := t.Size(ids)
				if size == 0 || t == Object {
					return &FormatError{start, fmt.Sprintf("primitive array of %s", t.Name())}
				}
				switch {
				case sub == SubPrimArrayDump && v.Values != nil:
					err = rd.chunks(end, uint64(n)*uint64(size), func(off uint64, b []byte) error { return v.Values(id, t, off, b) }, size)
				case sub == SubPrimArrayDump:
					err = skip(int64(n) * int64(size))
				}
				if err == nil && v.PrimitiveArray != nil {
					err = v.PrimitiveArray(id, t, n)
				}
			}
		default:
			return &FormatError{start, fmt.Sprintf("unknown heap dump sub-record 0x%02x", sub)}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// instanceData reads an instance's field data and hands it to v.
func (rd *Reader) instanceData(start, end int64, id, class uint64, size uint32, v *Visitor) error {
	if size > MaxInstanceData {
		return &FormatError{start, fmt.Sprintf("instance 0x%x has %d bytes of field data (at most %d read)", id, size, MaxInstanceData)}
	}
	if rd.off+int64(size) > end {
		return &FormatError{rd.off, fmt.Sprintf("instance data of %d bytes runs past its segment's end (offset %d)", size, end)}
	}
	rd.buf = grow(rd.buf, int(size))
	if err := rd.full(rd.buf); err != nil {
		return err
	}
	return v.InstanceData(id, class, rd.buf)
}

// chunks reads n bytes of array data in chunks of whole elements of unit
// bytes and hands each to f with its offset.
func (rd *Reader) chunks(end int64, n uint64, f func(off uint64, b []byte) error, unit int) error {
	if rd.off+int64(n) > end || int64(n) < 0 {
		return &FormatError{rd.off, fmt.Sprintf("array data of %d bytes runs past its segment's end (offset %d)", n, end)}
	}
	step := uint64(64<<10) / uint64(unit) * uint64(unit)
	rd.buf = grow(rd.buf, int(step))
	for off := uint64(0); off < n; off += step {
		b := rd.buf[:min(step, n-off)]
		if err := rd.full(b); err != nil {
			return err
		}
		if err := f(off, b); err != nil {
			return err
		}
	}
	return nil
}

// classDump reads a CLASS DUMP sub-record (its tag read).
func (rd *Reader) classDump(need func(int) ([]byte, error), skip func(int64) error, v *Visitor) error {
	ids := rd.header.IDSize
	p, err := need(7*ids + 8)
	if err != nil {
		return err
	}
	c := &ClassDump{ID: rd.id(p), SuperID: rd.id(p[ids+4:]), LoaderID: rd.id(p[2*ids+4:])}
	c.InstanceSize = binary.BigEndian.Uint32(p[7*ids+4:])
	value := func(t Type) error {
		s := t.Size(ids)
		if s == 0 {
			return &FormatError{rd.off - 1, fmt.Sprintf("field of unknown type %d", byte(t))}
		}
		return skip(int64(s))
	}
	// Constant pool: u2 count, then (u2 index, u1 type, value).
	if p, err = need(2); err != nil {
		return err
	}
	for range binary.BigEndian.Uint16(p) {
		if p, err = need(3); err != nil {
			return err
		}
		if err := value(Type(p[2])); err != nil {
			return err
		}
	}
	// Static fields: u2 count, then (id name, u1 type, value).
	if p, err = need(2); err != nil {
		return err
	}
	for range binary.BigEndian.Uint16(p) {
		if p, err = need(ids + 1); err != nil {
			return err
		}
		name, t := rd.id(p), Type(p[ids])
		if v.ClassDump == nil {
			if err := value(t); err != nil {
				return err
			}
			continue
		}
		s := t.Size(ids)
		if s == 0 {
			return &FormatError{rd.off - 1, fmt.Sprintf("field of unknown type %d", byte(t))}
		}
		if p, err = need(s); err != nil {
			return err
		}
		var x uint64
		for _, c := range p {
			x = x<<8 | uint64(c)
		}
		c.Statics = append(c.Statics, Static{NameID: name, Type: t, Value: x})
	}
	// Instance fields: u2 count, then (id name, u1 type).
	if p, err = need(2); err != nil {
		return err
	}
	n := binary.BigEndian.Uint16(p)
	if v.ClassDump != nil {
		c.Fields = make([]Field, 0, n)
	}
	for range n {
		if p, err = need(ids + 1); err != nil {
			return err
		}
		if t := Type(p[ids]); t.Size(ids) == 0 {
			return &FormatError{rd.off - 1, fmt.Sprintf("instance field of unknown type %d", byte(t))}
		} else if v.ClassDump != nil {
			c.Fields = append(c.Fields, Field{NameID: rd.id(p), Type: t})
		}
	}
	if v.ClassDump != nil {
		return v.ClassDump(c)
	}
	return nil
}

// IsHprof tells, from a file's first bytes, whether it is an hprof dump.
func IsHprof(first []byte) bool {
	return bytes.HasPrefix(first, []byte("JAVA PROFILE 1.0."))
}
