package hprof

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// ConvertStandard writes an Android dump ("JAVA PROFILE 1.0.3") read from
// r to w in the standard "JAVA PROFILE 1.0.2" that MAT and the JDK's tools
// open, byte for byte as Android's hprof-conv writes it
// (dalvik/tools/hprof-conv/HprofConv.c):
//
//   - the version string's last digit becomes 2; the id size and time are
//     copied;
//   - every record but HEAP DUMP and HEAP DUMP SEGMENT is copied as it is;
//     each of those keeps its tag and time and gets its new length, even
//     when nothing is left in it;
//   - in them, HEAP DUMP INFO (0xFE) is dropped; the roots 0x89 interned
//     string, 0x8A, 0x8B debugger, 0x8C, 0x8D VM internal and 0x90 become
//     ROOT UNKNOWN (0xFF) with their id; 0x8E JNI monitor becomes ROOT
//     UNKNOWN with its id, its thread serial and frame dropped;
//     PRIMITIVE ARRAY NODATA (0xC3) becomes PRIMITIVE ARRAY DUMP (0x23)
//     with its stack serial zeroed and still no values (as hprof-conv does;
//     ART never writes 0xC3);
//   - with appOnly (hprof-conv -z), the instances and arrays that follow a
//     HEAP DUMP INFO of the zygote ('Z') or image ('I') heap, up to the
//     next HEAP DUMP INFO or the end of the segment, are dropped; their
//     classes and roots stay.
//
// hprof-conv assumes 4-byte ids; this reads the id size from the header.
// r is read twice per heap dump segment (to learn the segment's new
// length before writing it), so memory stays bounded whatever the
// segments' sizes.
func ConvertStandard(r io.ReadSeeker, w io.Writer, appOnly bool) error {
	c := &converter{r: r, br: bufio.NewReaderSize(r, 64<<10), mem: bufio.NewReaderSize(nil, 64<<10), w: bufio.NewWriterSize(w, 64<<10), standard: true, appOnly: appOnly}
	if err := c.run(); err != nil {
		return err
	}
	return c.w.Flush()
}

// ArrayAction is what Rewrite does with a primitive array.
type ArrayAction uint8

const (
	ArrayKeep  ArrayAction = iota // as it is
	ArrayEmpty                    // written with no elements: its values are dropped
	ArrayDrop                     // left out
)

// Edit says how Rewrite changes a dump. Rewrite reads each segment twice
// and asks both times: the answers must be the same.
type Edit struct {
	// Array decides for each primitive array (nil: keep every one).
	Array func(id uint64, t Type, n uint32) ArrayAction
	// Instance may change an instance's field data in place (nil: none).
	Instance func(id, classID uint64, data []byte)
}

// Rewrite copies the dump r to w, in its own format, with the changes e
// makes to primitive arrays and instances; everything else is copied as
// it is, and each heap dump segment gets its new length. Like
// ConvertStandard it reads each segment twice and keeps nothing of the
// dump in memory.
func Rewrite(r io.ReadSeeker, w io.Writer, e Edit) error {
	c := &converter{r: r, br: bufio.NewReaderSize(r, 64<<10), mem: bufio.NewReaderSize(nil, 64<<10), w: bufio.NewWriterSize(w, 64<<10), edit: e}
	if err := c.run(); err != nil {
		return err
	}
	return c.w.Flush()
}

// maxBuffered is the largest heap dump segment converted from memory.
var maxBuffered int64 = 16 << 20

type converter struct {
	r        io.ReadSeeker
	br       *bufio.Reader // file, or mem while a segment is in memory
	mem      *bufio.Reader
	memr     bytes.Reader
	seg      []byte
	off      int64
	w        *bufio.Writer
	ids      int
	standard bool // ConvertStandard; else Rewrite with edit
	appOnly  bool
	edit     Edit
	scratch  []byte
	size     int64  // of the whole dump
	data     []byte // an instance's field data, for edit.Instance
}

func (c *converter) full(b []byte) error {
	n, err := io.ReadFull(c.br, b)
	c.off += int64(n)
	if err != nil {
		return &FormatError{c.off, fmt.Sprintf("truncated: %d more bytes expected", len(b)-n)}
	}
	return nil
}

