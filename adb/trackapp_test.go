package adb_test

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/sim"
)

// wire builds bytes by hand: hex bytes separated by spaces, and 'text'
// for ASCII text (no spaces inside).
func wire(s string) []byte {
	var b []byte
	for _, tok := range strings.Fields(s) {
		if len(tok) >= 2 && tok[0] == '\'' && tok[len(tok)-1] == '\'' {
			b = append(b, tok[1:len(tok)-1]...)
			continue
		}
		x, err := hex.DecodeString(tok)
		if err != nil {
			panic("wire: bad token " + tok)
		}
		b = append(b, x...)
	}
	return b
}

// appProcessesGood are AppProcesses messages built by hand, and what they
// say. The first ones are laid out as adbd's C++ protobuf writes them:
// fields in number order, false and empty proto3 fields left out
// (Android 12), optional fields always present (Android 15).
var appProcessesGood = []struct {
	name string
	in   string
	want []adb.AppProcess
}{
	{"empty list", "", nil},
	{"Android 12, debuggable",
		// 0a 0e: process, 14 bytes; 08 8d 1a: pid 3341; 10 01: debuggable;
		// 18 01: profileable; 22 05: architecture, 5 bytes.
		"0a 0e 08 8d 1a 10 01 18 01 22 05 'arm64'",
		[]adb.AppProcess{{PID: 3341, Debuggable: true, Profileable: true, Architecture: "arm64"}}},
	{"Android 12, profileable only",
		"0a 0c 08 eb 19 18 01 22 05 'arm64'",
		[]adb.AppProcess{{PID: 3307, Profileable: true, Architecture: "arm64"}}},
	{"Android 12, two processes",
		"0a 0c 08 eb 19 18 01 22 05 'arm64' 0a 0e 08 8d 1a 10 01 18 01 22 05 'arm64'",
		[]adb.AppProcess{
			{PID: 3307, Profileable: true, Architecture: "arm64"},
			{PID: 3341, Debuggable: true, Profileable: true, Architecture: "arm64"},
		}},
	{"Android 15, every field",
		// 28 00: user_id 0; 32 15: process_name, 21 bytes; 3a 0d: a package
		// name, 13 bytes, twice; 40 00: not waiting; 48 8b 4f: uid 10123.
		"0a 4a 08 92 21 10 01 18 01 22 05 'arm64' 28 00 32 15 'adb.test.process.name' " +
			"3a 0d 'adb.test.app1' 3a 0d 'adb.test.app2' 40 00 48 8b 4f",
		[]adb.AppProcess{{PID: 4242, Debuggable: true, Profileable: true, Architecture: "arm64",
			ProcessName: "adb.test.process.name", PackageNames: []string{"adb.test.app1", "adb.test.app2"}, UID: 10123}}},
	{"Android 15, second user, waiting for the debugger",
		// 28 0a: user_id 10; 40 01: waiting; 48 cb d3 3d: uid 1010123.
		"0a 39 08 93 21 18 01 22 06 'x86_64' 28 0a 32 10 'com.example.work' 3a 10 'com.example.work' 40 01 48 cb d3 3d",
		[]adb.AppProcess{{PID: 4243, Profileable: true, Architecture: "x86_64", UserID: 10,
			ProcessName: "com.example.work", PackageNames: []string{"com.example.work"}, WaitingForDebugger: true, UID: 1010123}}},
	{"pid alone",
		"0a 02 08 01",
		[]adb.AppProcess{{PID: 1}}},
	{"largest pid",
		"0a 06 08 ff ff ff ff 07",
		[]adb.AppProcess{{PID: math.MaxInt32}}},
	{"fields out of order, a padded varint, bool 2",
		// 18 02: profileable, any non-zero is true; 08 81 80 00: pid 1 in
		// three bytes.
		"0a 0b 22 03 'arm' 18 02 08 81 80 00",
		[]adb.AppProcess{{PID: 1, Profileable: true, Architecture: "arm"}}},
	{"a scalar twice keeps the last",
		"0a 08 08 01 10 01 08 02 10 00",
		[]adb.AppProcess{{PID: 2}}},
	{"unknown fields are skipped",
		// top level: 10 07 (field 2 varint) and 1d 01 02 03 04 (field 3
		// fixed32); in the entry: 52 02 'hi' (field 10 bytes), a0 06 01
		// (field 100 varint), 79 + 8 bytes (field 15 fixed64).
		"10 07 0a 12 08 05 52 02 'hi' a0 06 01 79 01 02 03 04 05 06 07 08 1d 01 02 03 04",
		[]adb.AppProcess{{PID: 5}}},
}

