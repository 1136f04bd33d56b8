package sim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/electricbubble/gadb"
	"go.uber.org/goleak"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/jdwp"

	"github.com/alloctrack/alloctrack/internal/testwait"
)

// startHostServer serves devs on a private loopback port and returns the
// server and its address; everything is closed in t.Cleanup.
func startHostServer(t *testing.T, devs ...*Device) (*HostServer, string) {
	t.Helper()
	s := NewHostServer()
	for _, d := range devs {
		s.AddDevice(d)
		t.Cleanup(d.Close)
	}
	addr, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, addr.String()
}

// hostConn is a raw client of the host protocol.
type hostConn struct {
	t *testing.T
	net.Conn
}

func dialHost(t *testing.T, addr string) *hostConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(testwait.Bound))
	t.Cleanup(func() { c.Close() })
	return &hostConn{t, c}
}

func (c *hostConn) send(req string) {
	c.t.Helper()
	if _, err := fmt.Fprintf(c, "%04x%s", len(req), req); err != nil {
		c.t.Fatalf("send %q: %v", req, err)
	}
}

// status reads OKAY, or FAIL and its reason.
func (c *hostConn) status() (ok bool, reason string, err error) {
	var b [4]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false, "", err
	}
	switch string(b[:]) {
	case "OKAY":
		return true, "", nil
	case "FAIL":
		reason, err := c.readString()
		return false, reason, err
	}
	return false, "", fmt.Errorf("status %q", b[:])
}

func (c *hostConn) okay(what string) {
	c.t.Helper()
	ok, reason, err := c.status()
	if err != nil || !ok {
		c.t.Fatalf("%s: FAIL %q, %v", what, reason, err)
	}
}

func (c *hostConn) fail(what, want string) {
	c.t.Helper()
	ok, reason, err := c.status()
	if err != nil || ok || reason != want {
		c.t.Fatalf("%s: ok=%v reason %q (%v), want FAIL %q", what, ok, reason, err, want)
	}
}

// readString reads 4 hex digits of length and the string.
func (c *hostConn) readString() (string, error) {
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return "", err
	}
	n, err := strconv.ParseUint(string(h[:]), 16, 16)
	if err != nil {
		return "", fmt.Errorf("length %q: %w", h[:], err)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(c, b)
	return string(b), err
}

func (c *hostConn) str(what string) string {
	c.t.Helper()
	s, err := c.readString()
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
	return s
}

// eof checks that the server closed the connection.
func (c *hostConn) eof(what string) {
	c.t.Helper()
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 0 {
		c.t.Fatalf("%s: %q, %v; want end of stream", what, b, err)
	}
}

// query sends a host request on a new connection and returns the reply.
func query(t *testing.T, addr, req string) (ok bool, reply string) {
	t.Helper()
	c := dialHost(t, addr)
	c.send(req)
	ok, reason, err := c.status()
	if err != nil {
		t.Fatalf("%s: %v", req, err)
	}
	if !ok {
		return false, reason
	}
	return true, c.str(req)
}

// transport switches a new connection to serial and opens service on it.
func openService(t *testing.T, addr, serial, service string) *hostConn {
	t.Helper()
	c := dialHost(t, addr)
	c.send("host:transport:" + serial)
	c.okay("transport")
	c.send(service)
	c.okay(service)
	return c
}

func TestHostServerVersionBytes(t *testing.T) {
	_, addr := startHostServer(t)
	c := dialHost(t, addr)
	io.WriteString(c, "000chost:version")
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "OKAY00040029" {
		t.Fatalf("%q %v", b, err)
	}
}

