package adb_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/jdwp"
	"github.com/alloctrack/alloctrack/sim"
)

// simServer serves devices through a sim.HostServer on 127.0.0.1 and
// returns a client of it.
func simServer(t *testing.T, devs ...*sim.Device) (*sim.HostServer, *adb.Client) {
	t.Helper()
	h := sim.NewHostServer()
	addr, err := h.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	for _, d := range devs {
		h.AddDevice(d)
		t.Cleanup(d.Close)
	}
	return h, adb.NewClient(addr.String())
}

func TestVersionSim(t *testing.T) {
	_, c := simServer(t)
	if v, err := c.Version(ctxT(t)); err != nil || v != 41 {
		t.Fatalf("Version = %d, %v; want 41", v, err)
	}
}

// next waits for the next value on ch.
func next[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(callTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestTrackDevicesSim(t *testing.T) {
	d1 := sim.NewDevice(sim.DeviceConfig{Serial: "sim-1"})
	h, c := simServer(t, d1)
	d2 := sim.NewDevice(sim.DeviceConfig{Serial: "sim-2"})
	t.Cleanup(d2.Close)

	ctx, cancel := context.WithCancel(context.Background())
	lists := make(chan []adb.DeviceState, 16)
	errc := make(chan error, 1)
	go func() { errc <- c.TrackDevices(ctx, func(l []adb.DeviceState) { lists <- l }) }()

	want := func(w ...adb.DeviceState) {
		t.Helper()
		if got := next(t, lists, "a device list"); !slices.Equal(got, w) {
			t.Fatalf("list %v, want %v", got, w)
		}
	}
	want(adb.DeviceState{Serial: "sim-1", State: "device"})
	h.AddDevice(d2)
	want(adb.DeviceState{Serial: "sim-1", State: "device"}, adb.DeviceState{Serial: "sim-2", State: "device"})
	h.SetState("sim-1", "offline")
	want(adb.DeviceState{Serial: "sim-1", State: "offline"}, adb.DeviceState{Serial: "sim-2", State: "device"})
	h.RemoveDevice("sim-1")
	want(adb.DeviceState{Serial: "sim-2", State: "device"})

	cancel()
	if err := next(t, errc, "TrackDevices to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("TrackDevices = %v, want context.Canceled", err)
	}
}

func TestTrackJDWPSim(t *testing.T) {
	d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-1"})
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 300, Package: "com.a"}, 30))
	_, c := simServer(t, d)

	ctx, cancel := context.WithCancel(context.Background())
	lists := make(chan []int, 16)
	errc := make(chan error, 1)
	go func() { errc <- c.TrackJDWP(ctx, "sim-1", func(p []int) { lists <- p }) }()

	if got := next(t, lists, "pid list"); !slices.Equal(got, []int{300}) {
		t.Fatalf("pids %v", got)
	}
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 301, Package: "com.b"}, 30))
	if got := next(t, lists, "pid list"); !slices.Equal(got, []int{300, 301}) {
		t.Fatalf("pids %v", got)
	}
	d.RemoveVM(300)
	if got := next(t, lists, "pid list"); !slices.Equal(got, []int{301}) {
		t.Fatalf("pids %v", got)
	}
	cancel()
	if err := next(t, errc, "TrackJDWP to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("TrackJDWP = %v, want context.Canceled", err)
	}

	// The device going away ends the stream with an error.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { errc <- c.TrackJDWP(ctx2, "sim-1", func(p []int) { lists <- p }) }()
	next(t, lists, "pid list")
	d.Disconnect()
	if err := next(t, errc, "TrackJDWP to end"); err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("TrackJDWP after disconnect = %v, want a stream error", err)
	}
}

func TestOpenJDWPSim(t *testing.T) {
	d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-1", API: 30})
	vm := sim.NewVM(sim.AppConfig{PID: 4321, Package: "com.example.hello"}, 30)
	d.AddVM(vm)
	_, c := simServer(t, d)
	ctx := ctxT(t)

	rwc, err := c.OpenJDWP(ctx, "sim-1", 4321)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := jdwp.Open(ctx, rwc, jdwp.Options{})
	if err != nil {
		t.Fatalf("JDWP handshake with the simulated VM: %v", err)
	}
	defer conn.Close()
	hello, err := ddms.NewClient(conn).Hello(ctx)
	if err != nil {
		t.Fatalf("HELO: %v", err)
	}
	if hello.PID != 4321 || hello.AppName != "com.example.hello" {
		t.Fatalf("HELO says pid %d, app %q", hello.PID, hello.AppName)
	}
	// The stream has no deadline left from the opening context.
	time.Sleep(50 * time.Millisecond)
	if _, err := ddms.NewClient(conn).Hello(ctx); err != nil {
		t.Fatalf("second HELO: %v", err)
	}
	if st := vm.Stats(); st.Connections != 1 || st.NonDDM != 0 {
		t.Fatalf("VM stats %+v", st)
	}
}

