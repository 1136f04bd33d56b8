package adb_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
)

// TestStartShellV2Streams: standard output is read as it comes, before
// the command ends; standard error and other packets are kept apart; the
// exit status comes at the end; the device is told the command has no
// input.
func TestStartShellV2Streams(t *testing.T) {
	firstRead := make(chan struct{})
	s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"),
		expect("shell,v2,raw:am instrument -w -r pkg/Runner"), send("OKAY"),
		func(p *peer) error {
			var h [5]byte
			if _, err := io.ReadFull(p, h[:]); err != nil || h != [5]byte{4, 0, 0, 0, 0} {
				return fmt.Errorf("close-stdin packet: % x, %v", h, err)
			}
			return p.write(string(shellPacket(1, []byte("line one\n"))))
		},
		func(p *peer) error {
			<-firstRead // the client read the first line before the rest exists
			out := string(shellPacket(2, []byte("Error: Unknown option: -x\n"))) + string(shellPacket(5, []byte("24x80"))) +
				string(shellPacket(1, []byte("line two\n"))) + string(shellPacket(3, []byte{1}))
			if err := p.write(out); err != nil {
				return err
			}
			return p.waitClose()
		}))
	st, err := adb.NewClient(s.addr()).StartShell(ctxT(t), "emu-1", true, "am", "instrument", "-w", "-r", "pkg/Runner")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := bufio.NewReader(st)
	if l, err := r.ReadString('\n'); l != "line one\n" || err != nil {
		t.Fatalf("first line %q, %v", l, err)
	}
	if _, ok := st.ExitStatus(); ok {
		t.Fatal("an exit status before the command ended")
	}
	close(firstRead)
	rest, err := io.ReadAll(r)
	if string(rest) != "line two\n" || err != nil {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if code, ok := st.ExitStatus(); code != 1 || !ok {
		t.Errorf("exit status %d (%v), want 1", code, ok)
	}
	if e := string(st.Stderr()); e != "Error: Unknown option: -x\n" {
		t.Errorf("stderr %q", e)
	}
}

// TestStartShellLegacy: the shell: service's stream is the output as it
// is, to its end; there is no exit status.
func TestStartShellLegacy(t *testing.T) {
	s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"),
		expect("shell:logcat -v threadtime -s TestRunner"), send("OKAY"), send("a\r\nb\r\n")))
	st, err := adb.NewClient(s.addr()).StartShell(ctxT(t), "emu-1", false, "logcat", "-v", "threadtime", "-s", "TestRunner")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out, err := io.ReadAll(st)
	if string(out) != "a\r\nb\r\n" || err != nil {
		t.Fatalf("output %q, %v", out, err)
	}
	if _, ok := st.ExitStatus(); ok {
		t.Error("an exit status from the shell: service")
	}
}

// TestStartShellV2Cut: a stream that ends without the exit status (the
// device went away) is an error, after the output that came.
func TestStartShellV2Cut(t *testing.T) {
	s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"), expect("shell,v2,raw:logcat"), send("OKAY"),
		func(p *peer) error {
			io.ReadFull(p, make([]byte, 5))
			return p.write(string(shellPacket(1, []byte("partial"))))
		}))
	st, err := adb.NewClient(s.addr()).StartShell(ctxT(t), "emu-1", true, "logcat")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out, err := io.ReadAll(st)
	if string(out) != "partial" || err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "no exit status") {
		t.Fatalf("output %q, err %v; want the partial output and a missing exit status", out, err)
	}
}
