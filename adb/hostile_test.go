package adb_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/adb/adbtest"
)

// hostileCall is one kind of request the client makes.
type hostileCall struct {
	name string
	host bool // a host service: the server's mode applies, not the device's
	call func(ctx context.Context, c *adb.Client, serial string) error
	// Modes whose replies to this call are well-formed: a STAT reply has
	// no length (the fake answers it with a file of 1 MiB before a
	// hostile RECV), and an endless devices-l list is 65,535 bytes of
	// "endless endless …", one device line.
	mayPass map[adbtest.Mode]bool
}

// stalls are the modes that leave the client waiting for its context.
var stalls = map[adbtest.Mode]bool{adbtest.Stall: true, adbtest.HugeLength: true, adbtest.Endless: true}

var hostileCalls = []hostileCall{
	// name, host service, call, modes it may pass in
	{"Version", true, func(ctx context.Context, c *adb.Client, _ string) error { _, err := c.Version(ctx); return err }, nil},
	{"Devices", true, func(ctx context.Context, c *adb.Client, _ string) error { _, err := c.Devices(ctx); return err },
		map[adbtest.Mode]bool{adbtest.Endless: true}},
	{"TrackDevices", true, func(ctx context.Context, c *adb.Client, _ string) error {
		return c.TrackDevices(ctx, func([]adb.DeviceState) {})
	}, nil},
	{"Shell", false, func(ctx context.Context, c *adb.Client, s string) error {
		_, err := c.Shell(ctx, s, "echo")
		return err
	}, nil},
	{"Prop", false, func(ctx context.Context, c *adb.Client, s string) error {
		_, err := c.Prop(ctx, s, "ro.build.version.sdk")
		return err
	}, nil},
	{"Processes", false, func(ctx context.Context, c *adb.Client, s string) error {
		_, err := c.Processes(ctx, s, 30)
		return err
	}, nil},
	{"Exec", false, func(ctx context.Context, c *adb.Client, s string) error {
		_, _, _, err := c.Exec(ctx, s, []byte("in"), "cat")
		return err
	}, nil},
	{"TrackJDWP", false, func(ctx context.Context, c *adb.Client, s string) error { return c.TrackJDWP(ctx, s, func([]int) {}) }, nil},
	{"TrackApp", false, func(ctx context.Context, c *adb.Client, s string) error {
		return c.TrackApp(ctx, s, func([]adb.AppProcess) {})
	}, nil},
	{"OpenJDWP", false, func(ctx context.Context, c *adb.Client, s string) error {
		conn, err := c.OpenJDWP(ctx, s, 1234)
		if err == nil {
			// The stream is the caller's; read what a hostile one
			// holds, as far as the context lets us.
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			_, err = io.CopyN(io.Discard, conn, 1<<20)
			conn.Close()
			if err == nil {
				err = errors.New("a MiB of JDWP stream read")
			}
		}
		return err
	}, nil},
	{"Stat", false, func(ctx context.Context, c *adb.Client, s string) error {
		_, _, err := c.Stat(ctx, s, "/data/local/tmp/f")
		return err
	}, map[adbtest.Mode]bool{adbtest.NegativeLength: true, adbtest.HugeLength: true, adbtest.Endless: true}},
	{"Pull", false, func(ctx context.Context, c *adb.Client, s string) error {
		_, err := c.Pull(ctx, s, "/data/local/tmp/f", io.Discard)
		return err
	}, nil},
}