func TestOpenJDWPFailuresSim(t *testing.T) {
	d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-1"})
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 10, Package: "com.a"}, 30))
	off := sim.NewDevice(sim.DeviceConfig{Serial: "sim-off"})
	h, c := simServer(t, d, off)
	h.SetState("sim-off", "offline")

	for _, tt := range []struct {
		serial string
		pid    int
		want   error
	}{
		{"nope", 10, adb.ErrDeviceNotFound},
		{"sim-1", 11, adb.ErrServiceClosed}, // no such process
		{"sim-off", 10, adb.ErrDeviceOffline},
	} {
		conn, err := c.OpenJDWP(ctxT(t), tt.serial, tt.pid)
		if conn != nil {
			conn.Close()
		}
		if !errors.Is(err, tt.want) {
			t.Errorf("OpenJDWP(%s, %d) = %v, want %v", tt.serial, tt.pid, err, tt.want)
		}
	}
	err := c.TrackJDWP(ctxT(t), "nope", func([]int) {})
	if !errors.Is(err, adb.ErrDeviceNotFound) {
		t.Errorf("TrackJDWP(nope) = %v, want ErrDeviceNotFound", err)
	}
}

func TestGadbSim(t *testing.T) {
	d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-1", API: 28, Product: "sim_p", Model: "Pixel 3", Device: "blueline"})
	d2 := sim.NewDevice(sim.DeviceConfig{Serial: "sim-2", API: 31})
	h, c := simServer(t, d, d2)
	ctx := ctxT(t)

	devs, err := c.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []adb.DeviceInfo{
		{Serial: "sim-1", Product: "sim_p", Model: "Pixel_3", Device: "blueline"},
		{Serial: "sim-2", Product: "sim_sim-2", Model: "Simulated_Device", Device: "simulated"},
	}
	if !slices.Equal(devs, want) {
		t.Fatalf("Devices = %+v, want %+v", devs, want)
	}

	out, err := c.Shell(ctx, "sim-1", "echo", "hello", "world")
	if err != nil || out != "hello world\n" {
		t.Fatalf("Shell echo = %q, %v", out, err)
	}
	for serial, want := range map[string]string{"sim-1": "28", "sim-2": "31"} {
		if v, err := c.Prop(ctx, serial, "ro.build.version.sdk"); err != nil || v != want {
			t.Errorf("Prop(%s) = %q, %v; want %q", serial, v, err, want)
		}
	}
	if _, err := c.Shell(ctx, "nope", "echo"); !errors.Is(err, adb.ErrDeviceNotFound) {
		t.Errorf("Shell on an unknown serial = %v, want ErrDeviceNotFound", err)
	}

	// A device that is listed but offline: the FAIL from the server should
	// become the package's sentinel, as it does on the smart-socket path.
	h.SetState("sim-2", "offline")
	_, err = c.Prop(ctx, "sim-2", "ro.build.version.sdk")
	if err == nil {
		t.Fatal("Prop on an offline device succeeded")
	}
	if !errors.Is(err, adb.ErrDeviceOffline) {
		t.Fatalf("regression: Shell/Prop on an offline device return %q, not ErrDeviceOffline "+
			"(adb/gadb.go passes gadb's \"command failed: <reason>\" through; turn the reason into *FailError there)", err)
	}
}

// gadb has no context: when the caller's context ends first, runCtx
// returns at once but leaves the gadb call running until gadb's own read
// timeout (60 s) or the server answers or closes.
func TestGadbContextLeavesCallRunning(t *testing.T) {
	// gadb.NewClientWith opens (and closes) a probe connection first.
	s := newFakeServer(t, waitClose, steps(expect("host:devices-l"), waitClose))
	before := goleak.IgnoreCurrent()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := adb.NewClient(s.addr()).Devices(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Devices = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > notWaited {
		t.Fatalf("Devices returned after %v", d)
	}
	leak := goleak.Find(before)
	if leak == nil {
		return // gadb's call ended too
	}
	if !strings.Contains(leak.Error(), "gadb") && !strings.Contains(leak.Error(), "runCtx") {
		t.Fatalf("unexpected goroutine left: %v", leak)
	}
	t.Logf("after the context ended, the gadb call is still running (ends with gadb's 60 s read timeout or the server)")
	// Closing the server's side ends the call; nothing is left after that.
	s.closeConns()
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutine still running after the server closed: %v", err)
	}
}
