package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/jdwp"

	"github.com/alloctrack/alloctrack/internal/testwait"
)

// adbRig is a simulated device served by an Adbd on its own loopback port
// and attached to a real adb server with `adb connect`.
type adbRig struct {
	srv    *adbtest.Server
	d      *Device
	a      *Adbd
	serial string // as adb names TCP devices: 127.0.0.1:<port>
	vms    []*VM
}

func newADBRig(t testing.TB, srv *adbtest.Server, api int, apps ...AppConfig) *adbRig {
	t.Helper()
	r := &adbRig{srv: srv}
	r.d = NewDevice(DeviceConfig{Serial: "sim-adbd", API: api, Product: "simprod", Model: "SimModel"})
	for _, cfg := range apps {
		vm := NewVM(cfg, api)
		r.d.AddVM(vm)
		r.vms = append(r.vms, vm)
	}
	r.a = NewAdbd(r.d)
	addr, err := r.a.Listen("127.0.0.1:" + strconv.Itoa(adbtest.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.a.Close()
		r.d.Close()
	})
	if r.a.Addr().String() != addr.String() {
		t.Fatalf("Addr %v, Listen said %v", r.a.Addr(), addr)
	}
	r.serial = addr.String()
	srv.Connect(t, r.serial)
	return r
}

func (r *adbRig) adb(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return r.srv.Run(t, append([]string{"-s", r.serial}, args...)...)
}

// forward runs `adb forward tcp:<free port> jdwp:<pid>` and returns the
// local address; the forward is removed when the test ends.
func (r *adbRig) forward(t testing.TB, pid int) string {
	t.Helper()
	port := adbtest.FreePort(t)
	local := "tcp:" + strconv.Itoa(port)
	if out, err := r.adb(t, "forward", local, "jdwp:"+strconv.Itoa(pid)); err != nil {
		t.Fatalf("forward: %q %v", out, err)
	}
	t.Cleanup(func() {
		// adb drops the forwards of a device that goes offline.
		if out, err := r.adb(t, "forward", "--remove", local); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Errorf("forward --remove: %q %v", out, err)
		}
	})
	return "127.0.0.1:" + strconv.Itoa(port)
}

// openJDWP dials a forwarded address and performs the JDWP handshake.
func openJDWP(t testing.TB, addr string) (*ddms.Client, *jdwp.Conn, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound)
	defer cancel()
	conn, err := jdwp.Open(ctx, c, jdwp.Options{})
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { conn.Close() })
	return ddms.NewClient(conn), conn, nil
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestAdbdDevicesList(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 30)
	out, err := srv.Run(t, "devices", "-l")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != r.serial {
			continue
		}
		want := []string{"device", "product:simprod", "model:SimModel", "device:simulated"}
		for i, w := range want {
			if i+1 >= len(f) || f[i+1] != w {
				t.Fatalf("devices -l line %q, want %v after the serial", line, want)
			}
		}
		return
	}
	t.Fatalf("devices -l does not list %s:\n%s", r.serial, out)
}

func TestAdbdShell(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 28)
	if out, err := r.adb(t, "shell", "getprop", "ro.build.version.sdk"); err != nil || out != "28\n" {
		t.Fatalf("getprop: %q %v", out, err)
	}
	if out, err := r.adb(t, "shell", "echo", "hi"); err != nil || out != "hi\n" {
		t.Fatalf("echo: %q %v", out, err)
	}
	// shell_v2 carries the exit status back.
	out, err := r.adb(t, "shell", "nosuchcmd")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 127 {
		t.Fatalf("nosuchcmd: %q %v, want exit status 127", out, err)
	}
	// The shell's complaint comes on standard error, apart.
	if out != "" || !strings.Contains(err.Error(), "nosuchcmd: inaccessible or not found") {
		t.Fatalf("nosuchcmd printed %q, error %v; want its complaint on stderr", out, err)
	}
}

