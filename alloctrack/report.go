package alloctrack

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/alloctrack/alloctrack/ddms"
)

// Lengths of the parts of a report as current VMs write them. Larger values
// in a header are accepted and the extra bytes skipped; smaller are refused.
const (
	HeaderLen      = 15
	EntryHeaderLen = 9
	FrameLen       = 8
)

// MaxEntries is the most entries ART 7+ puts in one report; a report with
// this many means older allocations were lost.
const MaxEntries = 65535

// Frame is one stack frame. Class, Method and File index the report's
// tables; Line is -2 for a native method and -1 when unknown.
type Frame struct {
	Class  uint16
	Method uint16
	File   uint16
	Line   int16
}

// Allocation is one entry of a report.
type Allocation struct {
	Size   uint32 // bytes, as on the wire
	Thread uint16 // VM thread id or Linux tid, by Android version
	Class  uint16 // index into Classes: the allocated class
	Depth  uint8  // number of frames
	first  uint32 // index of the first frame in Report.Frames
}

// Report is a parsed REAL payload.
type Report struct {
	// Header fields as sent.
	HeaderLen      int
	EntryHeaderLen int
	FrameLen       int
	DeclaredCount  int // entry_count as sent (0 for a wrapped Dalvik 4.4 buffer)
	StringsOffset  int

	// String tables in dotted form, as ddmlib shows them, and as sent.
	Classes, Methods, Files          []string
	RawClasses, RawMethods, RawFiles []string

	// Allocations in payload order: newest first on ART 7+.
	Allocations []Allocation
	// Frames of every allocation, in order; see Stack.
	Frames []Frame

	// TrailingBytes counts bytes after the file-name table, which this
	// parser (like ddmlib 25) ignores.
	TrailingBytes int
}

// Num is ddmlib's allocation number of the entry at index i: the first
// entry gets the highest number, the last gets 1.
func (r *Report) Num(i int) int { return len(r.Allocations) - i }

// Stack returns the frames of a, top of stack first.
func (r *Report) Stack(a *Allocation) []Frame {
	return r.Frames[a.first : a.first+uint32(a.Depth) : a.first+uint32(a.Depth)]
}

// ClassName is the dotted name of the class a allocated.
func (r *Report) ClassName(a *Allocation) string { return r.Classes[a.Class] }

// Overflowed tells whether the report holds as many entries as ART keeps,
// so older allocations of the window were lost.
func (r *Report) Overflowed() bool { return len(r.Allocations) >= MaxEntries }

// TotalBytes sums the sizes of all allocations.
func (r *Report) TotalBytes() uint64 {
	var n uint64
	for i := range r.Allocations {
		n += uint64(r.Allocations[i].Size)
	}
	return n
}

// ParseError describes a malformed report: what was wrong and where.
type ParseError struct {
	Offset int    // byte offset in the payload
	What   string // what was being read and what was wrong
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("alloctrack: REAL report: %s at offset %d", e.What, e.Offset)
}

func perr(off int, format string, args ...any) error {
	return &ParseError{Offset: off, What: fmt.Sprintf(format, args...)}
}

