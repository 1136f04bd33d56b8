package sim

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/alloctrack/alloctrack/internal/testwait"
)

// handWire builds bytes by hand: hex bytes separated by spaces, and 'text'
// for ASCII text (no spaces inside).
func handWire(t testing.TB, s string) []byte {
	t.Helper()
	var b []byte
	for _, tok := range strings.Fields(s) {
		if len(tok) >= 2 && tok[0] == '\'' && tok[len(tok)-1] == '\'' {
			b = append(b, tok[1:len(tok)-1]...)
			continue
		}
		x, err := hex.DecodeString(tok)
		if err != nil {
			t.Fatalf("handWire: bad token %q", tok)
		}
		b = append(b, x...)
	}
	return b
}

// readFrame reads one list framed as 4 hex digits of length and the
// bytes, within 5 seconds.
func readFrame(t testing.TB, c net.Conn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(testwait.Bound))
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("reading a list's length: %v", err)
	}
	n, err := strconv.ParseUint(string(h[:]), 16, 16)
	if err != nil {
		t.Fatalf("length %q is not 4 hex digits", h[:])
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading %d bytes of a list: %v", n, err)
	}
	return b
}

// noFrame checks that nothing arrives on c for d.
func noFrame(t testing.TB, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	var b [64]byte
	n, err := c.Read(b[:])
	var ne net.Error
	if n > 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %q %v, want nothing", b[:n], err)
	}
}

func trackAppDevice(t *testing.T, api int, apps ...AppConfig) *Device {
	t.Helper()
	d := NewDevice(DeviceConfig{Serial: "sim-track-app", API: api, Build: BuildUser}) // release apps have no JDWP
	for _, cfg := range apps {
		d.AddVM(NewVM(cfg, api))
	}
	t.Cleanup(d.Close)
	return d
}