// Every request kind, against every hostile mode of the fake adb server:
// an error (never a panic: gadb v0.1.0 made a slice of capacity -1 from
// OKAY-001 in a goroutine nothing recovered, which killed the process),
// returned no later than the context, and the connection closed.
func TestHostileServer(t *testing.T) {
	for _, m := range adbtest.Hostile {
		for _, hc := range hostileCalls {
			t.Run(string(m)+"/"+hc.name, func(t *testing.T) {
				t.Parallel()
				cfg := adbtest.Config{Devices: []adbtest.Device{{Serial: "hostile-1", Mode: m}}}
				if hc.host {
					cfg.Host = m
				}
				s := adbtest.NewServer(cfg)
				defer s.Close()
				// A stalling mode ends by the context: a short one. Any
				// other must end on its own, long before a context a
				// loaded machine cannot miss.
				timeout := 30 * time.Second
				if stalls[m] {
					timeout = time.Second
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				err := hc.call(ctx, adb.NewClient(s.Addr()), "hostile-1")
				if err == nil && !hc.mayPass[m] {
					t.Fatalf("%s answered %s: no error", hc.name, m)
				}
				// Whatever error it wraps: a FAIL whose length promised
				// more than came hid its wait in a reason cut short.
				if !stalls[m] && (errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil) {
					t.Errorf("%s answered %s: the call waited for its context: %v", hc.name, m, err)
				}
				waitClosed(t, s)
			})
		}
	}
}

// waitClosed waits until the client's side of every connection is closed
// and the server has noticed.
func waitClosed(t *testing.T, s *adbtest.Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.Open() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open 30 s after the call returned: the client still reads", s.Open())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The lengths of item 7 of issue 33, one by one, on the requests that
// read them: a clean ErrProtocol or *FailError, never a crash.
func TestNegativeAndNonHexLengths(t *testing.T) {
	for _, tt := range []struct {
		mode adbtest.Mode
		want error
	}{
		{adbtest.NegativeLength, adb.ErrProtocol},
		{adbtest.FailNegative, adb.ErrProtocol},
		{adbtest.BadHex, adb.ErrProtocol},
	} {
		s := adbtest.NewServer(adbtest.Config{Host: tt.mode, Devices: []adbtest.Device{{Serial: "d", Mode: tt.mode}}})
		c := adb.NewClient(s.Addr())
		if _, err := c.Devices(ctxT(t)); !errors.Is(err, tt.want) {
			t.Errorf("%s: Devices = %v, want %v", tt.mode, err, tt.want)
		}
		s.Close()
		s = adbtest.NewServer(adbtest.Config{Devices: []adbtest.Device{{Serial: "d", Mode: tt.mode}}})
		c = adb.NewClient(s.Addr())
		if _, err := c.Shell(ctxT(t), "d", "getprop", "ro.build.version.sdk"); !errors.Is(err, tt.want) {
			t.Errorf("%s: Shell = %v, want %v", tt.mode, err, tt.want)
		}
		s.Close()
	}
}

// A shell: reply that never ends stops at MaxShellOutput (gadb read it
// all, for 60 s).
func TestShellEndlessBounded(t *testing.T) {
	s := adbtest.NewServer(adbtest.Config{Devices: []adbtest.Device{{Serial: "d", Mode: adbtest.Endless}}})
	defer s.Close()
	allocated := allocatedBy(func() {
		_, err := adb.NewClient(s.Addr()).Shell(ctxLong(t), "d", "getprop")
		if !errors.Is(err, adb.ErrOutputTooLarge) {
			t.Errorf("Shell on an endless stream = %v, want ErrOutputTooLarge", err)
		}
	})
	// A buffer that doubles as bytes arrive, up to the limit, allocates
	// about twice the limit in all; slack is for the rest of the process.
	if allocated > 2*adb.MaxShellOutput+allocSlack {
		t.Errorf("Shell allocated %d bytes for at most %d of output", allocated, adb.MaxShellOutput)
	}
	waitClosed(t, s)
}

// When the context ends, a never-ending shell: read stops and its
// connection closes (gadb went on reading for 60 s in a goroutine of its
// own after the call had returned).
func TestShellContextStopsStream(t *testing.T) {
	s := adbtest.NewServer(adbtest.Config{Devices: []adbtest.Device{{Serial: "d", Mode: adbtest.Stall}}})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := adb.NewClient(s.Addr()).Shell(ctx, "d", "getprop"); errc <- err }()
	waitRequests(t, s, 2) // host:transport, shell:
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Shell = %v, want context.Canceled", err)
	}
	waitClosed(t, s)
}

func waitRequests(t *testing.T, s *adbtest.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(s.Requests()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the server read %q, want %d requests", s.Requests(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An endless shell v2 stream stops at MaxExecOutput.
func TestExecEndlessBounded(t *testing.T) {
	s := adbtest.NewServer(adbtest.Config{Devices: []adbtest.Device{{Serial: "d", Mode: adbtest.Endless}}})
	defer s.Close()
	allocated := allocatedBy(func() {
		out, _, _, err := adb.NewClient(s.Addr()).Exec(ctxLong(t), "d", nil, "cat")
		if !errors.Is(err, adb.ErrOutputTooLarge) || out != nil {
			t.Errorf("Exec on an endless stream = %d bytes, %v; want none and ErrOutputTooLarge", len(out), err)
		}
	})
	if allocated > 2*adb.MaxExecOutput+allocSlack {
		t.Errorf("Exec allocated %d bytes for at most %d of output", allocated, adb.MaxExecOutput)
	}
	waitClosed(t, s)
}

// A shell v2 packet's declared length sizes nothing: a packet that says
// it is just under the limit and brings 5 bytes costs what came, not what
// it declared (Exec made the whole packet before its bytes arrived).
func TestExecDeclaredLengthAllocatesNothing(t *testing.T) {
	declared := []byte{1, 0, 0, 0, 0}
	n := uint32(adb.MaxExecOutput - 1)
	declared[1], declared[2], declared[3], declared[4] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	s := newFakeServer(t, steps(expect("host:transport:d"), send("OKAY"), expect("shell,v2,raw:cat"),
		send("OKAY"+string(declared)+"short"))) // then closes
	var err error
	allocated := allocatedBy(func() { _, _, _, err = adb.NewClient(s.addr()).Exec(ctxT(t), "d", nil, "cat") })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Exec = %v, want io.ErrUnexpectedEOF", err)
	}
	if allocated > 1<<20 {
		t.Fatalf("a packet declaring %d bytes and bringing 5 made Exec allocate %d bytes", n, allocated)
	}
}

// allocSlack is what the rest of the test process may allocate while a
// call is measured (the fake server, the runtime, the race detector).
const allocSlack = 2 << 20

// allocatedBy returns the bytes f allocated (with the runtime's other
// goroutines, which in these tests allocate little).
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// ctxLong is for calls that must end on their own, by a bound other than
// the context's.
func ctxLong(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
