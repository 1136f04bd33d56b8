package adb_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/jdwp"
)

// callTimeout bounds every call in these tests; a call that needs it has
// hung.
const callTimeout = testwait.Bound

// notWaited bounds calls that must fail at once or at their context's
// short deadline: far above what a loaded machine takes, far below the
// timeouts a wrong call would wait out (callTimeout, gadb's 60 s).
const notWaited = 20 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestVersionFake(t *testing.T) {
	s := newFakeServer(t, steps(expect("host:version"), send("OKAY"+hexs("002a")), waitClose))
	v, err := adb.NewClient(s.addr()).Version(ctxT(t))
	if err != nil || v != 42 {
		t.Fatalf("Version = %d, %v; want 42", v, err)
	}
	if got := s.requests(); !slices.Equal(got, []string{"host:version"}) {
		t.Fatalf("server received %q", got)
	}
}

func TestTrackDevicesFake(t *testing.T) {
	lists := []string{"emu-1\tdevice\n", "emu-1\tdevice\nemu-2\toffline\n", ""}
	s := newFakeServer(t, steps(expect("host:track-devices"),
		send("OKAY"+hexs(lists[0])), send(hexs(lists[1])), send(hexs(lists[2])), waitClose))
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var got [][]adb.DeviceState
	err := adb.NewClient(s.addr()).TrackDevices(ctx, func(l []adb.DeviceState) {
		got = append(got, l)
		if len(got) == len(lists) {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("TrackDevices = %v, want context.Canceled", err)
	}
	want := [][]adb.DeviceState{
		{{Serial: "emu-1", State: "device"}},
		{{Serial: "emu-1", State: "device"}, {Serial: "emu-2", State: "offline"}},
		nil,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lists, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("list %d = %v, want %v", i, got[i], want[i])
		}
	}
}

// A server that ends the stream ends TrackDevices with an error that is
// not a context error.
func TestTrackDevicesServerGoes(t *testing.T) {
	s := newFakeServer(t, steps(expect("host:track-devices"), send("OKAY"+hexs("a\tdevice\n"))))
	n := 0
	err := adb.NewClient(s.addr()).TrackDevices(ctxT(t), func([]adb.DeviceState) { n++ })
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, io.EOF) {
		t.Fatalf("TrackDevices = %v, want an EOF error", err)
	}
	if n != 1 {
		t.Fatalf("%d lists delivered, want 1", n)
	}
}

func TestTrackJDWPFake(t *testing.T) {
	s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"),
		expect("track-jdwp"), send("OKAY"+hexs("")+hexs("123\n4567\n")), send(hexs("4567\n")), waitClose))
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var got [][]int
	err := adb.NewClient(s.addr()).TrackJDWP(ctx, "emu-1", func(pids []int) {
		got = append(got, pids)
		if len(got) == 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("TrackJDWP = %v, want context.Canceled", err)
	}
	if len(got) != 3 || got[0] != nil || !slices.Equal(got[1], []int{123, 4567}) || !slices.Equal(got[2], []int{4567}) {
		t.Fatalf("pid lists %v", got)
	}
	if r := s.requests(); !slices.Equal(r, []string{"host:transport:emu-1", "track-jdwp"}) {
		t.Fatalf("server received %q", r)
	}
}

// The VM's handshake echo may arrive in the same segment as OKAY; those
// bytes belong to the JDWP stream.
func TestOpenJDWPFakeHandshake(t *testing.T) {
	for _, withOkay := range []bool{true, false} {
		t.Run(map[bool]string{true: "echo with OKAY", false: "echo after"}[withOkay], func(t *testing.T) {
			vm := func(p *peer) error {
				if withOkay {
					if err := p.write("OKAY" + jdwp.Handshake); err != nil {
						return err
					}
				} else if err := p.write("OKAY"); err != nil {
					return err
				}
				b := make([]byte, len(jdwp.Handshake))
				if _, err := io.ReadFull(p, b); err != nil {
					return err
				}
				if string(b) != jdwp.Handshake {
					return errors.New("bad client handshake " + string(b))
				}
				if !withOkay {
					if err := p.write(jdwp.Handshake); err != nil {
						return err
					}
				}
				return p.waitClose()
			}
			s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"), expect("jdwp:4242"), vm))
			ctx := ctxT(t)
			c, err := adb.NewClient(s.addr()).OpenJDWP(ctx, "emu-1", 4242)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := jdwp.Open(ctx, c, jdwp.Options{})
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			conn.Close()
		})
	}
}