func (c *converter) run() error {
	size, err := c.r.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if _, err := c.r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	c.size = size
	c.br.Reset(c.r)
	v, err := c.br.ReadSlice(0)
	if err != nil {
		return &FormatError{0, "no NUL-terminated version string: not an hprof file"}
	}
	c.off = int64(len(v))
	version := string(v[:len(v)-1])
	switch {
	case !c.standard && IsHprof(v):
		c.w.Write(v)
	case version == "JAVA PROFILE 1.0.3":
		c.w.WriteString("JAVA PROFILE 1.0.2\x00")
	case version == "JAVA PROFILE 1.0.2":
		return &FormatError{0, "already in the standard 1.0.2 format"}
	default:
		return &FormatError{0, fmt.Sprintf("version %q: not an Android (1.0.3) dump", truncate(version, 40))}
	}
	var h [12]byte
	if err := c.full(h[:]); err != nil {
		return err
	}
	c.ids = int(binary.BigEndian.Uint32(h[:4]))
	if c.ids != 4 && c.ids != 8 {
		return &FormatError{c.off - 12, fmt.Sprintf("identifier size %d (want 4 or 8)", c.ids)}
	}
	c.w.Write(h[:])
	for {
		var rh [9]byte
		start := c.off
		n, err := io.ReadFull(c.br, rh[:])
		c.off += int64(n)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &FormatError{start, "truncated record header"}
		}
		length := int64(binary.BigEndian.Uint32(rh[5:]))
		if c.off+length > c.size {
			return &FormatError{start, fmt.Sprintf("truncated: record 0x%02x of %d bytes runs past the end of the dump (%d bytes)", rh[0], length, c.size)}
		}
		if rh[0] != TagHeapDump && rh[0] != TagHeapDumpSegment {
			c.w.Write(rh[:])
			m, err := io.CopyN(c.w, c.br, length)
			c.off += m
			if err != nil {
				return &FormatError{c.off, fmt.Sprintf("truncated: record 0x%02x needs %d more bytes", rh[0], length-m)}
			}
			continue
		}
		// First the new length, then the segment itself: a segment of
		// up to maxBuffered bytes (ART writes them of about 4 KiB) is
		// read once into memory and converted twice from there; a larger
		// one is read twice from r.
		body := c.off
		file := c.br
		if length <= maxBuffered {
			c.seg = grow(c.seg, int(length))
			if err := c.full(c.seg); err != nil {
				return err
			}
			c.br = c.mem
		}
		rewind := func() error {
			c.off = body
			if c.br == c.mem {
				c.memr.Reset(c.seg)
				c.mem.Reset(&c.memr)
				return nil
			}
			if _, err := c.r.Seek(body, io.SeekStart); err != nil {
				return err
			}
			c.br.Reset(c.r)
			return nil
		}
		rewind()
		out, err := c.segment(length, nil)
		if err != nil {
			return err
		}
		if err := rewind(); err != nil {
			return err
		}
		binary.BigEndian.PutUint32(rh[5:], uint32(out))
		c.w.Write(rh[:])
		if _, err := c.segment(length, c.w); err != nil {
			return err
		}
		c.br = file
	}
}

