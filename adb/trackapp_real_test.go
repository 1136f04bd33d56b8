package adb_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/sim"
)

// attachADB serves d over the adbd wire protocol on a free loopback port
// and attaches it to the real adb server srv; it returns the serial the
// server gives it (127.0.0.1:<port>).
func attachADB(t *testing.T, srv *adbtest.Server, d *sim.Device) string {
	t.Helper()
	a := sim.NewAdbd(d)
	addr, err := a.Listen("127.0.0.1:" + strconv.Itoa(adbtest.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		d.Close()
	})
	srv.Connect(t, addr.String())
	return addr.String()
}

// TestTrackAppRealADB follows track-app through a real adb server (Debian
// adb 29.0.6, which predates track-app and passes it to the device as it
// is): an Android 12 device lists its debuggable and profileable apps and
// updates the list; an Android 11 device refuses the service, which the
// server reports as FAIL closed. It skips when adb is not installed, and
// fails instead when CI is set.
func TestTrackAppRealADB(t *testing.T) {
	srv := adbtest.StartServer(t)
	d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-s", API: 31, Build: sim.BuildUser}) // release apps have no JDWP
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 3341, Package: "com.debug"}, 31))
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 3307, Package: "com.profileable", NotDebuggable: true, Profileable: true}, 31))
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 3400, Package: "com.release", NotDebuggable: true}, 31))
	old := sim.NewDevice(sim.DeviceConfig{Serial: "sim-r", API: 30})
	old.AddVM(sim.NewVM(sim.AppConfig{PID: 2000, Package: "com.debug"}, 30))
	serial := attachADB(t, srv, d)
	oldSerial := attachADB(t, srv, old)
	c := adb.NewClient(srv.Addr())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lists := make(chan []adb.AppProcess, 16)
	errc := make(chan error, 1)
	go func() { errc <- c.TrackApp(ctx, serial, func(l []adb.AppProcess) { lists <- l }) }()

	prof := adb.AppProcess{PID: 3307, Profileable: true, Architecture: "x86_64"}
	dbg := adb.AppProcess{PID: 3341, Debuggable: true, Profileable: true, Architecture: "x86_64"}
	want := func(what string, w ...adb.AppProcess) {
		t.Helper()
		if got := next(t, lists, what); !reflect.DeepEqual(got, w) {
			t.Fatalf("%s: %+v, want %+v", what, got, w)
		}
	}
	want("first list", prof, dbg)
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 3500, Package: "com.profileable2", NotDebuggable: true, Profileable: true}, 31))
	want("list after pid 3500 started", prof, dbg, adb.AppProcess{PID: 3500, Profileable: true, Architecture: "x86_64"})
	d.RemoveVM(3341)
	want("list after pid 3341 ended", prof, adb.AppProcess{PID: 3500, Profileable: true, Architecture: "x86_64"})

	// The profileable release builds are not in track-jdwp.
	jctx, jcancel := context.WithCancel(context.Background())
	defer jcancel()
	pids := make(chan []int, 16)
	jerrc := make(chan error, 1)
	go func() { jerrc <- c.TrackJDWP(jctx, serial, func(p []int) { pids <- p }) }()
	if got := next(t, pids, "pid list"); len(got) != 0 {
		t.Errorf("track-jdwp lists %v, want no pid", got)
	}
	jcancel()
	if err := next(t, jerrc, "TrackJDWP to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("TrackJDWP = %v, want context.Canceled", err)
	}

	cancel()
	if err := next(t, errc, "TrackApp to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("TrackApp = %v, want context.Canceled", err)
	}

	err := c.TrackApp(ctxT(t), oldSerial, func([]adb.AppProcess) { t.Error("list from an Android 11 device") })
	var fe *adb.FailError
	if !errors.Is(err, adb.ErrTrackAppUnsupported) || !errors.As(err, &fe) || fe.Reason != "closed" {
		t.Fatalf("TrackApp on API 30 through adb = %v, want ErrTrackAppUnsupported from FAIL closed", err)
	}
}
