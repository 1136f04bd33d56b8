package jdwp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
)

// Handshake is the 14 ASCII bytes each side of a JDWP connection sends first.
const Handshake = "JDWP-Handshake"

// MaxEarlyPackets is how many command packets a VM may send before its
// handshake echo (see ClientHandshakeEarly) before the peer counts as
// broken, and MaxEarlyPacketSize how large each may be (an APNM is some
// tens of bytes).
const (
	MaxEarlyPackets    = 16
	MaxEarlyPacketSize = 64 << 10
)

// ClientHandshake writes the handshake in one write and waits for the echo.
// The context bounds the wait when rw supports deadlines (net.Conn does).
// It is ClientHandshakeEarly without a receiver for early packets.
func ClientHandshake(ctx context.Context, rw io.ReadWriter) error {
	return ClientHandshakeEarly(ctx, rw, DefaultMaxPacketSize, nil)
}

// ClientHandshakeEarly writes the handshake and waits for the echo,
// taking up to MaxEarlyPackets command packets that come before it: ART
// from Android 5 to 11 may send a packet it published while the connection
// was being set up (an APNM as the app starts) ahead of its echo, a race
// fixed only in Android 12. Each goes to early (if not nil), in order.
// Anything else that is not the echo is ErrBadHandshake.
//
//	before the echo:  length u32 | id u32 | flags u8 (0: command) | set u8 | cmd u8 | data
//	the echo:         "JDWP-Handshake" (14 bytes)
func ClientHandshakeEarly(ctx context.Context, rw io.ReadWriter, maxPacket int, early func(Packet)) error {
	stop := watchContext(ctx, rw)
	defer stop()
	if _, err := rw.Write([]byte(Handshake)); err != nil {
		return ctxErr(ctx, fmt.Errorf("jdwp: writing handshake: %w", err))
	}
	return awaitEcho(ctx, rw, maxPacket, early)
}

// AwaitHandshakeEcho goes on waiting for the echo of a handshake already
// written, after ClientHandshakeEarly gave up at its context's end with
// nothing read: as for a VM that leaves a second client's connection
// unread until the client holding it leaves (ART 9 to 13).
func AwaitHandshakeEcho(ctx context.Context, rw io.ReadWriter, maxPacket int, early func(Packet)) error {
	stop := watchContext(ctx, rw)
	defer stop()
	return awaitEcho(ctx, rw, maxPacket, early)
}

func awaitEcho(ctx context.Context, rw io.ReadWriter, maxPacket int, early func(Packet)) error {
	var buf [len(Handshake)]byte
	for n := 0; ; n++ {
		if got, err := io.ReadFull(rw, buf[:]); err != nil {
			if got > 0 {
				// Part of an echo or packet was read: waiting on is no
				// longer possible.
				return fmt.Errorf("jdwp: reading handshake echo: %d of %d bytes: %w", got, len(buf), err)
			}
			return ctxErr(ctx, fmt.Errorf("jdwp: reading handshake echo: %w", err))
		}
		if bytes.Equal(buf[:], []byte(Handshake)) {
			return nil
		}
		length := binary.BigEndian.Uint32(buf[0:4])
		flags := buf[8]
		if n == MaxEarlyPackets || flags != 0 || length < uint32(len(Handshake)) {
			return fmt.Errorf("%w: peer sent %q (after %d packets before the echo)", ErrBadHandshake, buf[:], n)
		}
		if maxPacket <= 0 || maxPacket > MaxEarlyPacketSize {
			maxPacket = MaxEarlyPacketSize
		}
		if uint64(length) > uint64(maxPacket) {
			return fmt.Errorf("%w: packet before the echo: %w", ErrBadHandshake, &PacketTooLargeError{Length: length, Max: maxPacket})
		}
		data := make([]byte, int(length)-HeaderLen)
		copy(data, buf[HeaderLen:])
		if _, err := io.ReadFull(rw, data[len(buf)-HeaderLen:]); err != nil {
			return ctxErr(ctx, fmt.Errorf("jdwp: reading a packet before the handshake echo: %w", err))
		}
		if early != nil {
			early(Packet{ID: binary.BigEndian.Uint32(buf[4:8]), Flags: flags, CommandSet: buf[9], Command: buf[10], Data: data})
		}
	}
}

// ServerHandshake reads the client's handshake and echoes it, as a VM does.
func ServerHandshake(ctx context.Context, rw io.ReadWriter) error {
	stop := watchContext(ctx, rw)
	defer stop()
	var buf [len(Handshake)]byte
	if _, err := io.ReadFull(rw, buf[:]); err != nil {
		return ctxErr(ctx, fmt.Errorf("jdwp: reading handshake: %w", err))
	}
	if !bytes.Equal(buf[:], []byte(Handshake)) {
		return fmt.Errorf("%w: peer sent %q", ErrBadHandshake, buf[:])
	}
	if _, err := rw.Write(buf[:]); err != nil {
		return ctxErr(ctx, fmt.Errorf("jdwp: writing handshake echo: %w", err))
	}
	return nil
}
