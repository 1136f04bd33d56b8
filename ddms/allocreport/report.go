package allocreport

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
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
	off    uint32 // offset of the first frame in Report.frames
}

// Report is a parsed REAL payload. Frames are not copied out of the payload:
// a parsed Report refers to the payload's bytes, which must not be changed
// while the Report is in use.
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

	// TrailingBytes counts bytes after the file-name table, which this
	// parser (like ddmlib 25) ignores.
	TrailingBytes int
	// GapBytes counts bytes between the last entry and strings_offset
	// that are not entries (see Parse), which this parser (like ddmlib 25)
	// skips.
	GapBytes int

	nums   []int32 // ddmlib numbers when the report is a filtered subset
	frames []byte  // frame bytes in wire layout: the payload, or built ones
	stride int     // bytes per frame in frames; 0 means FrameLen
	nFrame int     // number of frames of all allocations
}

// Stack is the frames of one allocation, top of stack first. It reads them
// from the report's bytes on demand.
type Stack struct {
	b      []byte
	stride int
}

// Len is the number of frames.
func (s Stack) Len() int { return len(s.b) / s.stride }

// Wire returns the stack's frames as they stand in the payload, stride
// bytes each, the first FrameLen of which are class, method, file and
// line (big-endian). Two stacks with equal bytes and stride are the same
// frames. The bytes are the report's: read them, never change them.
func (s Stack) Wire() (b []byte, stride int) { return s.b, s.stride }

// At returns frame j.
func (s Stack) At(j int) Frame {
	p := s.b[j*s.stride:]
	v := binary.BigEndian.Uint64(p)
	return Frame{Class: uint16(v >> 48), Method: uint16(v >> 32), File: uint16(v >> 16), Line: int16(v)}
}

// All iterates over the frames with their positions.
func (s Stack) All() iter.Seq2[int, Frame] {
	return func(yield func(int, Frame) bool) {
		for j := range s.Len() {
			if !yield(j, s.At(j)) {
				return
			}
		}
	}
}

// Frames returns the frames as a new slice.
func (s Stack) Frames() []Frame {
	out := make([]Frame, s.Len())
	for j := range out {
		out[j] = s.At(j)
	}
	return out
}

// Num is ddmlib's allocation number of the entry at index i: the first
// entry gets the highest number, the last gets 1.
func (r *Report) Num(i int) int {
	if r.nums != nil {
		return int(r.nums[i])
	}
	return len(r.Allocations) - i
}

// Filter returns a report holding the allocations keep accepts, sharing
// r's tables and frame bytes. Allocation numbers stay those of r.
func (r *Report) Filter(keep func(r *Report, i int) bool) *Report {
	out := *r
	out.Allocations = nil
	out.nums = nil
	out.nFrame = 0
	for i := range r.Allocations {
		if keep(r, i) {
			out.Allocations = append(out.Allocations, r.Allocations[i])
			out.nums = append(out.nums, int32(r.Num(i)))
			out.nFrame += int(r.Allocations[i].Depth)
		}
	}
	return &out
}

func (r *Report) frameStride() int {
	if r.stride == 0 {
		return FrameLen
	}
	return r.stride
}

// Stack returns the frames of a.
func (r *Report) Stack(a *Allocation) Stack {
	st := r.frameStride()
	end := int(a.off) + int(a.Depth)*st
	return Stack{b: r.frames[a.off:end:end], stride: st}
}

// FrameCount is the number of frames of all allocations.
func (r *Report) FrameCount() int { return r.nFrame }

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

// Append adds an allocation whose frames index r's tables, as a VM or a
// simulator builds a report. It does not check the indices; Encode and
// Parse do what checking there is. It must not be used on a parsed Report.
func (r *Report) Append(size uint32, thread uint16, class uint16, frames []Frame) {
	if len(frames) > 255 {
		frames = frames[:255]
	}
	r.Allocations = append(r.Allocations, Allocation{
		Size:   size,
		Thread: thread,
		Class:  class,
		Depth:  uint8(len(frames)),
		off:    uint32(len(r.frames)),
	})
	for _, f := range frames {
		r.frames = binary.BigEndian.AppendUint64(r.frames,
			uint64(f.Class)<<48|uint64(f.Method)<<32|uint64(f.File)<<16|uint64(uint16(f.Line)))
	}
	r.nFrame += len(frames)
}

