package perfetto

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// DefaultMaxPacketSize is the largest packet a Decoder accepts unless told
// otherwise. heapprofd starts a new packet after about 400 KB of samples;
// 16 MiB leaves room for any interned-data packet it writes.
const DefaultMaxPacketSize = 16 << 20

// readChunk is how much of a packet's payload is read (and allocated) at a
// time, so a declared length alone never makes us allocate.
const readChunk = 64 << 10

// tracePacketField is Trace.packet, the only field a trace file's top level
// holds.
const tracePacketField = 1

// packetReader splits a stream into TracePacket payloads. A trace file is
// the encoding of
//
//	message Trace { repeated TracePacket packet = 1; }
//
// so on the wire it is a run of
//
//	tag    varint  0x0a (field 1, wire type 2)
//	length varint  n
//	packet n bytes (a TracePacket)
//
// Other top-level fields are skipped (a VARINT, I64, I32 or LEN field with
// the same length check); any other wire type is an error.
type packetReader struct {
	r   *bufio.Reader
	max uint64
	off int64 // bytes consumed so far
	n   int   // packets returned so far
	buf []byte
}

func newPacketReader(r io.Reader, max int) *packetReader {
	if max <= 0 {
		max = DefaultMaxPacketSize
	}
	return &packetReader{r: bufio.NewReader(r), max: uint64(max)}
}

// readVarint reads a varint from the stream. first reports whether no byte
// of it could be read (a clean end of stream).
func (p *packetReader) readVarint() (v uint64, first bool, err error) {
	for i := 0; i < protowire.SizeVarint(1<<63); i++ {
		c, err := p.r.ReadByte()
		if err != nil {
			if err == io.EOF {
				if i == 0 {
					return 0, true, io.EOF
				}
				return 0, false, io.ErrUnexpectedEOF
			}
			return 0, i == 0, err
		}
		p.off++
		if i == 9 && c > 1 {
			return 0, false, fmt.Errorf("%w: varint overflows 64 bits", ErrMalformed)
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, false, nil
		}
	}
	return 0, false, fmt.Errorf("%w: varint longer than 10 bytes", ErrMalformed)
}

// readInner reads a varint that must be there: the end of the stream is
// unexpected.
func (p *packetReader) readInner() (uint64, error) {
	v, _, err := p.readVarint()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return v, err
}

// next returns the next packet's payload (valid until the following call),
// its index and the stream offset of its tag. It returns io.EOF at a clean
// end of stream, between packets.
func (p *packetReader) next() (pkt []byte, start int64, err error) {
	for {
		start = p.off
		tag, first, err := p.readVarint()
		if err != nil {
			if first && err == io.EOF {
				return nil, start, io.EOF
			}
			return nil, start, p.errAt(start, start, "packet tag", err)
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber {
			return nil, start, p.errAt(start, start, "packet tag", fmt.Errorf("%w: field number %d is not valid", ErrMalformed, num))
		}
		switch typ {
		case protowire.VarintType:
			if _, err := p.readInner(); err != nil {
				return nil, start, p.errAt(start, p.off, fmt.Sprintf("top-level field %d", num), err)
			}
			continue
		case protowire.Fixed64Type, protowire.Fixed32Type:
			k := int64(8)
			if typ == protowire.Fixed32Type {
				k = 4
			}
			m, err := io.CopyN(io.Discard, p.r, k)
			p.off += m
			if err != nil {
				return nil, start, p.errAt(start, p.off, fmt.Sprintf("top-level field %d", num), io.ErrUnexpectedEOF)
			}
			continue
		case protowire.BytesType:
		default:
			return nil, start, p.errAt(start, start, "packet tag", fmt.Errorf("%w: top-level field %d has unsupported wire type %d", ErrMalformed, num, typ))
		}
		lenOff := p.off
		size, err := p.readInner()
		if err != nil {
			return nil, start, p.errAt(start, lenOff, "packet length", err)
		}
		if size > p.max {
			return nil, start, p.errAt(start, lenOff, "packet length", &PacketTooLargeError{Size: size, Max: p.max})
		}
		if num != tracePacketField {
			m, err := io.CopyN(io.Discard, p.r, int64(size))
			p.off += m
			if err != nil {
				return nil, start, p.errAt(start, p.off, fmt.Sprintf("top-level field %d", num), io.ErrUnexpectedEOF)
			}
			continue
		}
		// Read the payload a chunk at a time: the buffer grows only as far
		// as the bytes that actually arrive.
		p.buf = p.buf[:0]
		for rem := int(size); rem > 0; {
			k := min(rem, readChunk)
			l := len(p.buf)
			if cap(p.buf)-l < k {
				nb := make([]byte, l, max(2*cap(p.buf), l+k))
				copy(nb, p.buf)
				p.buf = nb
			}
			p.buf = p.buf[:l+k]
			got, err := io.ReadFull(p.r, p.buf[l:])
			p.off += int64(got)
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, start, p.errAt(start, p.off, fmt.Sprintf("packet payload (%d of %d bytes read)", int(size)-rem+got, size), err)
			}
			rem -= k
		}
		p.n++
		return p.buf, start, nil
	}
}

func (p *packetReader) errAt(start, off int64, what string, err error) error {
	if errors.Is(err, ErrMalformed) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &FormatError{Packet: p.n, PacketOffset: start, Offset: off, Field: what, Err: err}
	}
	var tl *PacketTooLargeError
	if errors.As(err, &tl) {
		return &FormatError{Packet: p.n, PacketOffset: start, Offset: off, Field: what, Err: err}
	}
	// An error of the underlying reader: pass it on, with the place.
	return fmt.Errorf("perfetto: reading packet %d at byte %d: %w", p.n, off, err)
}