func TestHostServerDeviceLists(t *testing.T) {
	a := NewDevice(DeviceConfig{Serial: "sim-a", Model: "Pixel 4a (5G)", Product: "sunfish", Device: "sun fish"})
	b := NewDevice(DeviceConfig{Serial: "sim-b-serial-longer-than-22"})
	s, addr := startHostServer(t, b, a) // b first: ids follow attachment, order follows serials

	if ok, got := query(t, addr, "host:devices"); !ok || got != "sim-a\tdevice\nsim-b-serial-longer-than-22\tdevice\n" {
		t.Fatalf("devices: %v %q", ok, got)
	}
	want := "sim-a                  device product:sunfish model:Pixel_4a__5G_ device:sun fish transport_id:2\n" +
		"sim-b-serial-longer-than-22 device product:sim_sim-b-serial-longer-than-22 model:Simulated_Device device:simulated transport_id:1\n"
	if ok, got := query(t, addr, "host:devices-l"); !ok || got != want {
		t.Fatalf("devices-l:\n%q\nwant\n%q", got, want)
	}
	s.SetState("sim-a", "offline")
	if ok, got := query(t, addr, "host:devices"); !ok || got != "sim-a\toffline\nsim-b-serial-longer-than-22\tdevice\n" {
		t.Fatalf("devices after offline: %v %q", ok, got)
	}
	s.RemoveDevice("sim-b-serial-longer-than-22")
	s.RemoveDevice("sim-b-serial-longer-than-22") // no-op
	if ok, got := query(t, addr, "host:devices"); !ok || got != "sim-a\toffline\n" {
		t.Fatalf("devices after remove: %v %q", ok, got)
	}
	if ds := s.Devices(); len(ds) != 1 || ds[0] != a {
		t.Fatalf("Devices() = %v", ds)
	}
	// Re-adding gives a new transport id.
	s.AddDevice(b)
	if ok, got := query(t, addr, "host:devices-l"); !ok || !strings.HasSuffix(got, " transport_id:3\n") {
		t.Fatalf("devices-l after re-add: %q", got)
	}
}

func TestHostServerGadb(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-gadb", Model: "Pixel 7", API: 30})
	vm := NewVM(AppConfig{PID: 3131, Package: "com.example.gadb", Workload: Workload{Rate: 0}}, 30)
	d.AddVM(vm)
	other := NewDevice(DeviceConfig{Serial: "sim-gadb-2", API: 23})
	s, addr := startHostServer(t, d, other)
	port := s.Addr().(*net.TCPAddr).Port
	if addr != s.Addr().String() {
		t.Fatalf("Addr %v, Listen gave %s", s.Addr(), addr)
	}

	client, err := gadb.NewClientWith("127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := client.ServerVersion(); err != nil || v != 41 {
		t.Fatalf("version %d %v", v, err)
	}
	serials, err := client.DeviceSerialList()
	if err != nil || strings.Join(serials, ",") != "sim-gadb,sim-gadb-2" {
		t.Fatalf("serials %v %v", serials, err)
	}
	devices, err := client.DeviceList()
	if err != nil || len(devices) != 2 {
		t.Fatalf("devices %v %v", devices, err)
	}
	dev := devices[0]
	if dev.Serial() != "sim-gadb" {
		t.Fatalf("serial %q", dev.Serial())
	}
	if p, err := dev.Product(); err != nil || p != "sim_sim-gadb" {
		t.Fatalf("product %q %v", p, err)
	}
	if m, err := dev.Model(); err != nil || m != "Pixel_7" {
		t.Fatalf("model %q %v", m, err)
	}
	// Like a device attached by adb connect, a simulated one has no USB
	// devpath, so gadb finds no "usb:" attribute.
	if u, err := dev.Usb(); err == nil {
		t.Fatalf("usb %q", u)
	}
	if id := dev.DeviceInfo()["transport_id"]; id != "1" {
		t.Fatalf("transport_id %q (%v)", id, dev.DeviceInfo())
	}
	if id := devices[1].DeviceInfo()["transport_id"]; id != "2" {
		t.Fatalf("second transport_id %q", id)
	}
	if st, err := dev.State(); err != nil || st != gadb.StateOnline {
		t.Fatalf("state %q %v", st, err)
	}
	if p, err := dev.DevicePath(); err != nil || p != "unknown" {
		t.Fatalf("devpath %q %v", p, err)
	}

	for _, tc := range []struct {
		dev        gadb.Device
		cmd        string
		args       []string
		want       string
		wantPrefix bool
	}{
		{dev, "getprop", []string{"ro.build.version.sdk"}, "30\n", false},
		{devices[1], "getprop", []string{"ro.build.version.sdk"}, "23\r\n", false}, // the pty of Android 6
		{dev, "getprop", []string{"ro.product.model"}, "Pixel 7\n", false},
		{dev, "echo", []string{"hi"}, "hi\n", false},
		{dev, "pidof", []string{"com.example.gadb"}, "3131\n", false},
		{dev, "ps", []string{"-A"}, "USER         PID  PPID     VSZ    RSS WCHAN                  ADDR S NAME\n", true},
		{dev, "getprop", nil, "[init.svc.heapprofd]: [stopped]\n", true}, // sorted
		{dev, "no-such-tool", nil, "/system/bin/sh: no-such-tool: inaccessible or not found\n", false},
	} {
		out, err := tc.dev.RunShellCommand(tc.cmd, tc.args...)
		if err != nil || (!tc.wantPrefix && out != tc.want) || (tc.wantPrefix && !strings.HasPrefix(out, tc.want)) {
			t.Fatalf("%s %v: %q %v, want %q", tc.cmd, tc.args, out, err, tc.want)
		}
	}
	// gadb's own sync client lists and pulls the device's files.
	d.PutFile("/data/local/tmp/f.bin", []byte("some bytes"))
	if ents, err := dev.List("/data/local/tmp"); err != nil || len(ents) != 1 || ents[0].Name != "f.bin" || ents[0].Size != 10 {
		t.Fatalf("sync LIST: %+v %v", ents, err)
	}
	var got bytes.Buffer
	if err := dev.Pull("/data/local/tmp/f.bin", &got); err != nil || got.String() != "some bytes" {
		t.Fatalf("sync RECV: %q %v", got.String(), err)
	}
	// An offline device refuses shell.
	s.SetState("sim-gadb-2", "offline")
	if _, err := devices[1].RunShellCommand("echo", "x"); err == nil || !strings.Contains(err.Error(), "device offline") {
		t.Fatalf("shell on offline device: %v", err)
	}
	if _, err := devices[1].State(); err == nil || !strings.Contains(err.Error(), "device offline") {
		t.Fatalf("state of offline device: %v", err)
	}
	// Not killable through us.
	client.KillServer()
	if v, err := client.ServerVersion(); err != nil || v != 41 {
		t.Fatalf("after kill: %d %v", v, err)
	}
}

