package jdwp

import (
	"bytes"
	"context"
	"fmt"
	"io"
)

// Handshake is the 14 ASCII bytes each side of a JDWP connection sends first.
const Handshake = "JDWP-Handshake"

// ClientHandshake writes the handshake in one write and waits for the echo.
// The context bounds the wait when rw supports deadlines (net.Conn does).
func ClientHandshake(ctx context.Context, rw io.ReadWriter) error {
	stop := watchContext(ctx, rw)
	defer stop()
	if _, err := rw.Write([]byte(Handshake)); err != nil {
		return ctxErr(ctx, fmt.Errorf("jdwp: writing handshake: %w", err))
	}
	var buf [len(Handshake)]byte
	if _, err := io.ReadFull(rw, buf[:]); err != nil {
		return ctxErr(ctx, fmt.Errorf("jdwp: reading handshake echo: %w", err))
	}
	if !bytes.Equal(buf[:], []byte(Handshake)) {
		return fmt.Errorf("%w: peer sent %q", ErrBadHandshake, buf[:])
	}
	return nil
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
