package adb_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
)

// shellPacket frames one shell protocol v2 packet.
func shellPacket(id byte, data []byte) []byte {
	b := []byte{id, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], uint32(len(data)))
	return append(b, data...)
}

// catDevice answers like `cat` run with shell protocol v2: it reads stdin
// packets until close-stdin, then writes what it read to stdout in two
// packets, a line to stderr, a window-size packet the client must skip,
// and exit status code.
func catDevice(code byte) script {
	return func(p *peer) error {
		if err := p.write("OKAY"); err != nil {
			return err
		}
		var in []byte
		for {
			var h [5]byte
			if _, err := io.ReadFull(p, h[:]); err != nil {
				return fmt.Errorf("reading a stdin packet: %w", err)
			}
			data := make([]byte, binary.LittleEndian.Uint32(h[1:]))
			if _, err := io.ReadFull(p, data); err != nil {
				return err
			}
			if h[0] == 4 {
				break
			}
			if h[0] != 0 {
				return fmt.Errorf("packet id %d from the client, want stdin (0) or close-stdin (4)", h[0])
			}
			in = append(in, data...)
		}
		half := len(in) / 2
		var out []byte
		out = append(out, shellPacket(1, in[:half])...)
		out = append(out, shellPacket(5, []byte("24x80,0x0"))...)
		out = append(out, shellPacket(2, []byte("cat: a warning\n"))...)
		out = append(out, shellPacket(1, in[half:])...)
		out = append(out, shellPacket(3, []byte{code})...)
		if _, err := p.Write(out); err != nil {
			return err
		}
		return p.waitClose()
	}
}

func TestExecStdinOutputAndStatus(t *testing.T) {
	// Binary input, larger than one stdin packet, with bytes a text
	// shell would mangle.
	in := make([]byte, 150_000)
	for i := range in {
		in[i] = byte(i * 7)
	}
	s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"),
		expect("shell,v2,raw:cat /data/x 'a b'"), catDevice(3)))
	out, errOut, code, err := adb.NewClient(s.addr()).Exec(ctxT(t), "emu-1", in, "cat", "/data/x", "a b")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, in) {
		t.Errorf("stdout: %d bytes, want the %d bytes sent (equal: %v)", len(out), len(in), bytes.Equal(out, in))
	}
	if string(errOut) != "cat: a warning\n" || code != 3 {
		t.Errorf("stderr %q, exit %d; want the warning and 3", errOut, code)
	}
}

func TestExecErrors(t *testing.T) {
	t.Run("no exit status", func(t *testing.T) {
		s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"), expect("shell,v2,raw:true"),
			send("OKAY"+string(shellPacket(1, []byte("partial"))))))
		out, _, _, err := adb.NewClient(s.addr()).Exec(ctxT(t), "emu-1", nil, "true")
		if err == nil || !strings.Contains(err.Error(), "no exit status") || string(out) != "partial" {
			t.Fatalf("stream ended before the exit packet: out %q, err %v", out, err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"), expect("shell,v2,raw:true"),
			send("FAIL"+hexs("closed"))))
		_, _, _, err := adb.NewClient(s.addr()).Exec(ctxT(t), "emu-1", nil, "true")
		var fe *adb.FailError
		if !errors.As(err, &fe) {
			t.Fatalf("a refused service: %v, want a FailError", err)
		}
	})
	t.Run("bad exit packet", func(t *testing.T) {
		s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"), expect("shell,v2,raw:true"),
			send("OKAY"+string(shellPacket(3, []byte{0, 0}))), closeStdinThenClose))
		_, _, _, err := adb.NewClient(s.addr()).Exec(ctxT(t), "emu-1", nil, "true")
		if !errors.Is(err, adb.ErrProtocol) {
			t.Fatalf("exit packet of 2 bytes: %v, want ErrProtocol", err)
		}
	})
	t.Run("no command", func(t *testing.T) {
		if _, _, _, err := adb.NewClient("127.0.0.1:1").Exec(ctxT(t), "emu-1", nil); err == nil {
			t.Fatal("Exec with no command succeeded")
		}
	})
}

// closeStdinThenClose reads until the client closes the connection: Exec
// sends its close-stdin packet from a goroutine of its own, which may or
// may not have run by then, so that packet (or none of it) is all the
// client may send.
func closeStdinThenClose(p *peer) error {
	b, _ := io.ReadAll(p) // an error is the client's close
	if !bytes.HasPrefix(shellPacket(4, nil), b) {
		return fmt.Errorf("client sent %q after its request, not its close-stdin packet", b)
	}
	return nil
}