// TestAdbdJDWPList runs `adb jdwp`. adb 29 prints what the device's jdwp
// service sends until the stream ends; a real adbd keeps that stream open
// (and the command with it), the simulator closes it after one list. The
// test reads until every pid is there and then stops the process itself.
func TestAdbdJDWPList(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 30, AppConfig{PID: 1234, Package: "com.a"}, AppConfig{PID: 5678, Package: "com.b"})
	stdout, stop := srv.Start(t, "-s", r.serial, "jdwp")
	got := make(chan []string, 1)
	go func() {
		var pids []string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() && len(pids) < 2 {
			pids = append(pids, strings.TrimSpace(sc.Text()))
		}
		got <- pids
	}()
	var pids []string
	select {
	case pids = <-got:
	case <-time.After(testwait.Bound):
		stop()
		pids = <-got
	}
	stop()
	if strings.Join(pids, ",") != "1234,5678" {
		t.Fatalf("adb jdwp listed %q", pids)
	}
}

// TestAdbdForwardWindow runs one allocation-tracking window through
// `adb forward tcp:X jdwp:<pid>` with the project's own client and checks
// the report against the VM's ground truth.
func TestAdbdForwardWindow(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 30, AppConfig{PID: 4321, Package: "com.example.fwd"})
	vm := r.vms[0]
	c, _, err := openJDWP(t, r.forward(t, vm.PID()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 10*time.Second)
	h, err := c.Hello(ctx)
	if err != nil || h.PID != uint32(vm.PID()) || h.AppName != "com.example.fwd" {
		t.Fatalf("HELO %+v %v", h, err)
	}
	got := reportCounts(trackedWindow(t, ctx, c, vm, 5000))
	if err := c.SetAllocTracking(false); err != nil {
		t.Fatal(err)
	}
	if on, err := c.AllocTracking(ctx); err != nil || on {
		t.Fatalf("REAQ after disable %v %v", on, err)
	}
	w := vm.Windows()
	if len(w) != 1 {
		t.Fatalf("%d windows ended", len(w))
	}
	sameCounts(t, "report vs ended window", got, w[0].Allocated)
	if st := vm.Stats(); st.NonDDM != 0 || st.Connections != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestAdbdTrackJDWP speaks the host protocol to the adb server: the
// track-jdwp stream of the device sends a new list when an app dies.
func TestAdbdTrackJDWP(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 30, AppConfig{PID: 300}, AppConfig{PID: 400})
	c := srv.Dial(t)
	c.SetDeadline(time.Now().Add(testwait.Bound))
	if err := adbtest.Request(c, "host:transport:"+r.serial); err != nil {
		t.Fatal(err)
	}
	if err := adbtest.Request(c, "track-jdwp"); err != nil {
		t.Fatal(err)
	}
	if l, err := adbtest.ReadHex4(c); err != nil || l != "300\n400\n" {
		t.Fatalf("first list %q %v", l, err)
	}
	r.vms[1].Kill()
	r.d.RemoveVM(400)
	if l, err := adbtest.ReadHex4(c); err != nil || l != "300\n" {
		t.Fatalf("list after pid 400 died: %q %v", l, err)
	}
	// A refused service comes back as FAIL.
	c2 := srv.Dial(t)
	c2.SetDeadline(time.Now().Add(testwait.Bound))
	if err := adbtest.Request(c2, "host:transport:"+r.serial); err != nil {
		t.Fatal(err)
	}
	var fe *adbtest.FailError
	if err := adbtest.Request(c2, "jdwp:400"); !errors.As(err, &fe) {
		t.Fatalf("jdwp:400 of a dead app: %v, want FAIL", err)
	}
}

