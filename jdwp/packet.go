package jdwp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// HeaderLen is the length of a JDWP packet header.
const HeaderLen = 11

// FlagReply marks a reply packet.
const FlagReply = 0x80

// DefaultMaxPacketSize bounds the length a peer may declare for one packet
// when Options.MaxPacketSize is zero: above the largest allocation report
// a VM sends (65,535 entries at debug.allocTracker.stackDepth 128, its
// maximum, come to about 68 MB; docs/ddm-devices.md).
const DefaultMaxPacketSize = 128 << 20

// Errors callers branch on.
var (
	// ErrClosed is returned for requests on, or waiting on, a closed Conn.
	ErrClosed = errors.New("jdwp: connection closed")
	// ErrBadHandshake means the peer did not echo the JDWP handshake.
	ErrBadHandshake = errors.New("jdwp: bad handshake")
	// ErrShortPacket means a header declared a length below HeaderLen.
	ErrShortPacket = errors.New("jdwp: packet length shorter than its header")
)

// PacketTooLargeError reports a header that declares more bytes than the
// configured maximum. Nothing is allocated for such a packet.
type PacketTooLargeError struct {
	Length uint32 // declared packet length, header included
	Max    int    // configured maximum
}

func (e *PacketTooLargeError) Error() string {
	return fmt.Sprintf("jdwp: packet length %d exceeds maximum %d", e.Length, e.Max)
}

// ReplyError is a reply that carries a non-zero JDWP error code.
type ReplyError struct {
	Code uint16
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("jdwp: reply error code %d", e.Code)
}

// Packet is one JDWP packet. For a command, CommandSet and Command are set;
// for a reply (Flags&FlagReply != 0), ErrorCode is.
//
//	offset  size  field
//	0       4     length, header included (big-endian)
//	4       4     id
//	8       1     flags (0x80 = reply)
//	9       1     command set  | 9  2  error code (reply)
//	10      1     command      |
//	11      n     data
type Packet struct {
	ID         uint32
	Flags      uint8
	CommandSet uint8
	Command    uint8
	ErrorCode  uint16
	Data       []byte
}

// IsReply tells whether p is a reply.
func (p *Packet) IsReply() bool { return p.Flags&FlagReply != 0 }

// AppendPacket appends the encoded packet to dst and returns the result.
func AppendPacket(dst []byte, p *Packet) []byte {
	n := HeaderLen + len(p.Data)
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = binary.BigEndian.AppendUint32(dst, p.ID)
	dst = append(dst, p.Flags)
	if p.IsReply() {
		dst = binary.BigEndian.AppendUint16(dst, p.ErrorCode)
	} else {
		dst = append(dst, p.CommandSet, p.Command)
	}
	return append(dst, p.Data...)
}

// ParseHeader decodes an 11-byte header. It returns the length of the data
// that follows, after checking the declared length against HeaderLen and max.
func ParseHeader(h *[HeaderLen]byte, max int, p *Packet) (dataLen int, err error) {
	length := binary.BigEndian.Uint32(h[0:4])
	if length < HeaderLen {
		return 0, fmt.Errorf("%w: declared length %d", ErrShortPacket, length)
	}
	if max <= 0 {
		max = DefaultMaxPacketSize
	}
	p.ID = binary.BigEndian.Uint32(h[4:8])
	p.Flags = h[8]
	if p.IsReply() {
		p.ErrorCode = binary.BigEndian.Uint16(h[9:11])
		p.CommandSet, p.Command = 0, 0
	} else {
		p.CommandSet, p.Command = h[9], h[10]
		p.ErrorCode = 0
	}
	if uint64(length) > uint64(max) {
		// The header is filled in: a reader may skip the data and go on.
		return int(length) - HeaderLen, &PacketTooLargeError{Length: length, Max: max}
	}
	return int(length) - HeaderLen, nil
}

// ReadPacket reads one packet from r. The declared length is checked against
// max (DefaultMaxPacketSize when max <= 0) before anything is allocated for
// the data. A stream that ends inside a packet gives io.ErrUnexpectedEOF; one
// that ends between packets gives io.EOF.
func ReadPacket(r io.Reader, max int) (Packet, error) { return readPacket(r, max, nil, nil) }

// readPacket is ReadPacket with data buffers from bufs (see readData).
func readPacket(r io.Reader, max int, bufs *Buffers, stop <-chan struct{}) (Packet, error) {
	p, n, err := readHeader(r, max)
	if err != nil {
		return p, err
	}
	return p, readData(r, &p, n, bufs, true, stop)
}

// readHeader reads a packet's header and returns the length of its data.
func readHeader(r io.Reader, max int) (Packet, int, error) {
	var h [HeaderLen]byte
	var p Packet
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return p, 0, err
	}
	n, err := ParseHeader(&h, max, &p)
	return p, n, err
}

// readData reads the n data bytes of packet p into p.Data: a buffer lent
// by bufs if lend, else Go memory of its own; either grows as bytes
// arrive (see Buffers.read), so that a header that declares more than
// follows costs only what follows. A large packet is read only in its
// turn (see Buffers); readData gives up with ErrClosed when stop closes
// while it waits. On error, a lent buffer is given back.
func readData(r io.Reader, p *Packet, n int, bufs *Buffers, lend bool, stop <-chan struct{}) error {
	if !bufs.acquire(n, stop) {
		return ErrClosed
	}
	defer bufs.release(n)
	if !lend {
		bufs = nil
	}
	data, got, err := bufs.read(r, n)
	if err != nil {
		bufs.Put(data)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("jdwp: packet %#x declares %d data bytes, %d arrived: %w", p.ID, n, got, err)
	}
	p.Data = data
	return nil
}

// WritePacket encodes p and writes it to w with one Write call.
func WritePacket(w io.Writer, p *Packet) error {
	_, err := w.Write(AppendPacket(make([]byte, 0, HeaderLen+len(p.Data)), p))
	return err
}