// Parse decodes a REAL payload. On error it returns nil and a *ParseError;
// it never returns part of a report.
//
//	header (header_len bytes, 15 today)
//	  u8  header_len, u8 entry_header_len, u8 frame_len
//	  u16 entry_count
//	  u32 strings_offset
//	  u16 class_count, u16 method_count, u16 file_count
//	entries, from offset header_len, entry_count times
//	  u32 size, u16 thread, u16 class, u8 depth, (extra bytes)
//	  depth x: u16 class, u16 method, u16 file, s16 line, (extra bytes)
//	string tables at strings_offset: classes, methods, files;
//	  each string: u32 UTF-16 units + UTF-16BE units
func Parse(b []byte) (*Report, error) {
	if len(b) < HeaderLen {
		return nil, perr(0, "header: payload of %d bytes is shorter than the %d-byte header", len(b), HeaderLen)
	}
	r := &Report{
		HeaderLen:      int(b[0]),
		EntryHeaderLen: int(b[1]),
		FrameLen:       int(b[2]),
		DeclaredCount:  int(binary.BigEndian.Uint16(b[3:])),
		StringsOffset:  int(binary.BigEndian.Uint32(b[5:])),
	}
	nClasses := int(binary.BigEndian.Uint16(b[9:]))
	nMethods := int(binary.BigEndian.Uint16(b[11:]))
	nFiles := int(binary.BigEndian.Uint16(b[13:]))
	switch {
	case r.HeaderLen < HeaderLen:
		return nil, perr(0, "header_len %d is less than %d", r.HeaderLen, HeaderLen)
	case r.HeaderLen > len(b):
		return nil, perr(0, "header_len %d is past the end of the payload (length %d)", r.HeaderLen, len(b))
	case r.EntryHeaderLen < EntryHeaderLen:
		return nil, perr(1, "entry_header_len %d is less than %d", r.EntryHeaderLen, EntryHeaderLen)
	case r.FrameLen < FrameLen:
		return nil, perr(2, "frame_len %d is less than %d", r.FrameLen, FrameLen)
	case uint32(r.StringsOffset) < uint32(r.HeaderLen) || uint64(binary.BigEndian.Uint32(b[5:])) > uint64(len(b)):
		return nil, perr(5, "strings_offset %d is outside [header_len %d, payload length %d]",
			binary.BigEndian.Uint32(b[5:]), r.HeaderLen, len(b))
	}

	// String tables.
	off := r.StringsOffset
	var err error
	if r.RawClasses, r.Classes, off, err = readTable(b, off, nClasses, "class"); err != nil {
		return nil, err
	}
	if r.RawMethods, r.Methods, off, err = readTable(b, off, nMethods, "method"); err != nil {
		return nil, err
	}
	if r.RawFiles, r.Files, off, err = readTable(b, off, nFiles, "file"); err != nil {
		return nil, err
	}
	r.TrailingBytes = len(b) - off

	// Pass 1: walk the entries to learn their number and frame count, so
	// that pass 2 allocates exactly what the payload holds.
	n, frames, err := r.walk(b)
	if err != nil {
		return nil, err
	}
	r.Allocations = make([]Allocation, n)
	r.Frames = make([]Frame, frames)

	// Pass 2: decode, checking every table index.
	pos := r.HeaderLen
	fi := uint32(0)
	for i := range r.Allocations {
		e := b[pos : pos+EntryHeaderLen]
		a := &r.Allocations[i]
		a.Size = binary.BigEndian.Uint32(e)
		a.Thread = binary.BigEndian.Uint16(e[4:])
		a.Class = binary.BigEndian.Uint16(e[6:])
		a.Depth = e[8]
		a.first = fi
		if int(a.Class) >= nClasses {
			return nil, perr(pos+6, "entry %d: class index %d out of range (%d class names)", i, a.Class, nClasses)
		}
		pos += r.EntryHeaderLen
		fs := r.Frames[fi : fi+uint32(a.Depth)]
		for j := range fs {
			fb := b[pos : pos+FrameLen]
			f := Frame{
				Class:  binary.BigEndian.Uint16(fb),
				Method: binary.BigEndian.Uint16(fb[2:]),
				File:   binary.BigEndian.Uint16(fb[4:]),
				Line:   int16(binary.BigEndian.Uint16(fb[6:])),
			}
			if int(f.Class) >= nClasses || int(f.Method) >= nMethods || int(f.File) >= nFiles {
				return nil, frameIndexError(pos, i, j, f, nClasses, nMethods, nFiles)
			}
			fs[j] = f
			pos += r.FrameLen
		}
		fi += uint32(a.Depth)
	}
	return r, nil
}

func frameIndexError(pos, i, j int, f Frame, nc, nm, nf int) error {
	switch {
	case int(f.Class) >= nc:
		return perr(pos, "entry %d frame %d: class index %d out of range (%d class names)", i, j, f.Class, nc)
	case int(f.Method) >= nm:
		return perr(pos+2, "entry %d frame %d: method index %d out of range (%d method names)", i, j, f.Method, nm)
	default:
		return perr(pos+4, "entry %d frame %d: file index %d out of range (%d file names)", i, j, f.File, nf)
	}
}

