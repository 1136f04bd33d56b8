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
	r      *bufio.Reader
	feed   *carryReader
	max    uint64
	follow bool
	off    int64 // bytes consumed so far
	n      int   // packets returned so far
	buf    []byte
	raw    []byte // tag and length bytes of the field being read
}

// carryReader serves bytes kept from a packet cut short, then the source.
type carryReader struct {
	carry []byte
	src   io.Reader
}

func (c *carryReader) Read(b []byte) (int, error) {
	if len(c.carry) > 0 {
		n := copy(b, c.carry)
		c.carry = c.carry[n:]
		return n, nil
	}
	return c.src.Read(b)
}

func newPacketReader(r io.Reader, max int, follow bool) *packetReader {
	if max <= 0 {
		max = DefaultMaxPacketSize
	}
	feed := &carryReader{src: r}
	return &packetReader{r: bufio.NewReader(feed), feed: feed, max: uint64(max), follow: follow}
}

// pending is the number of bytes of a packet cut short that a following
// reader kept for the next call.
func (p *packetReader) pending() int { return len(p.feed.carry) }

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
		p.raw = append(p.raw, c)
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

// readBody reads size bytes into p.buf a chunk at a time, so the buffer
// grows only as far as the bytes that actually arrive.
func (p *packetReader) readBody(size int) (got int, err error) {
	p.buf = p.buf[:0]
	for rem := size; rem > 0; {
		k := min(rem, readChunk)
		l := len(p.buf)
		if cap(p.buf)-l < k {
			nb := make([]byte, l, max(2*cap(p.buf), l+k))
			copy(nb, p.buf)
			p.buf = nb
		}
		p.buf = p.buf[:l+k]
		n, err := io.ReadFull(p.r, p.buf[l:])
		p.off += int64(n)
		got += n
		if err != nil {
			p.buf = p.buf[:l+n]
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return got, err
		}
		rem -= k
	}
	return got, nil
}

// cutShort handles a field the stream ended inside. Following a growing
// file, the bytes read so far are kept and read again by the next call,
// which reports a clean io.EOF for now; otherwise it is an error.
func (p *packetReader) cutShort(start, off int64, what string, body bool) error {
	if !p.follow {
		return p.errAt(start, off, what, io.ErrUnexpectedEOF)
	}
	carry := append([]byte(nil), p.raw...)
	if body {
		carry = append(carry, p.buf...)
	}
	p.feed.carry = append(carry, p.feed.carry...)
	p.off = start
	return io.EOF
}

// next returns the next packet's payload (valid until the following call)
// and the stream offset of its tag. It returns io.EOF at a clean end of
// stream, between packets (or, following, inside one).
func (p *packetReader) next() (pkt []byte, start int64, err error) {
	for {
		start = p.off
		p.raw = p.raw[:0]
		tag, first, err := p.readVarint()
		if err != nil {
			if first && err == io.EOF {
				return nil, start, io.EOF
			}
			if err == io.ErrUnexpectedEOF {
				return nil, start, p.cutShort(start, start, "packet tag", false)
			}
			return nil, start, p.errAt(start, start, "packet tag", err)
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber {
			return nil, start, p.errAt(start, start, "packet tag", fmt.Errorf("%w: field number %d is not valid", ErrMalformed, num))
		}
		what := fmt.Sprintf("top-level field %d", num)
		var size uint64
		switch typ {
		case protowire.VarintType:
			if _, err := p.readInner(); err != nil {
				if err == io.ErrUnexpectedEOF {
					return nil, start, p.cutShort(start, p.off, what, false)
				}
				return nil, start, p.errAt(start, p.off, what, err)
			}
			continue
		case protowire.Fixed64Type:
			size = 8
		case protowire.Fixed32Type:
			size = 4
		case protowire.BytesType:
			lenOff := p.off
			size, err = p.readInner()
			if err == io.ErrUnexpectedEOF {
				return nil, start, p.cutShort(start, lenOff, "packet length", false)
			}
			if err != nil {
				return nil, start, p.errAt(start, lenOff, "packet length", err)
			}
			if size > p.max {
				return nil, start, p.errAt(start, lenOff, "packet length", &PacketTooLargeError{Size: size, Max: p.max})
			}
			if num == tracePacketField {
				what = "packet payload"
			}
		default:
			return nil, start, p.errAt(start, start, "packet tag", fmt.Errorf("%w: top-level field %d has unsupported wire type %d", ErrMalformed, num, typ))
		}
		got, err := p.readBody(int(size))
		if err == io.ErrUnexpectedEOF {
			if num == tracePacketField {
				what = fmt.Sprintf("packet payload (%d of %d bytes read)", got, size)
			}
			return nil, start, p.cutShort(start, p.off, what, true)
		}
		if err != nil {
			return nil, start, p.errAt(start, p.off, what, err)
		}
		if num != tracePacketField || typ != protowire.BytesType {
			continue // another top-level field: skipped
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