// TestAdbdSecondDebugger: below Android 9 a second JDWP connection to a
// held app is closed at once; the first keeps working.
func TestAdbdSecondDebugger(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 27, AppConfig{PID: 777})
	addr := r.forward(t, 777)
	c, _, err := openJDWP(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Hello(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openJDWP(t, addr); err == nil {
		t.Fatal("second debugger got a handshake")
	}
	if _, err := c.Hello(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatalf("first client broken: %v", err)
	}
	if n := r.vms[0].Stats().Refused; n != 1 {
		t.Fatalf("refused %d", n)
	}
}

// maxReportApp allocates only when told, every stack 16 frames deep.
func maxReportApp(pid int) AppConfig {
	return AppConfig{PID: pid, Package: "com.example.max", Workload: Workload{Rate: 0, MinDepth: 16, MaxDepth: 16}}
}

// TestAdbdMaxReport sends a report of 65,535 entries of 16 frames (about
// 9 MB, nine 1 MiB WRTE messages) through the real adb server.
func TestAdbdMaxReport(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 30, maxReportApp(901))
	vm := r.vms[0]
	c, _, err := openJDWP(t, r.forward(t, vm.PID()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 30*time.Second)
	c.SetAllocTracking(true)
	if on, err := c.AllocTracking(ctx); err != nil || !on {
		t.Fatalf("REAQ %v %v", on, err)
	}
	vm.Allocate(70000)
	payload, err := c.Allocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := allocreport.Parse(payload)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Allocations) != allocreport.MaxEntries || !rep.Overflowed() {
		t.Fatalf("%d entries (overflowed %v), want %d", len(rep.Allocations), rep.Overflowed(), allocreport.MaxEntries)
	}
	if n := rep.Stack(&rep.Allocations[0]).Len(); n != 16 {
		t.Fatalf("depth %d", n)
	}
	truth := vm.CurrentWindow()
	if truth.Allocated.Total.Allocations != 70000 {
		t.Fatalf("truth %d", truth.Allocated.Total.Allocations)
	}
	sameCounts(t, "report vs reported", reportCounts(rep), truth.Reported)
	t.Logf("report %d bytes", len(payload))
}

// TestAdbdDisconnect: a pulled cable drops the device from the adb server
// and ends its streams; online again, the device comes back.
func TestAdbdDisconnect(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 30, AppConfig{PID: 555})
	_, conn, err := openJDWP(t, r.forward(t, 555))
	if err != nil {
		t.Fatal(err)
	}
	r.a.SetOnline(false) // the server's reconnects fail until online again
	r.a.Disconnect()
	select {
	case <-conn.Done():
	case <-time.After(testwait.Bound):
		t.Fatal("JDWP stream still open after Disconnect")
	}
	deadline := time.Now().Add(testwait.Bound)
	for {
		m, err := srv.Devices(t)
		if err != nil {
			t.Fatal(err)
		}
		if m[r.serial] != "device" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("adb still lists %s as device after Disconnect", r.serial)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out, err := r.adb(t, "shell", "echo", "hi"); err == nil {
		t.Fatalf("shell on a disconnected device: %q", out)
	}
	r.a.SetOnline(true)
	srv.Connect(t, r.serial)
	if out, err := r.adb(t, "shell", "echo", "back"); err != nil || out != "back\n" {
		t.Fatalf("echo after reconnect: %q %v", out, err)
	}
}

func TestAdbdListenRefusesEmulatorPorts(t *testing.T) {
	a := NewAdbd(NewDevice(DeviceConfig{Serial: "x"}))
	defer a.Close()
	if _, err := a.Listen("127.0.0.1:5560"); err == nil {
		t.Fatal("listening on 5560")
	}
	a.Close()
	if _, err := a.Listen("127.0.0.1:0"); !errors.Is(err, ErrAdbdClosed) {
		t.Fatalf("Listen after Close: %v", err)
	}
}

// --- the wire codec and a scripted adb server, no adb needed ---

func TestAdbdMessageEncoding(t *testing.T) {
	for _, tc := range []struct {
		name            string
		cmd, arg0, arg1 uint32
		data            string
		check           bool
		want            []byte
	}{
		{"OKAY", cmdOKAY, 1, 2, "", false, []byte("OKAY\x01\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xb0\xb4\xbe\xa6")},
		{"WRTE with check", cmdWRTE, 3, 4, "hi", true, []byte("WRTE\x03\x00\x00\x00\x04\x00\x00\x00\x02\x00\x00\x00\xd1\x00\x00\x00\xa8\xad\xab\xbahi")},
		{"WRTE without", cmdWRTE, 3, 4, "hi", false, []byte("WRTE\x03\x00\x00\x00\x04\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\xa8\xad\xab\xbahi")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := appendAdbMessage(nil, tc.cmd, tc.arg0, tc.arg1, []byte(tc.data), tc.check)
			if !bytes.Equal(b, tc.want) {
				t.Fatalf("encoded % x\nwant    % x", b, tc.want)
			}
			m, err := readAdbMessage(bytes.NewReader(b), 1<<20, tc.check)
			if err != nil || m.cmd != tc.cmd || m.arg0 != tc.arg0 || m.arg1 != tc.arg1 || string(m.data) != tc.data {
				t.Fatalf("decoded %+v %v", m, err)
			}
		})
	}
}