func TestHostServerTrackDevices(t *testing.T) {
	a := NewDevice(DeviceConfig{Serial: "sim-a"})
	b := NewDevice(DeviceConfig{Serial: "sim-b"})
	t.Cleanup(b.Close)
	s, addr := startHostServer(t, a)

	c := dialHost(t, addr)
	c.send("host:track-devices")
	c.okay("track-devices")
	long := dialHost(t, addr)
	long.send("host:track-devices-l")
	long.okay("track-devices-l")

	next := func(want, wantLong string) {
		t.Helper()
		if got := c.str("track-devices"); got != want {
			t.Fatalf("track-devices: %q, want %q", got, want)
		}
		if got := long.str("track-devices-l"); got != wantLong {
			t.Fatalf("track-devices-l: %q, want %q", got, wantLong)
		}
	}
	la := "sim-a                  %s product:sim_sim-a model:Simulated_Device device:simulated transport_id:1\n"
	lb := "sim-b                  %s product:sim_sim-b model:Simulated_Device device:simulated transport_id:2\n"
	next("sim-a\tdevice\n", fmt.Sprintf(la, "device"))
	s.AddDevice(b)
	next("sim-a\tdevice\nsim-b\tdevice\n", fmt.Sprintf(la, "device")+fmt.Sprintf(lb, "device"))
	s.SetState("sim-b", "offline")
	next("sim-a\tdevice\nsim-b\toffline\n", fmt.Sprintf(la, "device")+fmt.Sprintf(lb, "offline"))
	s.SetState("sim-b", "offline") // no change, no list
	s.RemoveDevice("sim-a")
	next("sim-b\toffline\n", fmt.Sprintf(lb, "offline"))
	s.RemoveDevice("sim-b")
	next("", "")

	// Writing to a tracker closes it, as in adb.
	c.Write([]byte("x"))
	c.eof("track-devices after a write")
}

