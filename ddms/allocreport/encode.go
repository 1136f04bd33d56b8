package allocreport

import (
	"encoding/binary"
	"fmt"

	"github.com/alloctrack/alloctrack/ddms"
)

// Encode writes r in the layout ART writes: a 15-byte header, 9-byte entry
// headers and 8-byte frames (r's own header lengths are not kept), then the
// raw string tables (the dotted ones when a raw table is nil). entry_count
// is the number of allocations modulo 65,536, as a VM writes it.
func Encode(r *Report) ([]byte, error) {
	classes, methods, files := pick(r.RawClasses, r.Classes), pick(r.RawMethods, r.Methods), pick(r.RawFiles, r.Files)
	for _, t := range []struct {
		name string
		n    int
	}{{"class", len(classes)}, {"method", len(methods)}, {"file", len(files)}} {
		if t.n > 0xffff {
			return nil, fmt.Errorf("alloctrack: encode: %d %s names do not fit a u16 count", t.n, t.name)
		}
	}
	size := HeaderLen + len(r.Allocations)*EntryHeaderLen + r.nFrame*FrameLen
	strOff := size
	for _, t := range [][]string{classes, methods, files} {
		for _, s := range t {
			size += 4 + 2*ddms.UTF16Len(s)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, HeaderLen, EntryHeaderLen, FrameLen)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Allocations)))
	b = binary.BigEndian.AppendUint32(b, uint32(strOff))
	b = binary.BigEndian.AppendUint16(b, uint16(len(classes)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(methods)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(files)))
	st := r.frameStride()
	for i := range r.Allocations {
		a := &r.Allocations[i]
		if int(a.off)+int(a.Depth)*st > len(r.frames) {
			return nil, fmt.Errorf("alloctrack: encode: allocation %d refers to frames past the end of the report", i)
		}
		b = binary.BigEndian.AppendUint32(b, a.Size)
		b = binary.BigEndian.AppendUint16(b, a.Thread)
		b = binary.BigEndian.AppendUint16(b, a.Class)
		b = append(b, a.Depth)
		fb := r.frames[int(a.off) : int(a.off)+int(a.Depth)*st]
		if st == FrameLen {
			b = append(b, fb...)
			continue
		}
		for j := 0; j < len(fb); j += st {
			b = append(b, fb[j:j+FrameLen]...)
		}
	}
	if len(b) != strOff {
		return nil, fmt.Errorf("alloctrack: encode: allocations hold %d bytes of entries, the report counts %d frames", len(b)-HeaderLen, r.nFrame)
	}
	for _, t := range [][]string{classes, methods, files} {
		for _, s := range t {
			b = ddms.AppendString(b, s)
		}
	}
	return b, nil
}

func pick(raw, dotted []string) []string {
	if raw != nil {
		return raw
	}
	return dotted
}

// Builder assembles a Report from names, interning each string once per
// table. Names are given as the VM sends them (descriptors such as
// "Ljava/lang/String;"); the built report carries both raw and dotted tables.
type Builder struct {
	r                      Report
	classes, methods, file map[string]uint16
	err                    error
}

// FrameName is a stack frame given by names.
type FrameName struct {
	Class, Method, File string
	Line                int16
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{
		classes: map[string]uint16{},
		methods: map[string]uint16{},
		file:    map[string]uint16{},
	}
}

func (b *Builder) intern(m map[string]uint16, raw *[]string, s string) uint16 {
	if i, ok := m[s]; ok {
		return i
	}
	if len(*raw) >= 0xffff {
		if b.err == nil {
			b.err = fmt.Errorf("alloctrack: builder: more than 65,535 distinct names in one table")
		}
		return 0
	}
	i := uint16(len(*raw))
	*raw = append(*raw, s)
	m[s] = i
	return i
}

// Add appends an allocation. Stacks deeper than 255 frames are cut to 255,
// as the u8 depth field allows.
func (b *Builder) Add(size uint32, thread uint16, class string, frames []FrameName) {
	if len(frames) > 255 {
		frames = frames[:255]
	}
	class16 := b.intern(b.classes, &b.r.RawClasses, class)
	fs := make([]Frame, len(frames))
	for i, f := range frames {
		fs[i] = Frame{
			Class:  b.intern(b.classes, &b.r.RawClasses, f.Class),
			Method: b.intern(b.methods, &b.r.RawMethods, f.Method),
			File:   b.intern(b.file, &b.r.RawFiles, f.File),
			Line:   f.Line,
		}
	}
	b.r.Append(size, thread, class16, fs)
}

// Len is the number of allocations added so far.
func (b *Builder) Len() int { return len(b.r.Allocations) }

// Report returns the report built so far, with dotted tables filled in.
// The Builder must not be used afterwards.
func (b *Builder) Report() (*Report, error) {
	if b.err != nil {
		return nil, b.err
	}
	r := b.r
	r.HeaderLen, r.EntryHeaderLen, r.FrameLen = HeaderLen, EntryHeaderLen, FrameLen
	r.DeclaredCount = len(r.Allocations) & 0xffff
	r.Classes = dotAll(r.RawClasses)
	r.Methods = dotAll(r.RawMethods)
	r.Files = dotAll(r.RawFiles)
	r.StringsOffset = HeaderLen + len(r.Allocations)*EntryHeaderLen + r.nFrame*FrameLen
	if r.RawClasses == nil {
		r.RawClasses, r.Classes = []string{}, []string{}
	}
	if r.RawMethods == nil {
		r.RawMethods, r.Methods = []string{}, []string{}
	}
	if r.RawFiles == nil {
		r.RawFiles, r.Files = []string{}, []string{}
	}
	return &r, nil
}

func dotAll(in []string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = DescriptorToDot(s)
	}
	return out
}