func openDeviceService(t *testing.T, d *Device, name string) net.Conn {
	t.Helper()
	c, err := d.OpenService(name)
	if err != nil {
		t.Fatalf("OpenService(%s): %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The list is Android 12's AppProcesses message, byte for byte: a
// debuggable app is debuggable and profileable, a profileable release
// build is profileable only, and a plain release build is not listed.
func TestTrackAppList(t *testing.T) {
	d := trackAppDevice(t, 31,
		AppConfig{PID: 300, Package: "com.debug"},
		AppConfig{PID: 301, Package: "com.profileable", NotDebuggable: true, Profileable: true},
		AppConfig{PID: 302, Package: "com.release", NotDebuggable: true})
	// 0a 0f: a process of 15 bytes; 08 ac 02: pid 300; 10 01: debuggable;
	// 18 01: profileable; 22 06: architecture, 6 bytes.
	want := handWire(t, "0a 0f 08 ac 02 10 01 18 01 22 06 'x86_64' 0a 0d 08 ad 02 18 01 22 06 'x86_64'")
	if got := d.appProcesses(trackAppFirstMax); !bytes.Equal(got, want) {
		t.Fatalf("list\n% x\nwant\n% x", got, want)
	}
	if got := trackAppDevice(t, 31, AppConfig{PID: 5, NotDebuggable: true}).appProcesses(trackAppFirstMax); len(got) != 0 {
		t.Fatalf("a device with no debuggable or profileable app lists % x", got)
	}
}

// track-app streams the list at once and on every change to it; track-jdwp
// leaves the profileable release build out.
func TestTrackAppService(t *testing.T) {
	d := trackAppDevice(t, 31,
		AppConfig{PID: 300, Package: "com.debug"},
		AppConfig{PID: 301, Package: "com.profileable", NotDebuggable: true, Profileable: true},
		AppConfig{PID: 302, Package: "com.release", NotDebuggable: true})
	app := openDeviceService(t, d, "track-app")
	jdwp := openDeviceService(t, d, "track-jdwp")

	dbg300 := "0a 0f 08 ac 02 10 01 18 01 22 06 'x86_64'"
	prof301 := "0a 0d 08 ad 02 18 01 22 06 'x86_64'"
	dbg304 := "0a 0f 08 b0 02 10 01 18 01 22 06 'x86_64'"
	expect := func(what, list string) {
		t.Helper()
		if got, want := readFrame(t, app), handWire(t, list); !bytes.Equal(got, want) {
			t.Fatalf("%s: list\n% x\nwant\n% x", what, got, want)
		}
	}
	expect("first list", dbg300+" "+prof301)
	if got := string(readFrame(t, jdwp)); got != "300\n" {
		t.Fatalf("track-jdwp says %q, want only the debuggable app", got)
	}

	// A plain release build starting changes neither list.
	d.AddVM(NewVM(AppConfig{PID: 303, NotDebuggable: true}, 31))
	noFrame(t, app, 100*time.Millisecond)
	d.AddVM(NewVM(AppConfig{PID: 304}, 31))
	expect("after pid 304 started", dbg300+" "+prof301+" "+dbg304)
	d.RemoveVM(301)
	expect("after pid 301 ended", dbg300+" "+dbg304)
	d.RemoveVM(300)
	expect("after pid 300 ended", dbg304)
	d.RemoveVM(304)
	expect("after pid 304 ended", "")

	// A byte from the client ends the service.
	app.Write([]byte("x"))
	app.SetReadDeadline(time.Now().Add(testwait.Bound))
	if n, err := app.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after a write: %d bytes, %v; want EOF", n, err)
	}
}

// An empty first list is sent too, as 0000.
func TestTrackAppEmptyFirst(t *testing.T) {
	d := trackAppDevice(t, 33)
	c := openDeviceService(t, d, "track-app")
	if got := readFrame(t, c); len(got) != 0 {
		t.Fatalf("first list % x, want empty", got)
	}
}

// Updates are cut to whole processes within 2044 bytes, as adbd's 2048-byte
// buffer less the hex length cuts them; the first list is not.
func TestTrackAppTruncated(t *testing.T) {
	var apps []AppConfig
	for pid := 20000; pid < 20120; pid++ {
		apps = append(apps, AppConfig{PID: pid, API: 30}) // cheap VMs: no heapprofd stacks
	}
	d := trackAppDevice(t, 31, apps...)
	c := openDeviceService(t, d, "track-app")
	first := readFrame(t, c)
	if n := countProcesses(t, first); n != 120 || len(first) <= trackAppUpdateMax {
		t.Fatalf("first list: %d processes in %d bytes, want all 120 (over %d bytes)", n, len(first), trackAppUpdateMax)
	}
	d.RemoveVM(20119)
	update := readFrame(t, c)
	n := countProcesses(t, update)
	if len(update) > trackAppUpdateMax || !bytes.HasPrefix(first, update) {
		t.Fatalf("update of %d bytes, %d processes: not a prefix of the first list within %d bytes", len(update), n, trackAppUpdateMax)
	}
	// The next process would not have fitted.
	_, _, l := protowire.ConsumeField(first[len(update):])
	if l <= 0 || len(update)+l <= trackAppUpdateMax {
		t.Fatalf("update stops at %d bytes, but the next process (%d bytes) fits in %d", len(update), l, trackAppUpdateMax)
	}
}

func countProcesses(t *testing.T, b []byte) int {
	t.Helper()
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeField(b)
		if l < 0 || num != 1 || typ != protowire.BytesType {
			t.Fatalf("not an AppProcesses message at % x", b)
		}
		n++
		b = b[l:]
	}
	return n
}

// Before Android 12, adbd does not know track-app: it refuses the stream
// (CLSE, which the adb server turns into FAIL closed) and does not
// advertise the feature.
func TestTrackAppRefusedBeforeAPI31(t *testing.T) {
	old := trackAppDevice(t, 30, AppConfig{PID: 300})
	if c, err := old.OpenService("track-app"); !errors.Is(err, ErrRefused) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("OpenService(track-app) on API 30 = %v, want ErrRefused", err)
	}
	if slices.Contains(old.Features(), "track_app") || strings.Contains(old.Banner(), "track_app") {
		t.Errorf("API 30 advertises track_app: %s", old.Banner())
	}
	s := trackAppDevice(t, 31)
	if !slices.Contains(s.Features(), "track_app") || !strings.HasSuffix(s.Banner(), ",track_app") {
		t.Errorf("API 31 does not advertise track_app: %s", s.Banner())
	}

	// Over the adbd wire protocol (dialAdbd's device is API 30).
	p, _, _ := dialAdbd(t, AppConfig{PID: 300})
	p.connect(adbVersion, 4096)
	p.send(cmdOPEN, 7, 0, "track-app\x00")
	p.expect(cmdCLSE, 0, 7, "")
	p.send(cmdOPEN, 8, 0, "track-jdwp\x00")
	p.expect(cmdOKAY, 0, 8, "")
}