// appProcessesBad are messages ParseAppProcesses must refuse, each with
// words its error must have.
var appProcessesBad = []struct {
	name string
	in   string
	want []string
}{
	{"tag without length", "0a", []string{"app process list", "byte 0"}},
	{"length past the end", "0a 05 08 01", []string{"byte 0", "4 bytes left"}},
	{"truncated tag varint", "0a 0e 08 8d 1a 10 01 18 01 22 05 'arm64' 80", []string{"tag at byte 16"}},
	{"process as a varint", "08 01", []string{"process at byte 0", "wire type 0, want 2"}},
	{"empty process", "0a 00", []string{"process 1", "no pid"}},
	{"no pid", "0a 02 10 01", []string{"process 1", "no pid"}},
	{"pid 0", "0a 02 08 00", []string{"process 1", "pid 0 at byte 2"}},
	{"negative pid", "0a 0b 08 ff ff ff ff ff ff ff ff ff 01", []string{"pid -1 at byte 2"}},
	{"pid past int32", "0a 06 08 80 80 80 80 08", []string{"pid 2147483648"}},
	{"varint of 11 bytes", "0a 0c 08 ff ff ff ff ff ff ff ff ff ff 01", []string{"process 1", "field 1", "byte 2"}},
	{"truncated pid", "0a 02 08 80", []string{"process 1", "byte 2"}},
	{"pid as bytes", "0a 03 0a 01 00", []string{"pid at byte 2", "wire type 2, want 0"}},
	{"architecture as a varint", "0a 04 08 01 20 01", []string{"architecture at byte 4", "wire type 0, want 2"}},
	{"package name as fixed32", "0a 07 08 01 3d 01 02 03 04", []string{"package_names at byte 4", "wire type 5, want 2"}},
	{"architecture not UTF-8", "0a 05 08 01 22 01 ff", []string{"architecture at byte 4", "UTF-8"}},
	{"process name not UTF-8", "0a 06 08 01 32 02 c3 28", []string{"process_name", "UTF-8"}},
	{"package name not UTF-8", "0a 05 08 01 3a 01 c0", []string{"package_names", "UTF-8"}},
	{"group at top level", "0b 0c", []string{"group", "byte 0"}},
	{"group in a process", "0a 04 08 01 0b 0c", []string{"process 1", "group", "byte 4"}},
	{"field number 0", "00 01", []string{"byte 0"}},
	{"reserved wire type", "0e 01", []string{"byte 0"}},
	{"entry length past the end", "0a 06 08 01 22 05 'ab'", []string{"process 1", "byte 4"}},
	{"second process bad", "0a 02 08 01 0a 02 08 00", []string{"process 2", "pid 0 at byte 6"}},
}

