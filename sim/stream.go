package sim

import (
	"bytes"
	"io"
	"net"
	"sync"
)

// The smallest streaming path the simulated am instrument needs: its
// output goes to the service stream as it is printed, not whole at the
// end (streamedCommand picks the commands that take it).

// legacyShellWriter writes a shell: service's output, stdout and stderr
// merged; before Android 7.0 through a pty, which turns "\n" into "\r\n"
// (sheet 1).
func (d *Device) legacyShellWriter(c net.Conn) io.Writer {
	return &lockedWriter{w: c, crlf: d.cfg.API < apiShellV2}
}

type lockedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	crlf bool
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := b
	if l.crlf {
		out = bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))
	}
	if _, err := l.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// v2Writer writes shell protocol v2 frames of one stream id.
type v2Writer struct {
	mu *sync.Mutex
	c  net.Conn
	id byte
}

func (v v2Writer) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n := len(b)
	f := append([]byte{v.id, byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}, b...)
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, err := v.c.Write(f); err != nil {
		return 0, err
	}
	return n, nil
}

// serveStreamedV2 runs a streamed command on a shell protocol v2 stream:
// stdout and stderr frames as they are printed, then the exit code.
func serveStreamedV2(c net.Conn, run func(stdout, stderr io.Writer) int) {
	defer c.Close()
	var mu sync.Mutex
	code := run(v2Writer{&mu, c, 1}, v2Writer{&mu, c, 2})
	mu.Lock()
	c.Write([]byte{3, 1, 0, 0, 0, byte(code)})
	mu.Unlock()
}
