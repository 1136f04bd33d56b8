package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/adb/transcript"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/testwait"
)

// recordedExec is a transcript connection of one shell v2 command that
// printed out and exited code.
func recordedExec(serial, cmd string, out []byte, code byte) *transcript.Conn {
	b := binary.LittleEndian.AppendUint32([]byte{1}, uint32(len(out)))
	b = append(append(b, out...), 3, 1, 0, 0, 0, code)
	return &transcript.Conn{
		Serial: serial, Service: "shell,v2,raw:" + cmd,
		Requests: []transcript.Request{{Text: "host:transport:" + serial, Status: "OKAY"},
			{Text: "shell,v2,raw:" + cmd, Service: true, Status: "OKAY"}},
		Chunks:   []transcript.Chunk{{Dir: transcript.FromDevice, Data: b}},
		ClosedBy: transcript.FromDevice,
	}
}

func pieceLine(from int, path string, limit int) string {
	return "tail -c +" + strconv.Itoa(from) + " " + path + " | head -c " + strconv.Itoa(limit)
}

// serveTranscript serves tr as a device of a new real adb server.
func serveTranscript(t *testing.T, tr *transcript.Transcript) (*Replay, *adb.Client, string) {
	t.Helper()
	srv := adbtest.StartServer(t)
	rp := NewReplay(tr)
	a := rp.Adbd()
	addr, err := a.Listen("127.0.0.1:" + strconv.Itoa(adbtest.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		rp.Close()
	})
	rp.SetSerial(addr.String())
	srv.Connect(t, addr.String())
	return rp, adb.NewClient(srv.Addr()), addr.String()
}

// TestReplayFilePieces: a transcript that read a file at offsets 0 and 100
// (the second read short: the file's end) answers a read at 50, which it
// never recorded, with the bytes from 50 to that end, whatever the limit
// asked; a read at bytes it never saw gets an error naming the range; a
// poll asked more often than recorded gets its last answer again.
func TestReplayFilePieces(t *testing.T) {
	const path, other = "/data/misc/perfetto-traces/t", "/data/local/tmp/u"
	content := make([]byte, 150)
	for i := range content {
		content[i] = byte(i * 7)
	}
	tr := &transcript.Transcript{Conns: []*transcript.Conn{
		recordedExec("rec-1", "sh -c '"+pieceLine(1, path, 100)+"'", content[:100], 0),
		recordedExec("rec-1", "sh -c '"+pieceLine(101, path, 100)+"'", content[100:], 0),
		recordedExec("rec-1", "sh -c '"+pieceLine(1, other, 10)+"'", content[:10], 0),
		recordedExec("rec-1", "cat /proc/uptime", []byte("12.5 3.0\n"), 0),
	}}
	rp, c, serial := serveTranscript(t, tr)
	ctx := testwait.Context(t)
	for _, limit := range []int{100, 1000} {
		out, errOut, code, err := c.Exec(ctx, serial, nil, "sh", "-c", pieceLine(51, path, limit))
		if err != nil || code != 0 || len(errOut) > 0 || !bytes.Equal(out, content[50:]) {
			t.Errorf("a read at 50 (limit %d): %d bytes, exit %d, stderr %q, %v; want bytes 50 to 150", limit, len(out), code, errOut, err)
		}
	}
	_, errOut, code, err := c.Exec(ctx, serial, nil, "sh", "-c", pieceLine(21, other, 10))
	var me *MissingRangeError
	if err != nil || code != 255 || !strings.Contains(string(errOut), "never saw bytes 20 to 30") {
		t.Errorf("a read at bytes not recorded: exit %d, stderr %q, %v", code, errOut, err)
	}
	if errs := rp.Errors(); len(errs) != 1 || !errors.As(errs[0], &me) || me.Path != other || me.From != 20 {
		t.Errorf("Errors() = %v", errs)
	}
	for i := range 3 {
		out, _, code, err := c.Exec(ctx, serial, nil, "cat", "/proc/uptime")
		if err != nil || code != 0 || string(out) != "12.5 3.0\n" {
			t.Errorf("poll %d: %q, exit %d, %v", i, out, code, err)
		}
	}
	if errs := rp.Errors(); len(errs) != 1 {
		t.Errorf("Errors() = %v", errs)
	}
}

// TestReplayPollsByLandmark: a poll answers as recorded between the
// services around it, however often it is asked: perfetto's cmdline is
// there until the recorded kill has been replayed, gone after it; the
// kill is Unreplayed until then, the polls never.
func TestReplayPollsByLandmark(t *testing.T) {
	alive, gone := []byte("perfetto\x00-o\x00/data/misc/perfetto-traces/t\x00"), []byte{}
	tr := &transcript.Transcript{Conns: []*transcript.Conn{
		recordedExec("rec-1", "cat /proc/7/cmdline", alive, 0),
		recordedExec("rec-1", "kill -TERM 7", nil, 0),
		recordedExec("rec-1", "cat /proc/7/cmdline", alive, 0),
		recordedExec("rec-1", "cat /proc/7/cmdline", gone, 0),
	}}
	rp, c, serial := serveTranscript(t, tr)
	ctx := testwait.Context(t)
	ask := func(want []byte, argv ...string) {
		t.Helper()
		out, _, code, err := c.Exec(ctx, serial, nil, argv...)
		if err != nil || code != 0 || !bytes.Equal(out, want) {
			t.Errorf("%q: %q, exit %d, %v; want %q", argv, out, code, err, want)
		}
	}
	for range 3 {
		ask(alive, "cat", "/proc/7/cmdline")
	}
	if left := rp.Unreplayed(); len(left) != 1 || left[0] != "shell,v2,raw:kill -TERM 7" {
		t.Errorf("Unreplayed() before the kill = %q", left)
	}
	ask(nil, "kill", "-TERM", "7")
	for _, want := range [][]byte{alive, gone, gone} {
		ask(want, "cat", "/proc/7/cmdline")
	}
	if errs, left := rp.Errors(), rp.Unreplayed(); len(errs) > 0 || len(left) > 0 {
		t.Errorf("Errors() = %v, Unreplayed() = %q", errs, left)
	}
}