func TestParseAppProcesses(t *testing.T) {
	for _, tt := range appProcessesGood {
		t.Run(tt.name, func(t *testing.T) {
			got, err := adb.ParseAppProcesses(wire(tt.in))
			if err != nil {
				t.Fatalf("ParseAppProcesses(% x) = %v", wire(tt.in), err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseAppProcesses(% x)\n got %+v\nwant %+v", wire(tt.in), got, tt.want)
			}
		})
	}
}

func TestParseAppProcessesRejects(t *testing.T) {
	for _, tt := range appProcessesBad {
		t.Run(tt.name, func(t *testing.T) {
			got, err := adb.ParseAppProcesses(wire(tt.in))
			if err == nil {
				t.Fatalf("ParseAppProcesses(% x) = %+v, want an error", wire(tt.in), got)
			}
			if got != nil {
				t.Errorf("a list came with the error: %+v", got)
			}
			if !errors.Is(err, adb.ErrProtocol) {
				t.Errorf("error %q does not wrap ErrProtocol", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// Every prefix of a good list decodes to a prefix of its processes or is
// refused with ErrProtocol; none panics.
func TestParseAppProcessesPrefixes(t *testing.T) {
	for _, tt := range appProcessesGood {
		b := wire(tt.in)
		for i := range len(b) {
			got, err := adb.ParseAppProcesses(b[:i])
			if err != nil {
				if !errors.Is(err, adb.ErrProtocol) {
					t.Errorf("%s: prefix of %d bytes: %v does not wrap ErrProtocol", tt.name, i, err)
				}
				continue
			}
			if len(got) > len(tt.want) || !reflect.DeepEqual(got, tt.want[:len(got)]) && len(got) > 0 {
				t.Errorf("%s: prefix of %d bytes decoded as %+v", tt.name, i, got)
			}
		}
	}
}

// appendAppProcesses encodes a list the way Android 15's adbd does, for
// the fuzz target's round trip.
func appendAppProcesses(b []byte, list []adb.AppProcess) []byte {
	for _, p := range list {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.VarintType)
		e = protowire.AppendVarint(e, uint64(p.PID))
		if p.Debuggable {
			e = protowire.AppendTag(e, 2, protowire.VarintType)
			e = protowire.AppendVarint(e, 1)
		}
		if p.Profileable {
			e = protowire.AppendTag(e, 3, protowire.VarintType)
			e = protowire.AppendVarint(e, 1)
		}
		e = protowire.AppendTag(e, 4, protowire.BytesType)
		e = protowire.AppendString(e, p.Architecture)
		e = protowire.AppendTag(e, 5, protowire.VarintType)
		e = protowire.AppendVarint(e, uint64(int64(p.UserID)))
		e = protowire.AppendTag(e, 6, protowire.BytesType)
		e = protowire.AppendString(e, p.ProcessName)
		for _, n := range p.PackageNames {
			e = protowire.AppendTag(e, 7, protowire.BytesType)
			e = protowire.AppendString(e, n)
		}
		e = protowire.AppendTag(e, 8, protowire.VarintType)
		e = protowire.AppendVarint(e, protowire.EncodeBool(p.WaitingForDebugger))
		e = protowire.AppendTag(e, 9, protowire.VarintType)
		e = protowire.AppendVarint(e, uint64(int64(p.UID)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	return b
}

func FuzzParseAppProcesses(f *testing.F) {
	for _, tt := range appProcessesGood {
		f.Add(wire(tt.in))
	}
	for _, tt := range appProcessesBad {
		f.Add(wire(tt.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		list, err := adb.ParseAppProcesses(b)
		if err != nil {
			if !errors.Is(err, adb.ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			if list != nil {
				t.Fatalf("a list came with the error")
			}
			return
		}
		if len(list) > len(b)/2 {
			t.Fatalf("%d processes from %d bytes", len(list), len(b))
		}
		for _, p := range list {
			if p.PID <= 0 || p.PID > math.MaxInt32 {
				t.Fatalf("pid %d accepted", p.PID)
			}
			for _, s := range append([]string{p.Architecture, p.ProcessName}, p.PackageNames...) {
				if !utf8.ValidString(s) {
					t.Fatalf("string %q is not UTF-8", s)
				}
			}
		}
		// What decoded encodes, and decodes back the same.
		again, err := adb.ParseAppProcesses(appendAppProcesses(nil, list))
		if err != nil || !reflect.DeepEqual(again, list) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, list)
		}
	})
}

func TestTrackAppFake(t *testing.T) {
	l1 := string(wire("0a 0e 08 8d 1a 10 01 18 01 22 05 'arm64'"))
	l2 := string(wire("0a 0e 08 8d 1a 10 01 18 01 22 05 'arm64' 0a 0c 08 eb 19 18 01 22 05 'arm64'"))
	s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"),
		expect("track-app"), send("OKAY"+hexs(l1)), send(hexs(l2)+hexs("")), waitClose))
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var got [][]adb.AppProcess
	err := adb.NewClient(s.addr()).TrackApp(ctx, "emu-1", func(l []adb.AppProcess) {
		got = append(got, l)
		if len(got) == 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("TrackApp = %v, want context.Canceled", err)
	}
	dbg := adb.AppProcess{PID: 3341, Debuggable: true, Profileable: true, Architecture: "arm64"}
	prof := adb.AppProcess{PID: 3307, Profileable: true, Architecture: "arm64"}
	want := [][]adb.AppProcess{{dbg}, {dbg, prof}, nil}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("lists %+v, want %+v", got, want)
	}
	if r := s.requests(); !slices.Equal(r, []string{"host:transport:emu-1", "track-app"}) {
		t.Fatalf("server received %q", r)
	}
}

// A list that arrives a byte at a time (short reads all the way) decodes
// the same.
func TestTrackAppFakeByteAtATime(t *testing.T) {
	l := string(wire("0a 0c 08 eb 19 18 01 22 05 'arm64'"))
	trickle := func(p *peer) error {
		for _, c := range []byte("OKAY" + hexs(l)) {
			if err := p.write(string([]byte{c})); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"), expect("track-app"), trickle, waitClose))
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var got []adb.AppProcess
	err := adb.NewClient(s.addr()).TrackApp(ctx, "emu-1", func(l []adb.AppProcess) { got = l; cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("TrackApp = %v, want context.Canceled", err)
	}
	if want := []adb.AppProcess{{PID: 3307, Profileable: true, Architecture: "arm64"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("list %+v, want %+v", got, want)
	}
}

// A stream cut inside a list, or a list that does not decode, ends
// TrackApp with an error and delivers nothing more.
func TestTrackAppFakeBrokenStream(t *testing.T) {
	good := string(wire("0a 02 08 01"))
	for _, tt := range []struct {
		name  string
		reply string
		want  error
	}{
		{"cut inside a list", hexs(good) + "0010" + good, io.ErrUnexpectedEOF},
		{"list that does not decode", hexs(good) + hexs(string(wire("0a 02 08 00"))), adb.ErrProtocol},
		{"length not hex", hexs(good) + "00x1", adb.ErrProtocol},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"),
				expect("track-app"), send("OKAY"+tt.reply)))
			n := 0
			err := adb.NewClient(s.addr()).TrackApp(ctxT(t), "emu-1", func([]adb.AppProcess) { n++ })
			if !errors.Is(err, tt.want) {
				t.Fatalf("TrackApp = %v, want %v", err, tt.want)
			}
			if n != 1 {
				t.Fatalf("%d lists delivered, want 1", n)
			}
		})
	}
}

// An adbd that does not know track-app closes the stream; the server
// says FAIL closed.
func TestTrackAppFakeUnsupported(t *testing.T) {
	s := newFakeServer(t, steps(expect("host:transport:emu-1"), send("OKAY"),
		expect("track-app"), send("FAIL"+hexs("closed")), waitClose))
	err := adb.NewClient(s.addr()).TrackApp(ctxT(t), "emu-1", func([]adb.AppProcess) { t.Error("list delivered after FAIL") })
	if !errors.Is(err, adb.ErrTrackAppUnsupported) || !errors.Is(err, adb.ErrServiceClosed) {
		t.Fatalf("TrackApp = %v, want ErrTrackAppUnsupported and ErrServiceClosed", err)
	}
	var fe *adb.FailError
	if !errors.As(err, &fe) || fe.Request != "track-app" || fe.Reason != "closed" {
		t.Fatalf("err = %#v, want *FailError for track-app", err)
	}
	if !strings.Contains(err.Error(), "emu-1") {
		t.Errorf("error %q does not name the device", err)
	}

	// A FAIL before the service is about the device, not track-app.
	s2 := newFakeServer(t, steps(expect("host:transport:x"), send("FAIL"+hexs("device 'x' not found")), waitClose))
	err = adb.NewClient(s2.addr()).TrackApp(ctxT(t), "x", func([]adb.AppProcess) {})
	if !errors.Is(err, adb.ErrDeviceNotFound) || errors.Is(err, adb.ErrTrackAppUnsupported) {
		t.Fatalf("TrackApp(x) = %v, want ErrDeviceNotFound only", err)
	}
}

// Through the simulator's adb server: the simulated adbd's encoder and
// this package's decoder agree, and a release build that is profileable
// is in track-app but not in track-jdwp.
func TestTrackAppSim(t *testing.T) {
	d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-12", API: 31, Build: sim.BuildUser}) // release apps have no JDWP
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 300, Package: "com.debug"}, 31))
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 301, Package: "com.profileable", NotDebuggable: true, Profileable: true}, 31))
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 302, Package: "com.release", NotDebuggable: true}, 31))
	old := sim.NewDevice(sim.DeviceConfig{Serial: "sim-11", API: 30})
	old.AddVM(sim.NewVM(sim.AppConfig{PID: 400, Package: "com.debug"}, 30))
	_, c := simServer(t, d, old)

	ctx, cancel := context.WithCancel(context.Background())
	lists := make(chan []adb.AppProcess, 16)
	errc := make(chan error, 1)
	go func() { errc <- c.TrackApp(ctx, "sim-12", func(l []adb.AppProcess) { lists <- l }) }()

	dbg := adb.AppProcess{PID: 300, Debuggable: true, Profileable: true, Architecture: "x86_64"}
	prof := adb.AppProcess{PID: 301, Profileable: true, Architecture: "x86_64"}
	want := func(w ...adb.AppProcess) {
		t.Helper()
		if got := next(t, lists, "an app process list"); !reflect.DeepEqual(got, w) {
			t.Fatalf("list %+v, want %+v", got, w)
		}
	}
	want(dbg, prof)
	d.AddVM(sim.NewVM(sim.AppConfig{PID: 303, Package: "com.debug2"}, 31))
	want(dbg, prof, adb.AppProcess{PID: 303, Debuggable: true, Profileable: true, Architecture: "x86_64"})
	d.RemoveVM(303)
	want(dbg, prof)
	d.RemoveVM(300)
	want(prof)
	cancel()
	if err := next(t, errc, "TrackApp to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("TrackApp = %v, want context.Canceled", err)
	}

	jctx, jcancel := context.WithCancel(context.Background())
	pids := make(chan []int, 1)
	go func() { errc <- c.TrackJDWP(jctx, "sim-12", func(p []int) { pids <- p }) }()
	if got := next(t, pids, "pid list"); len(got) != 0 {
		t.Errorf("track-jdwp lists %v; the profileable release build must not be there", got)
	}
	jcancel()
	next(t, errc, "TrackJDWP to return")

	err := c.TrackApp(ctxT(t), "sim-11", func([]adb.AppProcess) { t.Error("list from an Android 11 device") })
	if !errors.Is(err, adb.ErrTrackAppUnsupported) {
		t.Fatalf("TrackApp on API 30 = %v, want ErrTrackAppUnsupported", err)
	}
}