// ParseError describes a malformed report: what was wrong and where.
type ParseError struct {
	Offset int    // byte offset in the payload
	What   string // what was being read and what was wrong
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("REAL report: %s at offset %d", e.What, e.Offset)
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
//	(a gap, or, when entry_count wrapped, more entries)
//	string tables at strings_offset: classes, methods, files;
//	  each string: u32 UTF-16 units + UTF-16BE units
//
// The first entry_count entries must be whole and end at or before
// strings_offset. Bytes after them and before strings_offset are more
// entries only when they are exactly a multiple of 65,536 whole entries
// ending at strings_offset (Dalvik 4.4's wrapped u16 count); otherwise they
// are a gap, skipped as ddmlib 25.2.2 skips it and counted in GapBytes.
func Parse(b []byte) (*Report, error) { return ParseReusing(b, nil) }

// ParseReusing is Parse, storing the allocations in allocs' array when it
// is large enough (allocs' contents do not matter). A daemon that parses a
// report every window passes the array of a report it has finished with,
// rather than have each parse allocate and clear up to 1 MiB.
func ParseReusing(b []byte, allocs []Allocation) (*Report, error) {
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

	if err := r.decodeEntries(b, nClasses, nMethods, nFiles, allocs); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeEntries reads the entries between the header and the string
// tables, checking every table index. Frames stay in b.
//
// The rule that separates a gap from a wrapped count: the first
// entry_count entries must be whole and end at or before strings_offset
// (else the report is refused). Bytes left between them and strings_offset
// are read as further entries. If they are exactly k x 65,536 whole entries
// (k >= 1) ending exactly at strings_offset, the u16 entry_count wrapped
// (Dalvik 4.4 sends a full buffer of 65,536 entries with entry_count 0) and
// every entry is kept. Otherwise the bytes are a gap, such as padding a
// future VM may add: they are skipped, as ddmlib 25.2.2 skips them (it
// reads entry_count entries and then jumps to strings_offset), and counted
// in GapBytes.
func (r *Report) decodeEntries(b []byte, nClasses, nMethods, nFiles int, allocs []Allocation) error {
	pos, end := r.HeaderLen, r.StringsOffset
	ehl, fl := r.EntryHeaderLen, r.FrameLen
	// A payload cannot hold more entries than its bytes allow.
	if n := min(r.DeclaredCount, (end-pos)/ehl); cap(allocs) >= n && allocs != nil {
		r.Allocations = allocs[:0]
	} else {
		r.Allocations = make([]Allocation, 0, n)
	}
	r.frames, r.stride = b, fl
	nc, nm, nf := uint64(nClasses), uint64(nMethods), uint64(nFiles)
	frames := 0
	// Where the declared entries end, once read: past it, anything that
	// is not whole entries up to a wrapped count is a gap.
	declEnd, declFrames := -1, 0
	if r.DeclaredCount == 0 {
		declEnd = pos
	}
	gap := func() error {
		r.Allocations = r.Allocations[:r.DeclaredCount:r.DeclaredCount]
		r.GapBytes = end - declEnd
		r.nFrame = declFrames
		return nil
	}
	// The current layout, with no empty table, has a faster reader.
	fast := ehl == EntryHeaderLen && fl == FrameLen && nClasses > 0 && nMethods > 0 && nFiles > 0
	for n := 0; ; n++ {
		if fast {
			// Whole valid entries in the current layout, read by a tight
			// loop; it stops at anything else, which the code below
			// reads again and decides on.
			lim := r.DeclaredCount
			if n >= lim {
				lim = math.MaxInt
			}
			if n < lim {
				var f int
				r.Allocations, pos, f = walkEntries(r.Allocations, b[:end], pos, lim-n, nClasses, nMethods, nFiles)
				frames += f
				n = len(r.Allocations)
				if n == r.DeclaredCount && declEnd < 0 {
					declEnd, declFrames = pos, frames
				}
			}
		}
		if pos == end && n >= r.DeclaredCount {
			if (n-r.DeclaredCount)%65536 != 0 {
				return gap()
			}
			break
		}
		if pos >= end {
			return perr(pos, "entry %d of %d starts at the string tables (offset %d): entries are truncated", n, r.DeclaredCount, end)
		}
		if end-pos < ehl {
			if declEnd >= 0 {
				return gap()
			}
			return perr(pos, "entry %d: %d-byte entry header overruns the string tables at offset %d", n, ehl, end)
		}
		e := b[pos : pos+EntryHeaderLen]
		a := Allocation{
			Size:   binary.BigEndian.Uint32(e),
			Thread: binary.BigEndian.Uint16(e[4:]),
			Class:  binary.BigEndian.Uint16(e[6:]),
			Depth:  e[8],
		}
		if uint64(a.Class) >= nc {
			if declEnd >= 0 {
				return gap()
			}
			return perr(pos+6, "entry %d: class index %d out of range (%d class names)", n, a.Class, nClasses)
		}
		fpos := pos + ehl
		a.off = uint32(fpos)
		if int(a.Depth)*fl > end-fpos {
			if declEnd >= 0 {
				return gap()
			}
			return perr(fpos, "entry %d: %d frames of %d bytes overrun the string tables at offset %d", n, a.Depth, fl, end)
		}
		fb := b[fpos : fpos+int(a.Depth)*fl]
		if fl == FrameLen {
			// The common layout: a tighter loop the compiler checks less.
			for j := 0; j+8 <= len(fb); j += 8 {
				v := binary.BigEndian.Uint64(fb[j : j+8])
				if v>>48 >= nc || (v>>32)&0xffff >= nm || (v>>16)&0xffff >= nf {
					if declEnd >= 0 {
						return gap()
					}
					return frameIndexError(fpos+j, n, j/fl, v, nClasses, nMethods, nFiles)
				}
			}
		} else {
			for j := 0; j+FrameLen <= len(fb); j += fl {
				v := binary.BigEndian.Uint64(fb[j:])
				if v>>48 >= nc || (v>>32)&0xffff >= nm || (v>>16)&0xffff >= nf {
					if declEnd >= 0 {
						return gap()
					}
					return frameIndexError(fpos+j, n, j/fl, v, nClasses, nMethods, nFiles)
				}
			}
		}
		pos = fpos + len(fb)
		frames += int(a.Depth)
		r.Allocations = append(r.Allocations, a)
		if n+1 == r.DeclaredCount {
			declEnd, declFrames = pos, frames
		}
	}
	r.nFrame = frames
	return nil
}

// walkChunk is how many entries walkEntries reads before it checks their
// frames: about 35 KB of a maximum report, still in the core's caches when
// checkFrames reads them again.
const walkChunk = 256

// walkEntries appends up to max entries read from b at pos, for the
// current layout (9-byte entry headers, 8-byte frames). It stops before an
// entry that is not whole within b or has an index out of range, and
// returns the position after the last entry it read and how many frames
// those entries had. The caller reads the entry it stopped at again and
// decides what it is.
//
// Entry headers are read a chunk at a time, then checkFrames checks the
// chunk's frames. nc, nm and nf must not be 0.
func walkEntries(dst []Allocation, b []byte, pos, max int, nc, nm, nf int) ([]Allocation, int, int) {
	lim := frameLimits(nc, nm, nf)
	frames := 0
	for max > 0 {
		start, startPos, chunkFrames := len(dst), pos, 0
		whole := true
		for n := min(max, walkChunk); n > 0; n-- {
			if len(b)-pos < EntryHeaderLen {
				whole = false
				break
			}
			h := binary.BigEndian.Uint64(b[pos:])
			depth := int(b[pos+8])
			fpos := pos + EntryHeaderLen
			if int(uint16(h)) >= nc || depth*FrameLen > len(b)-fpos {
				whole = false
				break
			}
			// Fields are stored one by one: the compiler builds a
			// five-field struct literal in memory and copies it, which
			// made appending it cost four times as much.
			k := len(dst)
			if k == cap(dst) {
				dst = slices.Grow(dst, 1)
			}
			dst = dst[:k+1]
			e := &dst[k]
			e.Size, e.Thread, e.Class, e.Depth, e.off = uint32(h>>32), uint16(h>>16), uint16(h), uint8(depth), uint32(fpos)
			pos = fpos + depth*FrameLen
			chunkFrames += depth
		}
		if bad := checkFrames(unsafe.SliceData(b), dst[start:], &lim); bad >= 0 {
			// Stop before the entry with the bad frame.
			pos = startPos
			for _, a := range dst[start : start+bad] {
				pos += EntryHeaderLen + int(a.Depth)*FrameLen
				frames += int(a.Depth)
			}
			return dst[:start+bad], pos, frames
		}
		frames += chunkFrames
		max -= len(dst) - start
		if !whole {
			break
		}
	}
	return dst, pos, frames
}

// frameLimits is the highest valid index of each field of a frame, as
// checkFrames wants them: class, method, file, then the line (any value),
// twice. nc, nm and nf must not be 0.
func frameLimits(nc, nm, nf int) [8]uint16 {
	l := [4]uint16{uint16(nc - 1), uint16(nm - 1), uint16(nf - 1), 0xffff}
	return [8]uint16{l[0], l[1], l[2], l[3], l[0], l[1], l[2], l[3]}
}

// checkFramesGo is checkFrames in Go, for every architecture: each
// entry's frames at base+off must have every index at or below its limit.
// It returns the index in allocs of the first entry with a frame that does
// not, or -1.
//
// A frame's indices are checked without a branch each: class and file sit
// in the 32-bit lanes of (v>>16)&laneMask, the method in the upper lane of
// v&laneMask (the line in its lower lane, with nothing added). Adding
// 0xffff-limit to a lane sets the lane's bit 16 when the index is above
// the limit. The sums of an entry's frames are ORed together and looked at
// once per entry.
func checkFramesGo(base *byte, allocs []Allocation, lim *[8]uint16) int {
	const (
		laneMask     = 0x0000ffff0000ffff
		overflowBits = 1<<48 | 1<<16
	)
	kCF := uint64(0xffff-lim[0])<<32 | uint64(0xffff-lim[2])
	kM := uint64(0xffff-lim[1]) << 32
	for i := range allocs {
		a := &allocs[i]
		p := unsafe.Add(unsafe.Pointer(base), a.off)
		var acc uint64
		for j := range int(a.Depth) {
			v := bits.ReverseBytes64(*(*uint64)(unsafe.Add(p, j*FrameLen)))
			acc |= ((v>>16)&laneMask + kCF) | (v&laneMask + kM)
		}
		if acc&overflowBits != 0 {
			return i
		}
	}
	return -1
}

func frameIndexError(pos, i, j int, v uint64, nc, nm, nf int) error {
	f := Frame{Class: uint16(v >> 48), Method: uint16(v >> 32), File: uint16(v >> 16)}
	switch {
	case int(f.Class) >= nc:
		return perr(pos, "entry %d frame %d: class index %d out of range (%d class names)", i, j, f.Class, nc)
	case int(f.Method) >= nm:
		return perr(pos+2, "entry %d frame %d: method index %d out of range (%d method names)", i, j, f.Method, nm)
	default:
		return perr(pos+4, "entry %d frame %d: file index %d out of range (%d file names)", i, j, f.File, nf)
	}
}

// readTable reads count strings starting at off and returns them raw and in
// dotted form, and the offset after them. The strings of a table share
// two allocations (raw and dotted text) and never the payload's bytes, so
// the payload may be reused once the report is no longer needed.
func readTable(b []byte, off, count int, what string) (raw, dotted []string, next int, err error) {
	if count*4 > len(b)-off {
		return nil, nil, 0, perr(off, "%s name table: %d strings need at least %d bytes, %d left", what, count, count*4, len(b)-off)
	}
	// Find the table's end first, checking every length.
	end := off
	for i := range count {
		if len(b)-end < 4 {
			return nil, nil, 0, perr(end, "%s name %d: length truncated (%d bytes left)", what, i, len(b)-end)
		}
		n := uint64(binary.BigEndian.Uint32(b[end:]))
		if n*2 > uint64(len(b)-end-4) {
			return nil, nil, 0, perr(end, "%s name %d: %d UTF-16 units run past the end of the payload (%d bytes left)", what, i, n, len(b)-end-4)
		}
		end += 4 + int(n)*2
	}
	if count == 0 {
		return nil, nil, end, nil
	}
	// UTF-8 text of every string, end to end, then one string of it. A
	// UTF-16 unit takes at most 3 bytes of UTF-8; the buffer starts at 1.5
	// bytes a unit and grows, if it must, before a string that might not
	// fit.
	units := (end - off - 4*count) / 2
	ends := make([]int32, count)
	text := make([]byte, units+units/2+16)
	k := 0
	for i, p := 0, off; i < count; i++ {
		n := int(binary.BigEndian.Uint32(b[p:]))
		if len(text)-k < 3*n+4 {
			text = append(text[:k], make([]byte, max(3*n+4, len(text)))...)
			text = text[:cap(text)]
		}
		k = putUTF16(text, k, b[p+4:p+4+2*n])
		ends[i] = int32(k)
		p += 4 + 2*n
	}
	text = text[:k]
	// text is never written again: its strings can share it.
	all := unsafe.String(unsafe.SliceData(text), len(text))
	raw = make([]string, count)
	start := 0
	for i, e := range ends {
		raw[i] = all[start:e]
		start = int(e)
	}
	// The dotted table shares raw's array unless a name changes (method
	// and file tables seldom have one that does).
	dotted = raw
	var dots []byte
	var dotEnds []int32 // end in dots of each changed string; -1 unchanged
	for i, s := range raw {
		d, ok := dotForm(s)
		if !ok {
			continue
		}
		if dotEnds == nil {
			dotted = slices.Clone(raw)
			// Room for the rest of the table, dotted; a few array names
			// grow ("[I" is "int[]").
			dots = make([]byte, 0, len(text)-int(ends[i])+len(s)+64)
			dotEnds = make([]int32, count)
			for j := range dotEnds {
				dotEnds[j] = -1
			}
		}
		if d != "" {
			dotted[i] = d // a primitive's name: a constant
			continue
		}
		dots = appendDotted(dots, s)
		dotEnds[i] = int32(len(dots))
	}
	if dotEnds != nil {
		allDots := unsafe.String(unsafe.SliceData(dots), len(dots))
		start := 0
		for i, e := range dotEnds {
			if e >= 0 {
				dotted[i] = allDots[start:e]
				start = int(e)
			}
		}
	}
	return raw, dotted, end, nil
}

// putUTF16 writes UTF-16BE units as UTF-8 into dst at k, as
// string(utf16.Decode) would (surrogate pairs joined, a lone surrogate as
// U+FFFD), and returns the position after them. dst must have room for 3
// bytes a unit and 4 more (whole 32-bit words are written); that is
// checked once, and the loop then reads and writes without bounds checks.
func putUTF16(dst []byte, k int, b []byte) int {
	n := len(b) / 2
	if k < 0 || len(dst)-k < 3*n+4 {
		panic("alloctrack: putUTF16: no room for the text")
	}
	src := unsafe.Pointer(unsafe.SliceData(b))
	out := unsafe.Pointer(unsafe.SliceData(dst[k:]))
	o := uintptr(0)
	i := 0
	// ASCII, four units at a time: the low bytes of the four units, packed
	// into one 32-bit big-endian word.
	for ; i+4 <= n; i += 4 {
		v := bits.ReverseBytes64(*(*uint64)(unsafe.Add(src, 2*i)))
		if v&0xff80ff80ff80ff80 != 0 {
			break
		}
		v = (v | v>>8) & 0x0000ffff0000ffff
		*(*uint32)(unsafe.Add(out, o)) = bits.ReverseBytes32(uint32(v | v>>16))
		o += 4
	}
	for ; i < n; i++ {
		u := uint32(bits.ReverseBytes16(*(*uint16)(unsafe.Add(src, 2*i))))
		if u-0xd800 < 0x800 {
			// A surrogate: joined with the next unit if they pair.
			if u < 0xdc00 && i+1 < n {
				if u2 := uint32(bits.ReverseBytes16(*(*uint16)(unsafe.Add(src, 2*i+2)))); u2-0xdc00 < 0x400 {
					r := 0x10000 + (u-0xd800)<<10 + (u2 - 0xdc00)
					*(*uint32)(unsafe.Add(out, o)) = 0xf0 | r>>18 |
						(0x80|r>>12&0x3f)<<8 | (0x80|r>>6&0x3f)<<16 | (0x80|r&0x3f)<<24
					o += 4
					i++
					continue
				}
			}
			u = utf8.RuneError
		}
		// One, two or three bytes, chosen without a branch (names mix
		// ASCII and other letters unpredictably), written as one
		// little-endian word.
		w, l := u, uintptr(1)
		if u >= 0x80 {
			w, l = 0xc0|u>>6|(0x80|u&0x3f)<<8, 2
		}
		if u >= 0x800 {
			w, l = 0xe0|u>>12|(0x80|u>>6&0x3f)<<8|(0x80|u&0x3f)<<16, 3
		}
		*(*uint32)(unsafe.Add(out, o)) = w
		o += l
	}
	return k + int(o)
}

// dotForm tells whether DescriptorToDot changes s; if it turns s into a
// primitive type's name, that name.
func dotForm(s string) (name string, changed bool) {
	dims := 0
	for dims < len(s) && s[dims] == '[' {
		dims++
	}
	t := s[dims:]
	if n := len(t); n >= 2 && t[0] == 'L' && t[n-1] == ';' {
		return "", true
	}
	if len(t) == 1 && strings.IndexByte("CBZSIJFD", t[0]) >= 0 {
		if dims == 0 {
			return primitiveName(t), true
		}
		return "", true
	}
	return "", dims > 0
}

// appendDotted appends DescriptorToDot(s).
func appendDotted(dst []byte, s string) []byte {
	dims := 0
	for dims < len(s) && s[dims] == '[' {
		dims++
	}
	t := s[dims:]
	switch n := len(t); {
	case n >= 2 && t[0] == 'L' && t[n-1] == ';':
		dst = appendSlashToDot(dst, t[1:n-1])
	case n == 1:
		dst = append(dst, primitiveName(t)...)
	default:
		dst = append(dst, t...)
	}
	for range dims {
		dst = append(dst, "[]"...)
	}
	return dst
}

// appendSlashToDot appends s with every '/' replaced by '.'. Names have a
// slash every few bytes, so rather than search for each, it copies eight
// bytes at a time and replaces the slashes of each word without a branch.
func appendSlashToDot(dst []byte, s string) []byte {
	start := len(dst)
	dst = slices.Grow(dst, len(s))[:start+len(s)]
	out := dst[start:]
	in := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	i := 0
	for ; i+8 <= len(in); i += 8 {
		v := binary.LittleEndian.Uint64(in[i:])
		binary.LittleEndian.PutUint64(out[i:], slashToDot8(v))
	}
	for ; i < len(in); i++ {
		c := in[i]
		if c == '/' {
			c = '.'
		}
		out[i] = c
	}
	return dst
}

// slashToDot8 replaces each byte 0x2F ('/') of v with 0x2E ('.'). A byte
// of x = v ^ 0x2F… is zero exactly where v has a slash; for each such
// byte, 1 is subtracted from v's byte (0x2F - 1 = 0x2E), which never
// borrows from its neighbour.
func slashToDot8(v uint64) uint64 {
	const lo7, hi = 0x7f7f7f7f7f7f7f7f, 0x8080808080808080
	x := v ^ 0x2f2f2f2f2f2f2f2f
	// Bit 7 of a byte of t is set unless the byte of x is zero.
	t := ((x & lo7) + lo7) | x
	return v - (^t&hi)>>7
}

// primitiveName is the Java name of a one-letter type code, or t itself.
func primitiveName(t string) string {
	switch t {
	case "C":
		return "char"
	case "B":
		return "byte"
	case "Z":
		return "boolean"
	case "S":
		return "short"
	case "I":
		return "int"
	case "J":
		return "long"
	case "F":
		return "float"
	case "D":
		return "double"
	}
	return t
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

// FrameString formats f as "pkg.Class.method(File.java:12)", with
// "Native Method" and "Unknown Source" as Java prints them.
func (r *Report) FrameString(f Frame) string {
	var b strings.Builder
	b.WriteString(r.Classes[f.Class])
	b.WriteByte('.')
	b.WriteString(r.Methods[f.Method])
	b.WriteByte('(')
	switch {
	case f.Line == -2:
		b.WriteString("Native Method")
	case r.Files[f.File] == "":
		b.WriteString("Unknown Source")
	default:
		b.WriteString(r.Files[f.File])
		if f.Line >= 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(int(f.Line)))
		}
	}
	b.WriteByte(')')
	return b.String()
}