func TestAdbdMessageRejects(t *testing.T) {
	good := appendAdbMessage(nil, cmdWRTE, 1, 2, []byte("hello"), true)
	badMagic := bytes.Clone(good)
	badMagic[20] ^= 1
	badCheck := bytes.Clone(good)
	badCheck[16]++
	for _, tc := range []struct {
		name   string
		b      []byte
		max    uint32
		verify bool
		is     error
	}{
		{"empty", nil, 100, false, io.EOF},
		{"short header", good[:10], 100, false, io.ErrUnexpectedEOF},
		{"short data", good[:26], 100, false, io.ErrUnexpectedEOF},
		{"bad magic", badMagic, 100, false, errAdbMagic},
		{"bad data_check", badCheck, 100, true, errAdbChecksum},
		{"too large", good, 4, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readAdbMessage(bytes.NewReader(tc.b), tc.max, tc.verify)
			if tc.is == nil {
				var tl *adbTooLargeError
				if !errors.As(err, &tl) || tl.Length != 5 || tl.Max != 4 {
					t.Fatalf("err = %v, want a too-large error", err)
				}
				return
			}
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
		})
	}
	// The check is not verified for version 0x01000001 peers.
	if _, err := readAdbMessage(bytes.NewReader(badCheck), 100, false); err != nil {
		t.Fatal(err)
	}
}

func FuzzReadAdbMessage(f *testing.F) {
	f.Add(appendAdbMessage(nil, cmdCNXN, adbVersion, 1<<20, []byte("host::features=shell_v2"), false))
	f.Add(appendAdbMessage(nil, cmdWRTE, 1, 2, []byte("data"), true))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := readAdbMessage(bytes.NewReader(b), 64, true)
		if err == nil && (len(m.data) > 64 || len(b) < adbHeaderLen+len(m.data)) {
			t.Fatalf("accepted %d data bytes from %d", len(m.data), len(b))
		}
	})
}

// rawPeer is a scripted adb server talking to an Adbd.
type rawPeer struct {
	t testing.TB
	c net.Conn
}

func dialAdbd(t *testing.T, apps ...AppConfig) (*rawPeer, *Adbd, *Device) {
	t.Helper()
	return dialAdbdAPI(t, 30, apps...)
}

// dialAdbdAPI is dialAdbd with a device of another API level.
func dialAdbdAPI(t *testing.T, api int, apps ...AppConfig) (*rawPeer, *Adbd, *Device) {
	t.Helper()
	d := NewDevice(DeviceConfig{Serial: "raw", API: api, Product: "p", Model: "m"})
	for _, cfg := range apps {
		d.AddVM(NewVM(cfg, api))
	}
	a := NewAdbd(d)
	addr, err := a.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		d.Close()
	})
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawPeer{t: t, c: c}, a, d
}

func (p *rawPeer) send(cmd, arg0, arg1 uint32, data string) {
	p.t.Helper()
	if _, err := p.c.Write(appendAdbMessage(nil, cmd, arg0, arg1, []byte(data), false)); err != nil {
		p.t.Fatal(err)
	}
}

func (p *rawPeer) recv() adbMessage {
	p.t.Helper()
	p.c.SetReadDeadline(time.Now().Add(testwait.Bound))
	m, err := readAdbMessage(p.c, AdbMaxPayload, false)
	if err != nil {
		p.t.Fatalf("reading from adbd: %v", err)
	}
	return m
}

