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

// MaxExecOutput bounds what Exec reads of a command's standard output and
// error together (and of packets it skips). The largest reader is a
// heapprofd session taking what its trace file gained since the last
// window: perfetto drains its trace buffer (16 MiB, `buffers.size_kb`)
// into the file, so one full drain fits; a dump is some hundreds of KB
// (docs/heapprofd-devices.md). Everything else reads messages and
// process lists.
const MaxExecOutput = 16 << 20

// ErrOutputTooLarge is what Exec and Shell return when a command writes
// more than they read.
var ErrOutputTooLarge = errors.New("adb: command output over the limit")

// Exec runs argv on a device through shell protocol v2 (the
// "shell,v2,raw:" service, Android 7.0 and later): stdin, if not nil, is
// sent as the command's standard input, then closed; standard output and
// error come back apart and byte for byte; code is the command's exit
// status. Every element of argv is quoted with Quote. Output beyond
// MaxExecOutput is ErrOutputTooLarge, with no output; a packet's declared
// length sizes nothing, the output grows as its bytes arrive. The context
// bounds the whole call; when it ends, the connection is closed.
// Before Android 7.0 adbd closes the stream at once: Run chooses by the
// device's features, for commands that may meet such a device.
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
	out := shellOutput{big: largeOutputs}
	defer out.release()
	code, err = out.read(cn, MaxExecOutput)
	if errors.Is(err, ErrOutputTooLarge) {
		// Nothing of an output over the limit is kept: a caller that
		// quoted it in a message would copy it whole.
		return nil, nil, 0, fmt.Errorf("adb: %s: exec %s: %w", serial, cmd, err)
	}
	if err != nil {
		err = fmt.Errorf("adb: %s: exec %s: %w", serial, cmd, err)
	}
	return out.stdout.bytes(), out.stderr.bytes(), code, err
}

// smallExecOutput is what an Exec output may grow to without a turn of
// largeOutputs: a process list, a command's messages.
const smallExecOutput = 1 << 20

// largeOutputs lets one Exec output at a time in the process grow past
// smallExecOutput, so that devices sending endless output (or large
// traces at once) cost at most 1 MiB each and MaxExecOutput for one of
// them. Another waits for its turn, or for its context.
var largeOutputs = make(chan struct{}, 1)

// shellOutput collects the packets of a shell protocol v2 stream.
type shellOutput struct {
	stdout, stderr chunks
	skipped        int64
	big            chan struct{} // largeOutputs; nil: no turn needed
	holding        bool          // this output holds big's turn
}

// grant waits for the turn to grow past smallExecOutput if total needs it.
func (o *shellOutput) grant(cn *conn, total int64) error {
	if o.big == nil || o.holding || total <= smallExecOutput {
		return nil
	}
	select {
	case o.big <- struct{}{}:
		o.holding = true
		return nil
	case <-cn.ctx.Done():
		return fmt.Errorf("waiting to read more than %d bytes of output: %w", smallExecOutput, cn.ctx.Err())
	}
}

func (o *shellOutput) release() {
	if o.holding {
		<-o.big
		o.holding = false
	}
}

// read reads packets from cn until the exit packet and returns the exit
// status. Each packet:
//
//	0      1                5
//	+------+----------------+-------------------+
//	|  id  | length (LE u32)| length bytes      |
//	+------+----------------+-------------------+
//
// Ids 1 and 2 are standard output and error, 3 the exit status (one
// byte); others (window-size changes, ids newer than this client) are
// skipped. More than limit bytes in all is ErrOutputTooLarge.
func (o *shellOutput) read(cn *conn, limit int) (int, error) {
	var h [5]byte
	for {
		if _, err := io.ReadFull(cn, h[:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, cn.fail("reading the output (no exit status came)", err)
		}
		n := int64(binary.LittleEndian.Uint32(h[1:]))
		total := int64(o.stdout.n+o.stderr.n) + o.skipped + n
		if total > int64(limit) {
			return 0, fmt.Errorf("%w (%d bytes; a packet of %d bytes would make %d)", ErrOutputTooLarge, limit, n, total)
		}
		if err := o.grant(cn, total); err != nil {
			return 0, err
		}
		var dst *chunks
		switch h[0] {
		case shellStdout:
			dst = &o.stdout
		case shellStderr:
			dst = &o.stderr
		case shellExit:
			if n != 1 {
				return 0, fmt.Errorf("%w: exit packet of %d bytes", ErrProtocol, n)
			}
			var b [1]byte
			if _, err := io.ReadFull(cn, b[:]); err != nil {
				return 0, cn.fail("reading the exit status", err)
			}
			// A command may end without reading its input; what
			// became of the rest of it does not matter then.
			return int(b[0]), nil
		default:
			o.skipped += n
			if _, err := io.CopyN(io.Discard, cn, n); err != nil {
				return 0, cn.fail("skipping a packet of %d bytes", err, n)
			}
			continue
		}
		// The output grows as bytes arrive: a declared length sizes
		// nothing.
		if err := dst.readFrom(cn, int(n)); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, cn.fail("reading a packet of %d bytes", err, n)
		}
	}
}

// chunks is an output read in pieces that double from 4 KiB up to 1 MiB,
// so that it holds what came and never a copy of it, until bytes joins
// them.
type chunks struct {
	bufs [][]byte
	n    int
}

// readFrom appends n bytes of r, as they arrive.
func (c *chunks) readFrom(r io.Reader, n int) error {
	for n > 0 {
		last := len(c.bufs) - 1
		if last < 0 || len(c.bufs[last]) == cap(c.bufs[last]) {
			size := 4 << 10
			if last >= 0 {
				size = min(2*cap(c.bufs[last]), 1<<20)
			}
			c.bufs, last = append(c.bufs, make([]byte, 0, size)), last+1
		}
		b := c.bufs[last]
		k, err := r.Read(b[len(b):min(cap(b), len(b)+n)])
		c.bufs[last], c.n, n = b[:len(b)+k], c.n+k, n-k
		if err != nil && n > 0 {
			return err
		}
	}
	return nil
}

// bytes joins the pieces (nil when there are none).
func (c *chunks) bytes() []byte {
	switch len(c.bufs) {
	case 0:
		return nil
	case 1:
		return c.bufs[0]
	}
	out := make([]byte, 0, c.n)
	for _, b := range c.bufs {
		out = append(out, b...)
	}
	return out
}

func writeShellPacket(w io.Writer, id byte, data []byte) error {
	b := make([]byte, 5, 5+len(data))
	b[0] = id
	binary.LittleEndian.PutUint32(b[1:], uint32(len(data)))
	_, err := w.Write(append(b, data...))
	return err
}