// segment converts a heap dump segment of length bytes, writing it to w
// (nil: only counting), and returns the bytes written.
func (c *converter) segment(length int64, w *bufio.Writer) (int64, error) {
	end := c.off + length
	ids := c.ids
	var written int64
	emit := func(b []byte) {
		written += int64(len(b))
		if w != nil {
			w.Write(b)
		}
	}
	need := func(n int) ([]byte, error) {
		if c.off+int64(n) > end {
			return nil, &FormatError{c.off, fmt.Sprintf("sub-record runs past its segment's end (offset %d)", end)}
		}
		c.scratch = grow(c.scratch, n)
		return c.scratch, c.full(c.scratch)
	}
	// bulk copies (or skips) n bytes of values.
	bulk := func(n int64, keep bool) error {
		if n < 0 || c.off+n > end {
			return &FormatError{c.off, fmt.Sprintf("sub-record of %d more bytes runs past its segment's end (offset %d)", n, end)}
		}
		if keep {
			written += n
		}
		var m int64
		var err error
		if keep && w != nil {
			m, err = io.CopyN(w, c.br, n)
		} else {
			var d int
			for m < n && err == nil {
				d, err = c.br.Discard(int(min(n-m, 1<<30)))
				m += int64(d)
			}
		}
		c.off += m
		if err != nil {
			return &FormatError{c.off, fmt.Sprintf("truncated: %d more bytes expected", n-m)}
		}
		return nil
	}
	ignore := false
	for c.off < end {
		start := c.off
		p, err := need(1)
		if err != nil {
			return 0, err
		}
		tag := p[0]
		fixed := func(n int, out byte) error { // tag + n bytes, retagged
			p, err := need(n)
			if err != nil {
				return err
			}
			emit([]byte{out})
			emit(p)
			return nil
		}
		switch tag {
		case RootUnknown, RootStickyClass, RootMonitorUsed:
			err = fixed(ids, tag)
		case RootJNIGlobal:
			err = fixed(2*ids, tag)
		case RootJNILocal, RootJavaFrame, RootThreadObject:
			err = fixed(ids+8, tag)
		case RootNativeStack, RootThreadBlock:
			err = fixed(ids+4, tag)
		case RootInternedString, RootFinalizing, RootDebugger, RootReferenceCleanup, RootVMInternal, SubUnreachable:
			err = fixed(ids, cond(c.standard, RootUnknown, tag))
		case RootJNIMonitor:
			if p, err = need(ids + 8); err == nil && c.standard {
				emit([]byte{RootUnknown})
				emit(p[:ids])
			} else if err == nil {
				emit([]byte{tag})
				emit(p)
			}
		case SubHeapDumpInfo:
			if p, err = need(4 + ids); err == nil {
				heap := binary.BigEndian.Uint32(p)
				ignore = c.appOnly && (heap == 'Z' || heap == 'I')
				if !c.standard {
					emit([]byte{tag})
					emit(p)
				}
			}
		case SubClassDump:
			if p, err = c.classDump(end); err == nil {
				emit([]byte{tag})
				emit(p)
			}
		case SubInstanceDump:
			if p, err = need(2*ids + 8); err == nil {
				if !ignore {
					emit([]byte{tag})
					emit(p)
				}
				size := binary.BigEndian.Uint32(p[2*ids+4:])
				if c.edit.Instance == nil || ignore {
					err = bulk(int64(size), !ignore)
					break
				}
				id, class := c.id(p), c.id(p[ids+4:])
				if size > MaxInstanceData || c.off+int64(size) > end {
					return 0, &FormatError{start, fmt.Sprintf("instance 0x%x has %d bytes of field data (at most %d read, %d left in its segment)", id, size, MaxInstanceData, end-c.off)}
				}
				c.data = grow(c.data, int(size))
				if err = c.full(c.data); err == nil {
					c.edit.Instance(id, class, c.data)
					emit(c.data)
				}
			}
		case SubObjectArrayDump:
			if p, err = need(2*ids + 8); err == nil {
				if !ignore {
					emit([]byte{tag})
					emit(p)
				}
				err = bulk(int64(binary.BigEndian.Uint32(p[ids+4:]))*int64(ids), !ignore)
			}
		case SubPrimArrayDump:
			if p, err = need(ids + 9); err == nil {
				t := Type(p[ids+8])
				if t.Size(ids) == 0 || t == Object {
					return 0, &FormatError{start, fmt.Sprintf("primitive array of %s", t.Name())}
				}
				n := binary.BigEndian.Uint32(p[ids+4:])
				act := ArrayKeep
				if c.edit.Array != nil {
					act = c.edit.Array(c.id(p), t, n)
				}
				keep := !ignore && act != ArrayDrop
				if keep {
					if act == ArrayEmpty {
						clear(p[ids+4 : ids+8])
					}
					emit([]byte{tag})
					emit(p)
				}
				err = bulk(int64(n)*int64(t.Size(ids)), keep && act == ArrayKeep)
			}
		case SubPrimArrayNoData:
			if p, err = need(ids + 9); err == nil && !c.standard {
				emit([]byte{tag})
				emit(p)
			} else if err == nil {
				clear(p[ids : ids+4]) // the stack serial
				emit([]byte{SubPrimArrayDump})
				emit(p)
			}
		default:
			return 0, &FormatError{start, fmt.Sprintf("unknown heap dump sub-record 0x%02x", tag)}
		}
		if err != nil {
			return 0, err
		}
	}
	return written, nil
}

func (c *converter) id(b []byte) uint64 { return ID(b, c.ids) }

func cond[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
}

// classDump reads the CLASS DUMP at the reader (its tag read) into
// c.scratch, field by field, and returns it.
func (c *converter) classDump(end int64) ([]byte, error) {
	ids := c.ids
	buf := c.scratch[:0]
	read := func(n int) ([]byte, error) {
		if c.off+int64(n) > end {
			return nil, &FormatError{c.off, fmt.Sprintf("class dump runs past its segment's end (offset %d)", end)}
		}
		start := len(buf)
		buf = slices.Grow(buf, n)[:start+n]
		if err := c.full(buf[start:]); err != nil {
			return nil, err
		}
		return buf[start:], nil
	}
	value := func(t Type) error {
		s := t.Size(ids)
		if s == 0 {
			return &FormatError{c.off - 1, fmt.Sprintf("field of unknown type %d", byte(t))}
		}
		_, err := read(s)
		return err
	}
	if _, err := read(7*ids + 8); err != nil {
		return nil, err
	}
	p, err := read(2)
	if err != nil {
		return nil, err
	}
	for range binary.BigEndian.Uint16(p) { // constant pool: u2 index, u1 type, value
		if p, err = read(3); err != nil {
			return nil, err
		}
		if err := value(Type(p[2])); err != nil {
			return nil, err
		}
	}
	if p, err = read(2); err != nil {
		return nil, err
	}
	for range binary.BigEndian.Uint16(p) { // statics: id, u1 type, value
		if p, err = read(ids + 1); err != nil {
			return nil, err
		}
		if err := value(Type(p[ids])); err != nil {
			return nil, err
		}
	}
	if p, err = read(2); err != nil {
		return nil, err
	}
	if _, err := read(int(binary.BigEndian.Uint16(p)) * (ids + 1)); err != nil {
		return nil, err
	}
	c.scratch = buf
	return buf, nil
}
