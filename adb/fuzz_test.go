package adb

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
)

// One fuzz target per reply the client parses. Each replays bytes as a
// server's answer and checks that nothing panics and nothing returned is
// larger than what was sent. Crashers land in testdata/fuzz/<target>/.

// replayConn is the client's side of a connection whose answers are
// data; what the client writes is dropped.
type replayConn struct{ net.Conn } // only Write is called

func (replayConn) Write(b []byte) (int, error) { return len(b), nil }

func replay(data []byte) *conn {
	return &conn{Conn: replayConn{}, r: bufio.NewReader(bytes.NewReader(data)), stop: func() bool { return true }, ctx: context.Background()}
}

func le32(v uint32) string { return string(binary.LittleEndian.AppendUint32(nil, v)) }

// FuzzReadStatusAndLength: an OKAY/FAIL status, then framed replies (a
// version, a device or pid list, a track-app message, a FAIL reason).
func FuzzReadStatusAndLength(f *testing.F) {
	for _, s := range []string{"OKAY0004002a", "FAIL0006closed", "OKAY-001", "FAIL-001", "OKAYzzzz", "FAILzzzz",
		"OKAY+001x", "OKAYffffshort", "OKAY0000", "OKAY0005emu\tdevice", "OKEY", "OKAY 001x", "OKAY0x10"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cn := replay(data)
		err := cn.readStatus("req")
		var fe *FailError
		if errors.As(err, &fe) && len(fe.Reason) > len(data) {
			t.Fatalf("FAIL reason of %d bytes from %d", len(fe.Reason), len(data))
		}
		for err == nil {
			var b []byte
			if b, err = cn.readHex("reply"); len(b) > len(data) {
				t.Fatalf("reply of %d bytes from %d", len(b), len(data))
			}
		}
	})
}

// FuzzParseDevices: a host:devices / track-devices list.
func FuzzParseDevices(f *testing.F) {
	for _, s := range []string{"emu-1\tdevice\n", "a\tdevice\nb\toffline\n", "", "\tdevice\n", "x y\n", "\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := ParseDevices(data)
		if err == nil && len(list) > len(data)/2 {
			t.Fatalf("%d devices from %d bytes", len(list), len(data))
		}
	})
}

// FuzzParseDevicesLong: a host:devices-l list.
func FuzzParseDevicesLong(f *testing.F) {
	for _, s := range []string{
		"emulator-5554          device product:sdk_gphone64 model:sdk_gphone64_x86_64 device:emu64x transport_id:1\n",
		"0123456789ABCDEF       no permissions (user in plugdev group); see [http://developer.android.com/tools/device.html] usb:1-1 transport_id:2\n",
		"x\n", "", "a b model: product:p:q\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := ParseDevicesLong(data)
		if err == nil && len(list) > len(data)/2 {
			t.Fatalf("%d devices from %d bytes", len(list), len(data))
		}
	})
}

// FuzzParsePIDs: a track-jdwp list.
func FuzzParsePIDs(f *testing.F) {
	for _, s := range []string{"1234\n", "1\n22\n333\n", "", "-5\n", "0\n", "12x\n", "99999999999999999999\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pids, err := ParsePIDs(data)
		for _, p := range pids {
			if p <= 0 || err != nil {
				t.Fatalf("pid %d (err %v) from %q", p, err, data)
			}
		}
	})
}

// FuzzParsePS: shell: output of ps and pidof.
func FuzzParsePS(f *testing.F) {
	for _, s := range []string{
		"USER     PID   PPID  VSIZE  RSS     WCHAN    PC         NAME\nu0_a54    2305  180   498120 27512 ffffffff 4006ba10 S com.example.app\n",
		"USER           PID  PPID     VSZ    RSS WCHAN            ADDR S NAME\nu0_a54        2305   180 1234567  45678 SyS_epoll_wait      0 S com.example.app\r\n",
		"", "PID\n", "NAME PID\n1 x\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		procs, err := ParsePS(out)
		for _, p := range procs {
			if p.PID <= 0 || err != nil {
				t.Fatalf("pid %d (err %v)", p.PID, err)
			}
		}
		pids, _ := parsePids(out)
		for _, p := range pids {
			if p <= 0 {
				t.Fatalf("pidof pid %d", p)
			}
		}
	})
}

// FuzzShellV2: the packets of shell protocol v2 (Exec).
func FuzzShellV2(f *testing.F) {
	pk := func(id byte, n uint32, data string) string { return string([]byte{id}) + le32(n) + data }
	for _, s := range []string{
		pk(1, 3, "out") + pk(2, 3, "err") + pk(3, 1, "\x07"),
		pk(1, 0xffffffff, "short"), pk(1, 0xfffffff0, "short"), pk(5, 4, "wxyz") + pk(3, 1, "\x00"),
		pk(3, 2, "\x00\x00"), pk(1, 5, "ab"), "", "\x01\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var o shellOutput
		o.read(replay(data), 1<<20)
		if o.stdout.n+o.stderr.n > len(data) {
			t.Fatalf("%d bytes of output from %d", o.stdout.n+o.stderr.n, len(data))
		}
	})
}

// FuzzSyncReplies: a STAT answer, then the answer to RECV (Stat, Pull).
func FuzzSyncReplies(f *testing.F) {
	stat := "STAT" + le32(0o100644) + le32(5) + le32(0)
	for _, s := range []string{
		stat + "DATA" + le32(5) + "hello" + "DONE" + le32(0),
		stat + "DATA" + le32(0xffffffff) + "short", stat + "FAIL" + le32(0xffffffff) + "short",
		stat + "ZZZZ" + le32(0), "ZZZZ" + le32(0) + le32(0) + le32(0), stat + "FAIL" + le32(4) + "nope", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cn := replay(data)
		_, size, err := readStat(cn, "/f")
		if err != nil {
			return
		}
		var w bytes.Buffer
		n, _ := recvData(cn, "d", "/f", size, &w)
		if n > int64(len(data)) || int64(w.Len()) != n {
			t.Fatalf("pulled %d bytes (wrote %d) from %d", n, w.Len(), len(data))
		}
	})
}

var _ io.Reader = (*conn)(nil)