func (p *rawPeer) expect(cmd, arg0, arg1 uint32, data string) adbMessage {
	p.t.Helper()
	m := p.recv()
	if m.cmd != cmd || (arg0 != 0 && m.arg0 != arg0) || m.arg1 != arg1 || (data != "" && string(m.data) != data) {
		p.t.Fatalf("got %s(%d, %d, %q), want %s(%d, %d, %q)", adbCommandName(m.cmd), m.arg0, m.arg1, m.data,
			adbCommandName(cmd), arg0, arg1, data)
	}
	return m
}

// quiet checks that nothing arrives for d.
func (p *rawPeer) quiet(d time.Duration) {
	p.t.Helper()
	p.c.SetReadDeadline(time.Now().Add(d))
	m, err := readAdbMessage(p.c, AdbMaxPayload, false)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		p.t.Fatalf("got %s(%d, %d, %q) %v, want nothing", adbCommandName(m.cmd), m.arg0, m.arg1, m.data, err)
	}
}

// drainOKAY reads for d, accepting only OKAY(arg0, arg1).
func (p *rawPeer) drainOKAY(arg0, arg1 uint32, d time.Duration) {
	p.t.Helper()
	for {
		p.c.SetReadDeadline(time.Now().Add(d))
		m, err := readAdbMessage(p.c, AdbMaxPayload, false)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return
		}
		if err != nil || m.cmd != cmdOKAY || m.arg0 != arg0 || m.arg1 != arg1 {
			p.t.Fatalf("got %s(%d, %d, %q) %v, want nothing but OKAY(%d, %d)", adbCommandName(m.cmd), m.arg0, m.arg1, m.data, err, arg0, arg1)
		}
	}
}

func (p *rawPeer) connect(version, maxData uint32) adbMessage {
	p.t.Helper()
	p.send(cmdCNXN, version, maxData, "host::features=shell_v2,cmd\x00")
	return p.expect(cmdCNXN, adbVersion, min(maxData, AdbMaxPayload), "device::ro.product.name=p;ro.product.model=m;ro.product.device=simulated;features="+
		"shell_v2,cmd,stat_v2,apex,abb,abb_exec,fixed_push_symlink_timestamp,ls_v2,sendrecv_v2,sendrecv_v2_brotli")
}

func TestAdbdWireStreams(t *testing.T) {
	p, _, _ := dialAdbd(t, AppConfig{PID: 100}, AppConfig{PID: 200}, AppConfig{PID: 300}, AppConfig{PID: 400}, AppConfig{PID: 500})
	p.send(cmdAUTH, 1, 0, "token") // ignored: no authentication
	// A peer offering 16 bytes gets WRTE messages of at most 16.
	cn := p.connect(adbVersion, 16)
	if cn.arg1 != 16 {
		t.Fatalf("maxdata %d", cn.arg1)
	}
	p.send(cmdOPEN, 7, 0, "nosuch:service\x00")
	p.expect(cmdCLSE, 0, 7, "")

	p.send(cmdOPEN, 8, 0, "jdwp\x00")
	ok := p.expect(cmdOKAY, 0, 8, "")
	local := ok.arg0
	p.expect(cmdWRTE, local, 8, "100\n200\n300\n400\n")
	p.quiet(100 * time.Millisecond) // one WRTE in flight
	p.send(cmdOKAY, 8, local, "")
	p.expect(cmdWRTE, local, 8, "500\n")
	p.send(cmdOKAY, 8, local, "")
	p.expect(cmdCLSE, local, 8, "")

	// WRTE from the peer is written to the service, then acknowledged.
	p.send(cmdOPEN, 9, 0, "track-jdwp\x00")
	local = p.expect(cmdOKAY, 0, 9, "").arg0
	p.expect(cmdWRTE, local, 9, "0014100\n200\n300\n")
	p.send(cmdOKAY, 9, local, "")
	p.expect(cmdWRTE, local, 9, "400\n500\n")
	p.send(cmdOKAY, 9, local, "")
	p.send(cmdWRTE, 9, local, "x") // writing to track-jdwp closes it
	for {
		m := p.recv()
		if m.cmd == cmdOKAY && m.arg0 == local && m.arg1 == 9 {
			continue
		}
		if m.cmd != cmdCLSE || m.arg0 != local || m.arg1 != 9 {
			t.Fatalf("got %s(%d, %d), want CLSE(%d, 9)", adbCommandName(m.cmd), m.arg0, m.arg1, local)
		}
		break
	}
	p.drainOKAY(local, 9, 100*time.Millisecond) // the ack of "x" may trail the CLSE

	// CLSE from the peer is never answered.
	p.send(cmdOPEN, 10, 0, "track-jdwp\x00")
	local = p.expect(cmdOKAY, 0, 10, "").arg0
	p.expect(cmdWRTE, local, 10, "")
	p.send(cmdCLSE, 10, local, "")
	p.quiet(100 * time.Millisecond)
}

