package adb

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// maxStreamStderr bounds what a Stream keeps of a command's standard
// error (shell protocol v2): `am`'s messages and stack traces.
const maxStreamStderr = 64 << 10

// Stream is a command running on a device, its output read as it comes:
// a command that runs for as long as it likes (`logcat`, `am instrument
// -w`), which Shell and Exec, reading whole outputs, cannot follow.
type Stream struct {
	cn     *conn
	v2     bool
	remain int // v2: bytes of the standard output packet not read yet

	mu     sync.Mutex
	stderr []byte
	code   int
	exited bool
}

// StartShell runs argv on a device and returns its standard output as a
// stream. With v2 (shell protocol v2, "shell,v2,raw:", Android 7.0 and
// later) standard error is kept apart (Stderr) and the exit status comes
// at the end (ExitStatus); without, the shell: service sends one stream,
// standard error mixed in, with "\r\n" line ends before Android 7.0 and
// no exit status. Every element of argv is quoted with Quote. Cancelling
// ctx, or Close, ends the stream; the device then ends the command.
func (c *Client) StartShell(ctx context.Context, serial string, v2 bool, argv ...string) (*Stream, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("adb: %s: shell: no command", serial)
	}
	cmd := ShellCommand(argv...)
	cn, err := c.transport(ctx, serial, true)
	if err != nil {
		return nil, fmt.Errorf("adb: %s: shell %s: %w", serial, cmd, err)
	}
	svc := "shell:"
	if v2 {
		svc = "shell,v2,raw:"
	}
	if err := cn.send(svc + cmd); err != nil {
		cn.Close()
		return nil, fmt.Errorf("adb: %s: shell %s: %w", serial, cmd, err)
	}
	if v2 {
		// The command reads no input: tell the device so.
		if err := writeShellPacket(cn.Conn, shellCloseStdin, nil); err != nil {
			cn.Close()
			return nil, cn.fail("adb: %s: shell %s: closing its input", err, serial, cmd)
		}
	}
	return &Stream{cn: cn, v2: v2}, nil
}

// Read reads standard output; io.EOF once the command has ended.
func (s *Stream) Read(p []byte) (int, error) {
	if !s.v2 {
		return s.cn.Read(p)
	}
	for s.remain == 0 {
		if err := s.nextPacket(); err != nil {
			return 0, err
		}
	}
	n, err := s.cn.Read(p[:min(len(p), s.remain)])
	s.remain -= n
	if errors.Is(err, io.EOF) && s.remain > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// nextPacket reads shell protocol v2 packets up to the next standard
// output bytes (s.remain set) or the exit status (io.EOF).
func (s *Stream) nextPacket() error {
	var h [5]byte
	if _, err := io.ReadFull(s.cn, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the device went before the exit status
		}
		return s.cn.fail("reading the output (no exit status came)", err)
	}
	n := int(binary.LittleEndian.Uint32(h[1:]))
	switch h[0] {
	case shellStdout:
		s.remain = n
		return nil
	case shellExit:
		if n != 1 {
			return fmt.Errorf("%w: exit packet of %d bytes", ErrProtocol, n)
		}
		var b [1]byte
		if _, err := io.ReadFull(s.cn, b[:]); err != nil {
			return s.cn.fail("reading the exit status", err)
		}
		s.mu.Lock()
		s.code, s.exited = int(b[0]), true
		s.mu.Unlock()
		return io.EOF
	case shellStderr:
		b, err := readExactly(s.cn, n)
		s.mu.Lock()
		s.stderr = append(s.stderr, b[:min(len(b), maxStreamStderr-len(s.stderr))]...)
		s.mu.Unlock()
		if err != nil {
			return s.cn.fail("reading standard error", err)
		}
		return nil
	}
	if _, err := io.CopyN(io.Discard, s.cn, int64(n)); err != nil {
		return s.cn.fail("skipping a packet of %d bytes", err, n)
	}
	return nil
}

// Stderr returns what the command wrote on standard error so far (v2
// only; the first 64 KiB).
func (s *Stream) Stderr() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.stderr...)
}

// ExitStatus returns the command's exit status once Read has returned
// io.EOF (v2 only): ok is false before, and without v2.
func (s *Stream) ExitStatus() (code int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code, s.exited
}

// Close ends the stream; the device ends the command.
func (s *Stream) Close() error { return s.cn.Close() }