func TestHostServerRequestErrors(t *testing.T) {
	a := NewDevice(DeviceConfig{Serial: "sim-a", API: 29})
	b := NewDevice(DeviceConfig{Serial: "127.0.0.1:7001"})
	s, addr := startHostServer(t, a, b)

	for _, tc := range []struct{ req, want string }{
		{"host:transport:nope", "device 'nope' not found"},
		{"host:transport-id:99", "no device with transport id '99'"},
		{"host:transport-id:x", "invalid transport id"},
		{"host:transport-any", "more than one device/emulator"},
		{"host:features", "more than one device/emulator"},
		{"host-serial:nope:features", "device 'nope' not found"},
		{"host:kill", "not supported"},
		{"host:forward:tcp:0;jdwp:1", "unknown host service"},
		{"host:nonsense", "unknown host service"},
		{"shell:echo hi", "more than one device/emulator"},
	} {
		c := dialHost(t, addr)
		c.send(tc.req)
		c.fail(tc.req, tc.want)
		c.eof(tc.req)
	}
	for _, tc := range []struct{ req, want string }{
		{"host-serial:sim-a:features", "shell_v2,cmd,stat_v2,apex,abb,abb_exec,fixed_push_symlink_timestamp"}, // API 29
		{"host-serial:sim-a:get-state", "device"},
		{"host-serial:sim-a:get-serialno", "sim-a"},
		{"host-serial:127.0.0.1:7001:get-serialno", "127.0.0.1:7001"},
		{"host-transport-id:2:get-serialno", "127.0.0.1:7001"},
		{"host-serial:sim-a:get-devpath", "unknown"},
	} {
		if ok, got := query(t, addr, tc.req); !ok || got != tc.want {
			t.Fatalf("%s: %v %q, want %q", tc.req, ok, got, tc.want)
		}
	}

	// Per-device host requests on a switched transport.
	c := dialHost(t, addr)
	c.send("host:transport-id:1")
	c.okay("transport-id")
	c.send("host:get-serialno")
	c.okay("get-serialno")
	if got := c.str("get-serialno"); got != "sim-a" {
		t.Fatalf("get-serialno on transport: %q", got)
	}

	// An offline device cannot be switched to.
	s.SetState("sim-a", "offline")
	c = dialHost(t, addr)
	c.send("host:transport:sim-a")
	c.fail("transport to offline", "device offline")
	s.SetState("sim-a", "unauthorized")
	c = dialHost(t, addr)
	c.send("host-serial:sim-a:get-state")
	if ok, reason, err := c.status(); ok || err != nil || !strings.HasPrefix(reason, "device unauthorized.\n") {
		t.Fatalf("unauthorized: %v %q %v", ok, reason, err)
	}

	// With one device left, host:features and a bare service pick it.
	s.RemoveDevice("sim-a")
	if ok, got := query(t, addr, "host:features"); !ok || got != "shell_v2,cmd,stat_v2,apex,abb,abb_exec,fixed_push_symlink_timestamp,ls_v2,sendrecv_v2,sendrecv_v2_brotli" { // API 30
		t.Fatalf("features: %v %q", ok, got)
	}
	c = dialHost(t, addr)
	c.send("shell:echo bare")
	c.okay("bare shell")
	if out, err := io.ReadAll(c); err != nil || string(out) != "bare\n" {
		t.Fatalf("bare shell: %q %v", out, err)
	}
	s.RemoveDevice("127.0.0.1:7001")
	c = dialHost(t, addr)
	c.send("host:transport-any")
	c.fail("transport-any with none", "no devices/emulators found")
}

func TestHostServerSkipHostSerial(t *testing.T) {
	for _, tc := range []struct{ in, serial string }{
		{"abc:features", "abc"},
		{"127.0.0.1:7001:features", "127.0.0.1:7001"},
		{"tcp:127.0.0.1:7001:get-state", "tcp:127.0.0.1:7001"},
		{"[::1]:7001:features", "[::1]:7001"},
		{"abc:12x:y", "abc"},
		{"abc:forward:tcp:0;jdwp:1", "abc"},
		{"nocolon", ""},
	} {
		i := skipHostSerial(tc.in)
		got := ""
		if i >= 0 {
			got = tc.in[:i]
		}
		if got != tc.serial {
			t.Errorf("%q: serial %q, want %q", tc.in, got, tc.serial)
		}
	}
}

// newHostVMDevice returns a device with VMs that allocate only when told.
func newHostVMDevice(t *testing.T, serial string, pids ...int) (*Device, []*VM) {
	t.Helper()
	d := NewDevice(DeviceConfig{Serial: serial, API: 30})
	var vms []*VM
	for _, pid := range pids {
		vm := NewVM(AppConfig{PID: pid, Package: fmt.Sprintf("com.example.p%d", pid), Workload: Workload{Rate: 0}}, 30)
		d.AddVM(vm)
		vms = append(vms, vm)
	}
	return d, vms
}