func TestAdbdWireVersion0Checksums(t *testing.T) {
	p, _, _ := dialAdbd(t)
	p.c.Write(appendAdbMessage(nil, cmdCNXN, adbVersionMin, 4096, []byte("host::\x00"), true))
	p.c.SetReadDeadline(time.Now().Add(testwait.Bound))
	m, err := readAdbMessage(p.c, AdbMaxPayload, true) // verifies data_check
	if err != nil || m.cmd != cmdCNXN || m.arg1 != 4096 {
		t.Fatalf("CNXN %+v %v", m, err)
	}
	// A wrong data_check from a version 0x01000000 peer drops the connection.
	b := appendAdbMessage(nil, cmdOPEN, 1, 0, []byte("shell:echo hi\x00"), true)
	b[16]++
	p.c.Write(b)
	if _, err := readAdbMessage(p.c, AdbMaxPayload, false); !closed(err) {
		t.Fatalf("after a bad data_check: %v, want the connection closed", err)
	}
}

// closed tells whether err means the peer closed the connection: EOF, or
// a reset when it closed with our bytes unread.
func closed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func TestAdbdWireBadHeaderDrops(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"bad magic", func() []byte {
			b := appendAdbMessage(nil, cmdOPEN, 1, 0, []byte("jdwp\x00"), false)
			b[20] = 0
			return b
		}()},
		{"too large", func() []byte {
			b := appendAdbMessage(nil, cmdWRTE, 1, 1, nil, false)
			binary.LittleEndian.PutUint32(b[12:], AdbMaxPayload+1)
			return b
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, _ := dialAdbd(t)
			p.connect(adbVersion, AdbMaxPayload)
			p.c.Write(tc.msg)
			p.c.SetReadDeadline(time.Now().Add(testwait.Bound))
			if _, err := readAdbMessage(p.c, AdbMaxPayload, false); !closed(err) {
				t.Fatalf("%v, want the connection closed", err)
			}
		})
	}
	t.Run("CNXN over 4 KiB", func(t *testing.T) {
		p, _, _ := dialAdbd(t)
		p.send(cmdCNXN, adbVersion, AdbMaxPayload, strings.Repeat("x", 4097))
		p.c.SetReadDeadline(time.Now().Add(testwait.Bound))
		if _, err := readAdbMessage(p.c, AdbMaxPayload, false); !closed(err) {
			t.Fatalf("%v, want the connection closed", err)
		}
	})
}