func TestFailReasons(t *testing.T) {
	tests := []struct {
		reason string
		want   error // nil: no sentinel
	}{
		{"device 'x' not found", adb.ErrDeviceNotFound},
		{"no devices/emulators found", adb.ErrDeviceNotFound},
		{"closed", adb.ErrServiceClosed},
		{"device offline", adb.ErrDeviceOffline},
		{"device still connecting", nil},
		{"more than one device/emulator", nil},
	}
	sentinels := []error{adb.ErrDeviceNotFound, adb.ErrServiceClosed, adb.ErrDeviceOffline, adb.ErrProtocol}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			s := newFakeServer(t, steps(expect("host:transport:x"), send("FAIL"+hexs(tt.reason)), waitClose))
			err := adb.NewClient(s.addr()).TrackJDWP(ctxT(t), "x", func([]int) { t.Error("list delivered after FAIL") })
			var fe *adb.FailError
			if !errors.As(err, &fe) || fe.Reason != tt.reason || fe.Request != "host:transport:x" {
				t.Fatalf("err = %#v, want *FailError with reason %q", err, tt.reason)
			}
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == tt.want) {
					t.Errorf("errors.Is(err, %v) = %v", s, got)
				}
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("message %q lacks the reason", err)
			}
		})
	}
}

// Replies that are not the host protocol end the call with ErrProtocol,
// at once.
func TestMalformedReplies(t *testing.T) {
	type call func(ctx context.Context, c *adb.Client) error
	version := func(ctx context.Context, c *adb.Client) error { _, err := c.Version(ctx); return err }
	trackDevices := func(ctx context.Context, c *adb.Client) error {
		return c.TrackDevices(ctx, func([]adb.DeviceState) {})
	}
	trackJDWP := func(ctx context.Context, c *adb.Client) error { return c.TrackJDWP(ctx, "x", func([]int) {}) }
	openJDWP := func(ctx context.Context, c *adb.Client) error {
		conn, err := c.OpenJDWP(ctx, "x", 1)
		if conn != nil {
			conn.Close()
		}
		return err
	}
	transportOkay := steps(expect("host:transport:x"), send("OKAY"))
	tests := []struct {
		name string
		sc   script
		call call
	}{
		{"bad status", steps(expect("host:version"), send("OKEY"), waitClose), version},
		{"lowercase status", steps(expect("host:version"), send("okay"), waitClose), version},
		{"non-hex length", steps(expect("host:version"), send("OKAY00g1x"), waitClose), version},
		{"signed length", steps(expect("host:version"), send("OKAY+001x"), waitClose), version},
		{"non-hex FAIL length", steps(expect("host:version"), send("FAILzzzz"), waitClose), version},
		{"non-hex version", steps(expect("host:version"), send("OKAY"+hexs("zz")), waitClose), version},
		{"bad status on transport", steps(expect("host:transport:x"), send("NOPE"), waitClose), openJDWP},
		{"bad status on jdwp", steps(transportOkay, expect("jdwp:1"), send("FA1L"), waitClose), openJDWP},
		{"device line without tab", steps(expect("host:track-devices"), send("OKAY"+hexs("emu-1 device\n")), waitClose), trackDevices},
		{"device line without serial", steps(expect("host:track-devices"), send("OKAY"+hexs("\tdevice\n")), waitClose), trackDevices},
		{"non-hex device list length", steps(expect("host:track-devices"), send("OKAY"+hexs("a\tdevice\n")+"xyz!"), waitClose), trackDevices},
		{"pid not a number", steps(transportOkay, expect("track-jdwp"), send("OKAY"+hexs("12x\n")), waitClose), trackJDWP},
		{"pid zero", steps(transportOkay, expect("track-jdwp"), send("OKAY"+hexs("0\n")), waitClose), trackJDWP},
		{"pid negative", steps(transportOkay, expect("track-jdwp"), send("OKAY"+hexs("-5\n")), waitClose), trackJDWP},
		{"pid list length not hex", steps(transportOkay, expect("track-jdwp"), send("OKAY"+"0x10"), waitClose), trackJDWP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeServer(t, tt.sc)
			start := time.Now()
			err := tt.call(ctxT(t), adb.NewClient(s.addr()))
			if !errors.Is(err, adb.ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
			if d := time.Since(start); d > notWaited {
				t.Fatalf("took %v to notice", d)
			}
			if !strings.HasPrefix(err.Error(), "adb: ") {
				t.Errorf("message %q lacks the package prefix", err)
			}
		})
	}
}

