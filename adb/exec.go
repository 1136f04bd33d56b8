package adb

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Shell protocol v2 packet ids (adb's shell_protocol.h): each packet is
// the id, a little-endian uint32 length and that many bytes.
const (
	shellStdin      = 0
	shellStdout     = 1
	shellStderr     = 2
	shellExit       = 3
	shellCloseStdin = 4
)

// MaxExecOutput bounds what Exec keeps of a command's standard output and
// error together.
const MaxExecOutput = 256 << 20

// ErrOutputTooLarge is what Exec returns when a command writes more than
// MaxExecOutput bytes.
var ErrOutputTooLarge = errors.New("adb: command output over the limit")

// Exec runs argv on a device through shell protocol v2 (the
// "shell,v2,raw:" service, Android 7.0 and later): stdin, if not nil, is
// sent as the command's standard input, then closed; standard output and
// error come back apart and byte for byte; code is the command's exit
// status. Every element of argv is quoted with Quote. The context bounds
// the whole call; when it ends, the connection is closed.
func (c *Client) Exec(ctx context.Context, serial string, stdin []byte, argv ...string) (stdout, stderr []byte, code int, err error) {
	if len(argv) == 0 {
		return nil, nil, 0, fmt.Errorf("adb: %s: exec: no command", serial)
	}
	cmd := ShellCommand(argv...)
	cn, err := c.transport(ctx, serial, false)
	if err != nil {
		return nil, nil, 0, err
	}
	defer cn.Close()
	if err := cn.send("shell,v2,raw:" + cmd); err != nil {
		return nil, nil, 0, err
	}
	// stdin goes out while the output is read, so a command that writes
	// before it has read all its input cannot block us both.
	// (Closing the connection, when Exec returns, ends a write the
	// device does not take.)
	go func(in []byte) {
		for len(in) > 0 {
			n := min(len(in), 64<<10)
			if writeShellPacket(cn, shellStdin, in[:n]) != nil {
				return
			}
			in = in[n:]
		}
		writeShellPacket(cn, shellCloseStdin, nil)
	}(stdin)
	var h [5]byte
	for {
		if _, err := io.ReadFull(cn, h[:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return stdout, stderr, 0, cn.fail("adb: %s: exec %s: reading the output (no exit status came)", err, serial, cmd)
		}
		n := binary.LittleEndian.Uint32(h[1:])
		if uint64(len(stdout)+len(stderr))+uint64(n) > MaxExecOutput {
			return stdout, stderr, 0, fmt.Errorf("adb: %s: exec %s: %w (%d bytes)", serial, cmd, ErrOutputTooLarge, MaxExecOutput)
		}
		start := len(stdout)
		dst := &stdout
		switch h[0] {
		case shellStdout:
		case shellStderr:
			start, dst = len(stderr), &stderr
		case shellExit:
			if n != 1 {
				return stdout, stderr, 0, fmt.Errorf("%w: %s: exec %s: exit packet of %d bytes", ErrProtocol, serial, cmd, n)
			}
		default:
			// Window-size changes and ids newer than this client are
			// skipped.
			if _, err := io.CopyN(io.Discard, cn, int64(n)); err != nil {
				return stdout, stderr, 0, cn.fail("adb: %s: exec %s: reading a packet", err, serial, cmd)
			}
			continue
		}
		if h[0] == shellExit {
			var b [1]byte
			if _, err := io.ReadFull(cn, b[:]); err != nil {
				return stdout, stderr, 0, cn.fail("adb: %s: exec %s: reading the exit status", err, serial, cmd)
			}
			// A command may end without reading its input; what
			// became of the rest of it does not matter then.
			return stdout, stderr, int(b[0]), nil
		}
		*dst = append(*dst, make([]byte, n)...)
		if _, err := io.ReadFull(cn, (*dst)[start:]); err != nil {
			*dst = (*dst)[:start]
			return stdout, stderr, 0, cn.fail("adb: %s: exec %s: reading %d bytes of output", err, serial, cmd, n)
		}
	}
}

func writeShellPacket(w io.Writer, id byte, data []byte) error {
	b := make([]byte, 5, 5+len(data))
	b[0] = id
	binary.LittleEndian.PutUint32(b[1:], uint32(len(data)))
	_, err := w.Write(append(b, data...))
	return err
}
