package adbtest_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/adb/adbtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Honest replies are what the adb client expects of a server with an idle
// device.
func TestHonest(t *testing.T) {
	s := adbtest.NewServer(adbtest.Config{Devices: []adbtest.Device{{Serial: "d1", API: 31}, {Serial: "d2"}}})
	defer s.Close()
	c := adb.NewClient(s.Addr())
	ctx := ctxT(t)
	if v, err := c.Version(ctx); err != nil || v != 41 {
		t.Errorf("Version = %d, %v", v, err)
	}
	if devs, err := c.Devices(ctx); err != nil || len(devs) != 2 || devs[0].Serial != "d1" || devs[1].Product != "hostile" {
		t.Errorf("Devices = %+v, %v", devs, err)
	}
	for serial, want := range map[string]string{"d1": "31", "d2": "30"} {
		if v, err := c.Prop(ctx, serial, "ro.build.version.sdk"); err != nil || v != want {
			t.Errorf("Prop(%s) = %q, %v; want %q", serial, v, err, want)
		}
	}
	if procs, err := c.Processes(ctx, "d1", 31); err != nil || len(procs) != 0 {
		t.Errorf("Processes = %v, %v", procs, err)
	}
	if out, _, code, err := c.Exec(ctx, "d1", nil, "getprop", "ro.build.version.sdk"); err != nil || code != 0 || string(out) != "31\n" {
		t.Errorf("Exec = %q, %d, %v", out, code, err)
	}
	if n, err := c.Pull(ctx, "d1", "/f", io.Discard); err != nil || n != 0 {
		t.Errorf("Pull = %d, %v", n, err)
	}
	if _, err := c.OpenJDWP(ctx, "d1", 1); !errors.Is(err, adb.ErrServiceClosed) {
		t.Errorf("OpenJDWP = %v, want ErrServiceClosed", err)
	}
	if _, err := c.Shell(ctx, "nope", "true"); !errors.Is(err, adb.ErrDeviceNotFound) {
		t.Errorf("Shell on an unknown device = %v, want ErrDeviceNotFound", err)
	}
	tctx, cancel := context.WithCancel(ctx)
	var lists [][]adb.DeviceState
	err := c.TrackDevices(tctx, func(l []adb.DeviceState) { lists = append(lists, l); cancel() })
	if !errors.Is(err, context.Canceled) || len(lists) != 1 || len(lists[0]) != 2 {
		t.Errorf("TrackDevices = %v, lists %v", err, lists)
	}
}

// Rotate answers each connection in the next hostile mode; HonestProps
// keeps getprop honest.
func TestRotateAndHonestProps(t *testing.T) {
	s := adbtest.NewServer(adbtest.Config{Devices: []adbtest.Device{{Serial: "d", Mode: adbtest.Rotate, HonestProps: true, API: 33}}})
	defer s.Close()
	c := adb.NewClient(s.Addr())
	ctx := ctxT(t)
	if v, err := c.Prop(ctx, "d", "ro.build.version.sdk"); err != nil || v != "33" {
		t.Fatalf("Prop = %q, %v", v, err)
	}
	var errs []bool
	for range adbtest.Hostile[:4] { // those that answer at once
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.Shell(sctx, "d", "echo")
		cancel()
		errs = append(errs, errors.Is(err, adb.ErrProtocol))
	}
	// negative-length, fail-negative, bad-hex: FAIL with a bad length;
	// huge-length: FAIL with 16 of 65,535 bytes, then a stall.
	if want := []bool{true, true, true, false}; !slices.Equal(errs, want) {
		t.Fatalf("ErrProtocol per rotated mode: %v, want %v", errs, want)
	}
}

// Close ends every connection, endless ones included, and returns once
// their goroutines have.
func TestCloseEndsConnections(t *testing.T) {
	s := adbtest.NewServer(adbtest.Config{Host: adbtest.Endless})
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "0012host:track-devices")
	var b [4]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "OKAY" {
		t.Fatalf("status %q, %v", b, err)
	}
	s.Close()
	if s.Open() != 0 {
		t.Fatalf("%d connections open after Close", s.Open())
	}
	s.Close() // again: nothing
}