// The longest reply 4 hex digits can declare (65,535 bytes) is read whole;
// one cut short ends the call with an error instead of a hang. (The
// client's 1 MiB reply limit cannot be reached through 4 hex digits.)
func TestLongAndTruncatedReplies(t *testing.T) {
	var b strings.Builder
	for b.Len()+len("emulator-00000\tdevice\n") <= 0xffff {
		b.WriteString("emulator-00000\tdevice\n")
	}
	list := b.String()
	list += strings.Repeat("\n", 0xffff-len(list)) // empty lines are skipped
	s := newFakeServer(t,
		steps(expect("host:track-devices"), send("OKAY"+hexs(list)), waitClose),
		steps(expect("host:track-devices"), send("OKAYffff"+list[:100])), // then closes
		steps(expect("host:version"), send("OK")),
	)
	c := adb.NewClient(s.addr())
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	n := 0
	err := c.TrackDevices(ctx, func(l []adb.DeviceState) { n = len(l); cancel() })
	if !errors.Is(err, context.Canceled) || n == 0 {
		t.Fatalf("65,535-byte list: %d devices, err %v", n, err)
	}

	err = c.TrackDevices(ctxT(t), func([]adb.DeviceState) { t.Error("truncated list delivered") })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated list: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := c.Version(ctxT(t)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated status: %v, want io.ErrUnexpectedEOF", err)
	}
}

// A server that accepts and never answers holds a call only as long as
// the caller's context.
func TestContextBoundsSilentServer(t *testing.T) {
	silent := func(req string) script { return steps(expect(req), waitClose) }
	s := newFakeServer(t,
		silent("host:version"),
		silent("host:track-devices"),
		silent("host:transport:x"),
		silent("host:track-devices"),
	)
	c := adb.NewClient(s.addr())
	var notCtx []string
	check := func(name string, err error, want error, start time.Time) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if d := time.Since(start); d > notWaited {
			t.Fatalf("%s: returned after %v", name, d)
		}
		if !errors.Is(err, want) {
			notCtx = append(notCtx, name+": "+err.Error())
		}
	}
	deadline := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}

	start := time.Now()
	_, err := c.Version(deadline())
	check("Version", err, context.DeadlineExceeded, start)

	start = time.Now()
	err = c.TrackDevices(deadline(), func([]adb.DeviceState) {})
	check("TrackDevices", err, context.DeadlineExceeded, start)

	start = time.Now()
	_, err = c.OpenJDWP(deadline(), "x", 1)
	check("OpenJDWP", err, context.DeadlineExceeded, start)

	// Cancelled rather than timed out.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	err = c.TrackDevices(ctx, func([]adb.DeviceState) {})
	check("TrackDevices cancelled", err, context.Canceled, start)

	if len(notCtx) > 0 {
		t.Fatalf("regression: calls bounded by the context return socket timeouts, not the context's error, so "+
			"errors.Is(err, context.DeadlineExceeded/Canceled) is false: %q (adb/client.go: send and readHex wrap the "+
			"i/o timeout; map it to ctx.Err() when ctx is done, as jdwp's ctxErr does)", notCtx)
	}
}

func TestDialRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	if _, err := adb.NewClient(addr).Version(ctxT(t)); err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Version on a closed port: %v", err)
	}
	if d := time.Since(start); d > notWaited {
		t.Fatalf("took %v", d)
	}
}

