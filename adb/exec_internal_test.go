package adb

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serveExec answers every connection as a device whose command writes n
// bytes to standard output and exits 0.
func serveExec(t *testing.T, n int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			for range 2 { // host:transport, then shell,v2
				var h [4]byte
				io.ReadFull(c, h[:])
				k, _ := strconv.ParseUint(string(h[:]), 16, 16)
				io.CopyN(io.Discard, c, int64(k))
				io.WriteString(c, "OKAY")
			}
			b := []byte{shellStdout, 0, 0, 0, 0}
			binary.LittleEndian.PutUint32(b[1:], uint32(n))
			b = append(append(b, strings.Repeat("x", n)...), shellExit, 1, 0, 0, 0, 0)
			c.Write(b)
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// An output past 1 MiB waits for its turn: only one grows that large at a
// time in the process.
func TestExecLargeOutputsTakeTurns(t *testing.T) {
	c := NewClient(serveExec(t, 2<<20))
	largeOutputs <- struct{}{} // another Exec holds the turn
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _, _, err := c.Exec(ctx, "d", nil, "cat")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting to read more than") {
		t.Fatalf("Exec while another large output is read = %v, want it waiting for its turn", err)
	}
	<-largeOutputs
	out, _, code, err := c.Exec(context.Background(), "d", nil, "cat")
	if err != nil || code != 0 || len(out) != 2<<20 {
		t.Fatalf("Exec with the turn free = %d bytes, exit %d, %v", len(out), code, err)
	}
	select {
	case largeOutputs <- struct{}{}:
		<-largeOutputs
	default:
		t.Fatal("Exec kept the turn after it returned")
	}
}