// walk finds how many entries lie between the header and the string tables
// and how many frames they hold. The entries must end exactly where the
// string tables start. When entry_count is too small for them by a multiple
// of 65,536, the u16 count wrapped (Dalvik 4.4 sends 65,536 entries with
// entry_count 0) and the walked number is used.
func (r *Report) walk(b []byte) (entries, frames int, err error) {
	pos, end := r.HeaderLen, r.StringsOffset
	for n := 0; ; n++ {
		if n >= r.DeclaredCount && pos == end {
			if (n-r.DeclaredCount)%65536 != 0 {
				return 0, 0, perr(3, "entry_count %d does not match the %d entries before the string tables at offset %d", r.DeclaredCount, n, end)
			}
			return n, frames, nil
		}
		if pos >= end {
			if n < r.DeclaredCount {
				return 0, 0, perr(pos, "entry %d of %d starts at the string tables (offset %d): entries are truncated", n, r.DeclaredCount, end)
			}
			return 0, 0, perr(pos, "entries overrun the string tables at offset %d", end)
		}
		if end-pos < r.EntryHeaderLen {
			return 0, 0, perr(pos, "entry %d: %d-byte entry header overruns the string tables at offset %d", n, r.EntryHeaderLen, end)
		}
		depth := int(b[pos+8])
		pos += r.EntryHeaderLen + depth*r.FrameLen
		if pos > end {
			return 0, 0, perr(pos-depth*r.FrameLen, "entry %d: %d frames of %d bytes overrun the string tables at offset %d", n, depth, r.FrameLen, end)
		}
		frames += depth
	}
}

// readTable reads count strings starting at off and returns them raw and in
// dotted form, and the offset after them.
func readTable(b []byte, off, count int, what string) (raw, dotted []string, next int, err error) {
	if count*4 > len(b)-off {
		return nil, nil, 0, perr(off, "%s name table: %d strings need at least %d bytes, %d left", what, count, count*4, len(b)-off)
	}
	raw = make([]string, count)
	dotted = make([]string, count)
	for i := range raw {
		if len(b)-off < 4 {
			return nil, nil, 0, perr(off, "%s name %d: length truncated (%d bytes left)", what, i, len(b)-off)
		}
		n := uint64(binary.BigEndian.Uint32(b[off:]))
		if n*2 > uint64(len(b)-off-4) {
			return nil, nil, 0, perr(off, "%s name %d: %d UTF-16 units run past the end of the payload (%d bytes left)", what, i, n, len(b)-off-4)
		}
		s := ddms.DecodeUTF16(b[off+4 : off+4+int(n)*2])
		raw[i] = s
		dotted[i] = DescriptorToDot(s)
		off += 4 + int(n)*2
	}
	return raw, dotted, off, nil
}

// DescriptorToDot converts a VM type descriptor to the dotted form ddmlib
// shows, exactly as ddmlib's AllocationsParser does: one "[]" per leading
// '[', "Lpkg/Name;" to "pkg.Name", and a lone primitive code (Z B C S I J F D)
// to its Java name. ddmlib applies it to every string of all three tables,
// so a method named "I" becomes "int"; so does this.
func DescriptorToDot(s string) string {
	dims := 0
	for dims < len(s) && s[dims] == '[' {
		dims++
	}
	t := s[dims:]
	if n := len(t); n >= 2 && t[0] == 'L' && t[n-1] == ';' {
		t = strings.ReplaceAll(t[1:n-1], "/", ".")
	} else if len(t) == 1 {
		switch t[0] {
		case 'C':
			t = "char"
		case 'B':
			t = "byte"
		case 'Z':
			t = "boolean"
		case 'S':
			t = "short"
		case 'I':
			t = "int"
		case 'J':
			t = "long"
		case 'F':
			t = "float"
		case 'D':
			t = "double"
		}
	}
	if dims == 0 {
		return t
	}
	return t + strings.Repeat("[]", dims)
}