func TestHostServerJDWPSession(t *testing.T) {
	d, vms := newHostVMDevice(t, "sim-jdwp", 4242)
	vm := vms[0]
	s, addr := startHostServer(t, d)

	// Unknown pid: the device refuses and the server says "closed".
	c := dialHost(t, addr)
	c.send("host:transport:sim-jdwp")
	c.okay("transport")
	c.send("jdwp:999")
	c.fail("jdwp:999", "closed")
	c.eof("jdwp:999")

	c = openService(t, addr, "sim-jdwp", "jdwp:4242")
	conn, err := jdwp.Open(ctx5(t), c, jdwp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dc := ddms.NewClient(conn)
	ctx := ctx5(t)
	h, err := dc.Hello(ctx)
	if err != nil || h.PID != 4242 || h.AppName != "com.example.p4242" {
		t.Fatalf("HELO %+v %v", h, err)
	}
	trackedWindow(t, ctx, dc, vm, 5000)
	if st := vm.Stats(); st.NonDDM != 0 || st.ReportsSent != 1 {
		t.Fatalf("stats %+v", st)
	}

	// Removing the device drops its connections.
	s.RemoveDevice("sim-jdwp")
	select {
	case <-conn.Done():
	case <-time.After(testwait.Bound):
		t.Fatal("session survived the device's removal")
	}
	// The VM is free for the next debugger, through transport-id this
	// time, once it has seen its stream end (until then it refuses a
	// second debugger, as ART does).
	for deadline := time.Now().Add(testwait.Bound); vm.Connected(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the VM still holds its client %v after the device's removal", testwait.Bound)
		}
	}
	s.AddDevice(d)
	c = dialHost(t, addr)
	c.send("host:transport-id:2")
	c.okay("transport-id")
	c.send("jdwp:4242")
	c.okay("jdwp:4242 again")
	conn2, err := jdwp.Open(ctx5(t), c, jdwp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if h, err := ddms.NewClient(conn2).Hello(ctx); err != nil || h.PID != 4242 {
		t.Fatalf("HELO again %+v %v", h, err)
	}
}

func TestHostServerTrackJDWP(t *testing.T) {
	d, vms := newHostVMDevice(t, "sim-track", 100, 200, 300)
	_, addr := startHostServer(t, d)
	c := openService(t, addr, "sim-track", "track-jdwp")
	if got := c.str("pids"); got != "100\n200\n300\n" {
		t.Fatalf("pids %q", got)
	}
	vms[1].Kill()
	d.RemoveVM(200)
	if got := c.str("pids after kill"); got != "100\n300\n" {
		t.Fatalf("pids after kill %q", got)
	}
	// One-shot jdwp list.
	c2 := openService(t, addr, "sim-track", "jdwp")
	if b, err := io.ReadAll(c2); err != nil || string(b) != "100\n300\n" {
		t.Fatalf("jdwp: %q %v", b, err)
	}
	// Writing to track-jdwp ends it.
	c.Write([]byte{0})
	c.eof("track-jdwp after a write")
}

func TestHostServerMalformedRequests(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-m"})
	_, addr := startHostServer(t, d)

	// A client that connects and says nothing (as gadb.NewClientWith does),
	// and one stuck half-way through a request, hold nobody up.
	idle := dialHost(t, addr)
	half := dialHost(t, addr)
	io.WriteString(half, "0010host:")

	for _, tc := range []struct{ raw, want string }{
		{"zzzzhost:version", `bad request length "zzzz": not 4 hex digits`},
		{"00 chost:version", `bad request length "00 c": not 4 hex digits`},
		{"ffff", "request length 65535 exceeds the maximum of 4096"},
		{"1001", "request length 4097 exceeds the maximum of 4096"},
		{"0000", "empty request"},
	} {
		c := dialHost(t, addr)
		io.WriteString(c, tc.raw)
		c.fail(tc.raw, tc.want)
		c.eof(tc.raw)
	}
	// The same after a transport switch.
	c := dialHost(t, addr)
	c.send("host:transport:sim-m")
	c.okay("transport")
	io.WriteString(c, "xyz!")
	c.fail("bad service request", `bad request length "xyz!": not 4 hex digits`)
	c.eof("bad service request")
	// Upper-case hex is hex.
	c = dialHost(t, addr)
	io.WriteString(c, "000Chost:version")
	c.okay("upper-case length")

	if ok, v := query(t, addr, "host:version"); !ok || v != "0029" {
		t.Fatalf("server broken after bad requests: %v %q", ok, v)
	}
	_, _ = idle, half
}

func TestHostServerClose(t *testing.T) {
	before := goleak.IgnoreCurrent()
	d, vms := newHostVMDevice(t, "sim-close", 7)
	s := NewHostServer()
	s.AddDevice(d)
	addr, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A second listener served by the caller's own goroutine.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()

	var open []*hostConn
	idle := dialHost(t, addr.String())
	open = append(open, idle)
	track := dialHost(t, l.Addr().String())
	track.send("host:track-devices")
	track.okay("track-devices")
	track.str("first list")
	open = append(open, track)
	tj := openService(t, addr.String(), "sim-close", "track-jdwp")
	tj.str("pids")
	open = append(open, tj)
	jc := openService(t, addr.String(), "sim-close", "jdwp:7")
	conn, err := jdwp.Open(ctx5(t), jc, jdwp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ddms.NewClient(conn).Hello(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	sw := dialHost(t, addr.String()) // switched, no service yet
	sw.send("host:transport-any")
	sw.okay("transport-any")
	open = append(open, sw)

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(testwait.Bound):
		t.Fatal("Close hangs with open connections")
	}
	if err := <-served; !errors.Is(err, ErrHostServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	for i, c := range open {
		c.SetDeadline(time.Now().Add(testwait.Bound))
		if _, err := bufio.NewReader(c).ReadByte(); err == nil {
			t.Fatalf("connection %d still open", i)
		}
	}
	select {
	case <-conn.Done():
	case <-time.After(testwait.Bound):
		t.Fatal("JDWP session still open")
	}
	if _, err := net.Dial("tcp", addr.String()); err == nil {
		t.Fatal("still listening")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := s.Listen("127.0.0.1:0"); !errors.Is(err, ErrHostServerClosed) {
		t.Fatalf("Listen after Close: %v", err)
	}
	if vms[0].Stats().Connections != 1 {
		t.Fatal("VM not reached")
	}
	conn.Close()
	d.Close()
	for _, c := range open {
		c.Close()
	}
	goleak.VerifyNone(t, before)
}

// FuzzHostServerReadRequest: a request is read whole or rejected, never
// past its end, whatever the bytes and however they arrive.
func FuzzHostServerReadRequest(f *testing.F) {
	for _, s := range []string{"000chost:version", "zzzz", "ffff", "0000", "0001", "000Chost:versionJDWP", "00", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		req, err := readHostRequest(iotest.OneByteReader(r))
		if err != nil {
			var bad *badRequestError
			if !errors.As(err, &bad) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if len(req) == 0 || len(req) > maxHostRequest {
			t.Fatalf("request of %d bytes accepted", len(req))
		}
		if consumed := len(b) - r.Len(); consumed != 4+len(req) || string(b[4:consumed]) != req {
			t.Fatalf("consumed %d bytes for a %d-byte request", consumed, len(req))
		}
	})
}

// TestHostServerExecOutputWhole: a command that does not read its
// standard input still gets its whole output to the client when the
// client's stdin (and close-stdin) frames arrive after the command ended:
// the relay must not cut the output short when the service stops reading.
func TestHostServerExecOutputWhole(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-exec", API: 31})
	t.Cleanup(d.Close)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<14) // 256 KiB
	d.mu.Lock()
	d.files[PerfettoTraceDir+"/big"] = big
	d.mu.Unlock()
	_, addr := startHostServer(t, d)
	client := adb.NewClient(addr)
	for i := range 40 {
		out, _, code, err := client.Exec(ctx5(t), "sim-exec", bytes.Repeat([]byte{'x'}, 4096), "tail", "-c", "+1", PerfettoTraceDir+"/big")
		if err != nil || code != 0 || !bytes.Equal(out, big) {
			t.Fatalf("exec %d: %d bytes of %d, exit %d, %v", i, len(out), len(big), code, err)
		}
	}
}