func TestParseDevices(t *testing.T) {
	got, err := adb.ParseDevices([]byte("emulator-5554\tdevice\n192.168.1.2:5555\toffline\n\nR58M\tunauthorized\r\nx\tno permissions; see [http://developer.android.com/tools/device.html]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []adb.DeviceState{
		{Serial: "emulator-5554", State: "device"}, {Serial: "192.168.1.2:5555", State: "offline"},
		{Serial: "R58M", State: "unauthorized"},
		{Serial: "x", State: "no permissions; see [http://developer.android.com/tools/device.html]"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ParseDevices = %v", got)
	}
	for _, bad := range []string{"emu device\n", "\tdevice\n", "emu"} {
		if _, err := adb.ParseDevices([]byte(bad)); !errors.Is(err, adb.ErrProtocol) {
			t.Errorf("ParseDevices(%q) = %v, want ErrProtocol", bad, err)
		}
	}
}

func TestParsePIDs(t *testing.T) {
	got, err := adb.ParsePIDs([]byte("1\n32768\n\n 77 \n"))
	if err != nil || !slices.Equal(got, []int{1, 32768, 77}) {
		t.Fatalf("ParsePIDs = %v, %v", got, err)
	}
	for _, bad := range []string{"x\n", "0\n", "-1\n", "1 2\n", "99999999999999999999\n"} {
		if _, err := adb.ParsePIDs([]byte(bad)); !errors.Is(err, adb.ErrProtocol) {
			t.Errorf("ParsePIDs(%q) = %v, want ErrProtocol", bad, err)
		}
	}
}

func TestFailErrorUnwrap(t *testing.T) {
	for reason, want := range map[string]error{
		"device 'emulator-5554' not found": adb.ErrDeviceNotFound,
		"device not found":                 adb.ErrDeviceNotFound,
		"no devices/emulators found":       adb.ErrDeviceNotFound,
		"closed":                           adb.ErrServiceClosed,
		"device offline":                   adb.ErrDeviceOffline,
		"device unauthorized.\nThis adb server's $ADB_VENDOR_KEYS is not set": nil,
		"unknown host service": nil,
	} {
		err := error(&adb.FailError{Request: "r", Reason: reason})
		if got := errors.Unwrap(err); got != want {
			t.Errorf("%q unwraps to %v, want %v", reason, got, want)
		}
	}
}

func TestDefaultAddress(t *testing.T) {
	tests := []struct {
		socket, port string // "-" leaves the variable unset
		want         string
	}{
		{"-", "-", "127.0.0.1:5037"},
		{"", "", "127.0.0.1:5037"},
		{"tcp:10.1.2.3:5038", "-", "10.1.2.3:5038"},
		{"tcp:adb-host:6000", "7000", "adb-host:6000"}, // the socket wins
		{"tcp:[::1]:5037", "-", "[::1]:5037"},
		{"-", "5555", "127.0.0.1:5555"},
		{"-", "notaport", "127.0.0.1:5037"},
		{"-", "70000", "127.0.0.1:5037"},
		{"localabstract:adb", "6001", "127.0.0.1:6001"}, // not TCP: ignored
	}
	for _, tt := range tests {
		t.Run(tt.socket+"|"+tt.port, func(t *testing.T) {
			setenv(t, "ADB_SERVER_SOCKET", tt.socket)
			setenv(t, "ANDROID_ADB_SERVER_PORT", tt.port)
			if got := adb.DefaultAddress(); got != tt.want {
				t.Errorf("DefaultAddress() = %q, want %q", got, tt.want)
			}
		})
	}
	// adb also takes "tcp:<port>" (socket_spec.cpp parse_tcp_socket_spec),
	// meaning the local host.
	setenv(t, "ADB_SERVER_SOCKET", "tcp:5039")
	setenv(t, "ANDROID_ADB_SERVER_PORT", "-")
	got := adb.DefaultAddress()
	if _, port, err := net.SplitHostPort(got); err != nil || port != "5039" {
		t.Fatalf("regression: ADB_SERVER_SOCKET=tcp:5039 gives address %q, which cannot be dialled "+
			"(adb/client.go DefaultAddress strips \"tcp:\" and keeps a bare port; join it with 127.0.0.1)", got)
	}
}

// setenv sets (or with "-" unsets) an environment variable for the test.
func setenv(t *testing.T, k, v string) {
	t.Setenv(k, "") // restores the old value at the end
	if v == "-" {
		os.Unsetenv(k)
		return
	}
	os.Setenv(k, v)
}

// A list equal to the last one delivered tells nothing (the server sends a
// list at once and on every change): it is read and dropped, so that a
// flood of repeats costs no caller's work.
func TestTrackRepeatsDropped(t *testing.T) {
	same := hexs("emu-1\tdevice\n")
	pids := hexs("1234\n")
	s := newFakeServer(t,
		steps(expect("host:track-devices"), send("OKAY"+same+same+same+hexs("")+hexs("")+same), waitClose),
		steps(expect("host:transport:x"), send("OKAY"), expect("track-jdwp"), send("OKAY"+pids+pids+hexs("")+hexs("")+pids), waitClose),
	)
	c := adb.NewClient(s.addr())
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var lists [][]adb.DeviceState
	err := c.TrackDevices(ctx, func(l []adb.DeviceState) {
		if lists = append(lists, l); len(lists) == 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || len(lists) != 3 || len(lists[0]) != 1 || len(lists[1]) != 0 || len(lists[2]) != 1 {
		t.Fatalf("TrackDevices delivered %v (%v), want the list, the empty list, the list", lists, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var got [][]int
	err = c.TrackJDWP(ctx, "x", func(p []int) {
		if got = append(got, p); len(got) == 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || len(got) != 3 || len(got[1]) != 0 {
		t.Fatalf("TrackJDWP delivered %v (%v), want [1234] [] [1234]", got, err)
	}
}