// TestAdbdWireSlowStream: a service that stops reading holds up its own
// stream only.
func TestAdbdWireSlowStream(t *testing.T) {
	p, _, d := dialAdbd(t, AppConfig{PID: 100})
	d.VM(100).SetFaults(Faults{Latency: 3 * time.Second})
	p.connect(adbVersion, AdbMaxPayload)
	p.send(cmdOPEN, 1, 0, "jdwp:100\x00")
	slow := p.expect(cmdOKAY, 0, 1, "").arg0
	p.send(cmdWRTE, 1, slow, jdwp.Handshake)
	// The handshake is acknowledged and echoed, in either order.
	for got := 0; got != 3; {
		m := p.recv()
		switch {
		case m.cmd == cmdOKAY && m.arg0 == slow:
			got |= 1
		case m.cmd == cmdWRTE && m.arg0 == slow && string(m.data) == jdwp.Handshake:
			p.send(cmdOKAY, 1, slow, "")
			got |= 2
		default:
			t.Fatalf("got %s(%d, %d, %q)", adbCommandName(m.cmd), m.arg0, m.arg1, m.data)
		}
	}
	helo := jdwp.AppendPacket(nil, &jdwp.Packet{ID: 1, CommandSet: ddms.CommandSet, Command: ddms.Command,
		Data: ddms.EncodeChunk(ddms.HELO, ddms.EncodeHelloRequest(1))})
	// The VM reads ahead a few packets, then stops reading while each waits
	// out its 3 s: keep writing, one WRTE in flight, until one is not
	// acknowledged.
	// Each WRTE carries many requests, so that the stream's buffers fill.
	batch := strings.Repeat(string(helo), 2000)
	blocked := false
	for i := 0; i < 64 && !blocked; i++ {
		p.send(cmdWRTE, 1, slow, batch)
		p.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		m, err := readAdbMessage(p.c, AdbMaxPayload, false)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			blocked = true
		case err != nil:
			t.Fatal(err)
		case m.cmd != cmdOKAY || m.arg0 != slow:
			t.Fatalf("got %s(%d, %d, %q)", adbCommandName(m.cmd), m.arg0, m.arg1, m.data)
		}
	}
	if !blocked {
		t.Fatal("the slow stream never stopped acknowledging")
	}
	start := time.Now()
	p.send(cmdOPEN, 2, 0, "shell:echo hi\x00")
	fast := p.expect(cmdOKAY, 0, 2, "").arg0
	p.expect(cmdWRTE, fast, 2, "hi\n")
	p.send(cmdOKAY, 2, fast, "")
	p.expect(cmdCLSE, fast, 2, "")
	// Held up, it would wait for the blocked stream (for ever here).
	if el := time.Since(start); el > testwait.Bound/2 {
		t.Fatalf("a blocked stream held up another for %v", el)
	}
}

// --- benchmarks ---

// BenchmarkREALThroughRealADB measures one max-size REAL request (65,535
// entries of 16 frames, built by the VM) answered through a real adb
// server's forward.
func BenchmarkREALThroughRealADB(b *testing.B) {
	srv := adbtest.StartServer(b)
	r := newADBRig(b, srv, 30, maxReportApp(902))
	vm := r.vms[0]
	c, _, err := openJDWP(b, r.forward(b, vm.PID()))
	if err != nil {
		b.Fatal(err)
	}
	ctx := ctxFor(b, 10*time.Minute)
	c.SetAllocTracking(true)
	if on, err := c.AllocTracking(ctx); err != nil || !on {
		b.Fatalf("REAQ %v %v", on, err)
	}
	vm.Allocate(70000)
	payload, err := c.Allocations(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if rep, err := allocreport.Parse(payload); err != nil || len(rep.Allocations) != allocreport.MaxEntries {
		b.Fatalf("warm-up report: %v", err)
	}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for range b.N {
		if _, err := c.Allocations(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVMAllocate measures allocations one VM makes with tracking on
// (each one a sampled site, size and thread, a ring write and the truth).
func BenchmarkVMAllocate(b *testing.B) {
	vm := NewVM(AppConfig{PID: 1, Workload: Workload{Rate: 0}}, 30)
	defer vm.Kill()
	vm.mu.Lock()
	vm.setTrackingLocked(true)
	vm.mu.Unlock()
	b.ResetTimer()
	vm.Allocate(b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocs/s")
}

// BenchmarkVMReport measures building a max-size report in the VM.
func BenchmarkVMReport(b *testing.B) {
	vm := NewVM(maxReportApp(1), 30)
	defer vm.Kill()
	vm.mu.Lock()
	vm.setTrackingLocked(true)
	vm.mu.Unlock()
	vm.Allocate(70000)
	vm.mu.Lock()
	n := len(vm.reportLocked())
	vm.mu.Unlock()
	b.SetBytes(int64(n))
	b.ResetTimer()
	for range b.N {
		vm.mu.Lock()
		vm.reportLocked()
		vm.mu.Unlock()
	}
}
