package perfetto

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrMalformed is wrapped by every error about bytes that do not form a
// valid trace: a broken varint, a length past the end of its message, a
// known field sent with the wrong wire type.
var ErrMalformed = errors.New("perfetto: malformed trace")

// FormatError says where in a trace decoding failed. It wraps ErrMalformed,
// io.ErrUnexpectedEOF (a trace cut short inside a packet) or
// *PacketTooLargeError.
type FormatError struct {
	Packet       int    // index of the packet in the trace, from 0
	PacketOffset int64  // byte offset of that packet's tag in the stream
	Offset       int64  // byte offset of the offending bytes in the stream
	Field        string // the field being decoded, e.g. "profile_packet.process_dumps.samples"
	Err          error
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("perfetto: packet %d (at byte %d): %s at byte %d: %s",
		e.Packet, e.PacketOffset, e.Field, e.Offset, strings.ReplaceAll(e.Err.Error(), "perfetto: ", ""))
}

func (e *FormatError) Unwrap() error { return e.Err }

// PacketTooLargeError is a packet whose declared length exceeds the
// decoder's maximum. Nothing of it is read.
type PacketTooLargeError struct {
	Size, Max uint64
}

func (e *PacketTooLargeError) Error() string {
	return fmt.Sprintf("perfetto: packet of %d bytes exceeds the maximum of %d", e.Size, e.Max)
}

// field is one decoded protobuf field. For VARINT, I64 and I32 fields the
// value is in v; for LEN fields the payload is in b.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
	off int64 // absolute offset of the field's tag
	pay int64 // absolute offset of the payload (b[0] for LEN fields)
}

// msg walks the fields of one protobuf message held in b, whose first byte
// is at absolute stream offset base. The first failure is sticky.
type msg struct {
	b      []byte
	pos    int
	base   int64
	parent *msg   // the enclosing message, for error messages
	seg    string // this message's field name in its parent
	err    *locErr
}

// locErr is a decoding failure inside a packet, before the packet index is
// known to the caller.
type locErr struct {
	off   int64
	field string
	err   error
}

func newMsg(b []byte, base int64) *msg { return &msg{b: b, base: base} }

func (m *msg) fail(off int64, field string, format string, args ...any) {
	if m.err == nil {
		m.err = &locErr{off: off, field: field, err: fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)}
	}
}

// sub returns a walker over a LEN field's payload. Its path is only
// spelled out if an error needs it.
func (m *msg) sub(f *field, name string) msg {
	return msg{b: f.b, base: f.pay, parent: m, seg: name}
}

// inherit copies a nested walker's first error into m.
func (m *msg) inherit(s *msg) {
	if m.err == nil && s.err != nil {
		m.err = s.err
	}
}

// fieldNames names the fields the decoder reads, per message (keyed by
// the message's own field name; "" is TracePacket), for error messages.
var fieldNames = map[string]map[protowire.Number]string{
	"": {fPacketClockSnapshot: "clock_snapshot", fPacketTimestamp: "timestamp", fPacketSequenceID: "trusted_packet_sequence_id", fPacketInternedData: "interned_data",
		fPacketSequenceFlags: "sequence_flags", fPacketProfilePacket: "profile_packet", fPacketIncrementalClear: "incremental_state_cleared",
		fPacketPreviousDropped: "previous_packet_dropped"},
	"interned_data": {fInternedFunctionNames: "function_names", fInternedFrames: "frames", fInternedCallstacks: "callstacks",
		fInternedBuildIDs: "build_ids", fInternedMappingPaths: "mapping_paths", fInternedMappings: "mappings"},
	"profile_packet": {fProfileStrings: "strings", fProfileFrames: "frames", fProfileCallstacks: "callstacks", fProfileMappings: "mappings",
		fProfileDumps: "process_dumps", fProfileContinued: "continued", fProfileIndex: "index"},
	"process_dumps": {fDumpPID: "pid", fDumpSamples: "samples", fDumpStats: "stats", fDumpTimestamp: "timestamp", fDumpHeapName: "heap_name"},
	"samples":       {fSampleCallstack: "callstack_id", fSampleAllocated: "self_allocated", fSampleAllocCount: "alloc_count"},
	"callstacks":    {fCallstackIID: "iid", fCallstackFrames: "frame_ids"},
	"mappings":      {fMappingIID: "iid", fMappingPaths: "path_string_ids"},
}

// label names field num of m: its name if the decoder reads it, else
// "field N".
func (m *msg) label(num protowire.Number) string {
	if n, ok := fieldNames[m.seg][num]; ok {
		return n
	}
	return fmt.Sprint("field ", num)
}

// name is the dotted path of field n of m, e.g.
// "profile_packet.process_dumps.samples.callstack_id".
func (m *msg) name(n string) string {
	var segs []string
	for p := m; p != nil; p = p.parent {
		if p.seg != "" {
			segs = append(segs, p.seg)
		}
	}
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		b.WriteString(segs[i])
		b.WriteByte('.')
	}
	b.WriteString(n)
	return b.String()
}

// next reads the next field into f. It returns false at the end of the
// message or on error (then m.err is set).
func (m *msg) next(f *field) bool {
	if m.err != nil || m.pos >= len(m.b) {
		return false
	}
	start := m.pos
	num, typ, n := protowire.ConsumeTag(m.b[m.pos:])
	if n < 0 {
		m.fail(m.base+int64(start), m.name("tag"), "bad field tag (%v)", protowire.ParseError(n))
		return false
	}
	m.pos += n
	*f = field{num: num, typ: typ, off: m.base + int64(start)}
	switch typ {
	case protowire.VarintType:
		v, n := protowire.ConsumeVarint(m.b[m.pos:])
		if n < 0 {
			m.fail(m.base+int64(m.pos), m.name(m.label(num)), "bad varint (%v)", protowire.ParseError(n))
			return false
		}
		f.v = v
		m.pos += n
	case protowire.Fixed64Type:
		v, n := protowire.ConsumeFixed64(m.b[m.pos:])
		if n < 0 {
			m.fail(m.base+int64(m.pos), m.name(m.label(num)), "fixed64 needs 8 bytes, %d left", len(m.b)-m.pos)
			return false
		}
		f.v = v
		m.pos += n
	case protowire.Fixed32Type:
		v, n := protowire.ConsumeFixed32(m.b[m.pos:])
		if n < 0 {
			m.fail(m.base+int64(m.pos), m.name(m.label(num)), "fixed32 needs 4 bytes, %d left", len(m.b)-m.pos)
			return false
		}
		f.v = uint64(v)
		m.pos += n
	case protowire.BytesType:
		l, n := protowire.ConsumeVarint(m.b[m.pos:])
		if n < 0 {
			m.fail(m.base+int64(m.pos), m.name(m.label(num)), "bad length varint (%v)", protowire.ParseError(n))
			return false
		}
		m.pos += n
		if l > uint64(len(m.b)-m.pos) {
			m.fail(m.base+int64(m.pos), m.name(m.label(num)), "length %d past the end of the message (%d bytes left)", l, len(m.b)-m.pos)
			return false
		}
		f.b = m.b[m.pos : m.pos+int(l)]
		f.pay = m.base + int64(m.pos)
		m.pos += int(l)
	default:
		// Groups (deprecated) and reserved wire types: perfetto writes none.
		m.fail(f.off, m.name(m.label(num)), "unsupported wire type %d", typ)
		return false
	}
	return true
}

// want checks that a known field arrived with the wire type its
// declaration implies.
func (m *msg) want(f *field, name string, typ protowire.Type) bool {
	if f.typ != typ {
		m.fail(f.off, m.name(name), "field %d has wire type %d, want %d", f.num, f.typ, typ)
		return false
	}
	return true
}

// uint reads a VARINT field.
func (m *msg) uint(f *field, name string) uint64 {
	if !m.want(f, name, protowire.VarintType) {
		return 0
	}
	return f.v
}

// bool reads a VARINT field as a bool.
func (m *msg) bool(f *field, name string) bool { return m.uint(f, name) != 0 }

// bytes reads a LEN field.
func (m *msg) bytes(f *field, name string) []byte {
	if !m.want(f, name, protowire.BytesType) {
		return nil
	}
	return f.b
}

// appendRepeated appends the values of a repeated uint64 field, which
// proto2 writers may send unpacked (one VARINT per value) or packed (one LEN
// field holding varints). A packed run is counted before anything is
// allocated, so dst grows by at most one element per payload byte.
func (m *msg) appendRepeated(dst []uint64, f *field, name string) []uint64 {
	switch f.typ {
	case protowire.VarintType:
		return append(dst, f.v)
	case protowire.BytesType:
		n := 0
		for _, c := range f.b {
			if c < 0x80 {
				n++
			}
		}
		if len(f.b) > 0 && f.b[len(f.b)-1] >= 0x80 {
			m.fail(f.pay+int64(len(f.b)-1), m.name(name), "packed varint run ends inside a varint")
			return dst
		}
		dst = growCap(dst, n)
		b := f.b
		pos := 0
		for pos < len(b) {
			v, k := protowire.ConsumeVarint(b[pos:])
			if k < 0 {
				m.fail(f.pay+int64(pos), m.name(name), "bad packed varint (%v)", protowire.ParseError(k))
				return dst
			}
			dst = append(dst, v)
			pos += k
		}
		return dst
	default:
		m.fail(f.off, m.name(name), "repeated field %d has wire type %d, want varint or packed", f.num, f.typ)
		return dst
	}
}

func growCap(s []uint64, n int) []uint64 {
	if cap(s)-len(s) >= n {
		return s
	}
	t := make([]uint64, len(s), len(s)+n)
	copy(t, s)
	return t
}
