package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrRefused is returned by OpenService for a service the device does not
// offer, or a jdwp:<pid> with no such debuggable process. Over the adbd wire
// protocol it becomes CLSE, which the adb server reports as "FAIL closed".
var ErrRefused = errors.New("sim: service refused")

// DeviceConfig describes a simulated device.
type DeviceConfig struct {
	Serial  string
	Product string // ro.product.name
	Model   string // ro.product.model
	Device  string // ro.product.device
	API     int    // ro.build.version.sdk
	// Build is the build type: "user", "userdebug" (the default) or
	// "eng". ro.build.type names it and ro.debuggable is 1 but on user
	// builds (Props may still set either); with the app's own flags it
	// decides who is in the JDWP list and who am dumpheap dumps
	// (debuggable.go).
	Build string
	// Props are extra system properties for getprop.
	Props map[string]string
	// NoPerfetto leaves perfetto out of the device's image: its shell
	// does not find the command.
	NoPerfetto bool
	// NoShellV2: the device's adbd, from Android 7.0 all the same, speaks
	// no shell protocol v2 (a vendor's adbd): it lists no shell_v2 and
	// refuses shell,v2 services. Hosts must ask the feature list.
	NoShellV2 bool
	// HeapprofdStartDelay is how long a heapprofd session takes to start
	// sampling a process (DefaultHeapprofdStartDelay when zero).
	HeapprofdStartDelay time.Duration
	// PerfettoStopDelay is how long a perfetto process lives on after
	// SIGTERM before its last dump is in the file and it exits
	// (DefaultPerfettoStopDelay when zero).
	PerfettoStopDelay time.Duration
	// OtherUIDSessions is how many tracing sessions of other uids the
	// device's tracing service runs: they count toward its limit of
	// MaxSessions in all.
	OtherUIDSessions int
	// LogBufferSize bounds each log buffer (main, system, crash, ...) as
	// logd counts entries (logbuf.go); DefaultLogBufferSize when zero.
	LogBufferSize int
}

// Device is a simulated Android device: its properties, its processes and
// the device services adbd offers. It is safe for concurrent use.
type Device struct {
	cfg DeviceConfig

	mu       sync.Mutex
	vms      map[int]*VM // by pid
	watchers map[chan struct{}]struct{}
	closed   bool
	stopped  chan struct{}         // closed by Close
	conns    map[net.Conn]struct{} // service streams, closed on Disconnect
	procs    map[int]string        // processes that are not debuggable VMs, by pid
	shellLog [][]string            // commands the shell ran, oldest first
	reboots  int
	versions map[string]AppVersion // installed builds (dumpsys.go)

	boot      time.Time
	files     map[string][]byte // the trace directory's files, by path
	perfettos map[int]*perfettoProc
	nextBgPID int
	refused   int // perfetto sessions the tracing service refused

	propStalls int           // getprop commands still to stall
	propStall  time.Duration // how long each stalls

	logs logBuffer // logd's buffers (logbuf.go, logcat.go)

	tests deviceTests // installed test suites and instrumentation runs (suite.go)
}

// StallGetprop makes the device's next n getprop commands answer only
// after delay each, as a device behind a slow link or proxy does.
func (d *Device) StallGetprop(n int, delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.propStalls, d.propStall = n, delay
}

// getpropStall returns how long this getprop stalls, counting it.
func (d *Device) getpropStall() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.propStalls <= 0 {
		return 0
	}
	d.propStalls--
	return d.propStall
}

// NewDevice returns a device with no processes.
func NewDevice(cfg DeviceConfig) *Device {
	if cfg.API == 0 {
		cfg.API = 30
	}
	if cfg.Product == "" {
		cfg.Product = "sim_" + cfg.Serial
	}
	if cfg.Model == "" {
		cfg.Model = "Simulated_Device"
	}
	if cfg.Device == "" {
		cfg.Device = "simulated"
	}
	if cfg.Build == "" {
		cfg.Build = BuildUserdebug
	}
	return &Device{
		cfg:       cfg,
		vms:       map[int]*VM{},
		watchers:  map[chan struct{}]struct{}{},
		conns:     map[net.Conn]struct{}{},
		procs:     map[int]string{},
		boot:      time.Now(),
		files:     map[string][]byte{},
		perfettos: map[int]*perfettoProc{},
		stopped:   make(chan struct{}),
	}
}

// Serial is the device's serial number.
func (d *Device) Serial() string { return d.cfg.Serial }

// Config returns the device's configuration.
func (d *Device) Config() DeviceConfig { return d.cfg }

// Features are the adbd features the device advertises, as the real adbd
// of its Android version does (docs/heapdumps.md, "What each Android
// version does"): none before 7.0, whose adbd has no feature list;
// shell_v2 and cmd from 7.0, stat_v2 from 8.0, apex, abb, abb_exec and
// fixed_push_symlink_timestamp from 10, ls_v2, sendrecv_v2 and
// sendrecv_v2_brotli from 11, track_app from 12 (docs/track-app.md).
func (d *Device) Features() []string {
	var out []string
	for _, f := range adbdFeatures {
		if d.cfg.API >= f.api {
			out = append(out, f.names...)
		}
	}
	if d.cfg.NoShellV2 {
		out = slices.DeleteFunc(out, func(f string) bool { return f == "shell_v2" })
	}
	return out
}

// adbdFeatures are the features adbd's transport.cpp lists, by the API
// level of the release that first has them.
var adbdFeatures = []struct {
	api   int
	names []string
}{
	{apiShellV2, []string{"shell_v2", "cmd"}},
	{26, []string{"stat_v2"}},
	{29, []string{"apex", "abb", "abb_exec", "fixed_push_symlink_timestamp"}},
	{30, []string{"ls_v2", "sendrecv_v2", "sendrecv_v2_brotli"}},
	{APITrackApp, []string{"track_app"}},
}

// Banner is the CNXN banner adbd sends: system type, then properties,
// and from Android 7.0 the features.
func (d *Device) Banner() string {
	b := fmt.Sprintf("device::ro.product.name=%s;ro.product.model=%s;ro.product.device=%s",
		d.cfg.Product, d.cfg.Model, d.cfg.Device)
	if d.cfg.API < apiShellV2 {
		return b
	}
	return b + ";features=" + strings.Join(d.Features(), ",")
}

func (d *Device) maxPayload() uint32 { return AdbdMaxPayload(d.cfg.API) }

// Props returns every system property of the device.
func (d *Device) Props() map[string]string {
	p := map[string]string{
		"ro.product.name":          d.cfg.Product,
		"ro.product.model":         d.cfg.Model,
		"ro.product.device":        d.cfg.Device,
		"ro.build.version.sdk":     strconv.Itoa(d.cfg.API),
		"ro.build.version.release": release(d.cfg.API),
		"ro.serialno":              d.cfg.Serial,
		"ro.debuggable":            debuggableProp(d.cfg.Build),
		"ro.build.type":            d.cfg.Build,
	}
	d.serviceProps(p)
	for k, v := range d.cfg.Props {
		p[k] = v
	}
	return p
}

// apiEmptyPropTrigger is the first API level whose init matches a
// property trigger on an empty value (system/core 6fd8d3bb1): from it,
// heapprofd.rc's `stop heapprofd` on two empty properties runs at boot
// and init.svc.heapprofd reads "stopped"; before, a service never
// started has no init.svc property at all (docs/doctor.md).
const apiEmptyPropTrigger = 30

// serviceProps sets init.svc.traced and init.svc.heapprofd as init does
// (docs/doctor.md): traced runs from boot on Android 10+ and is off by
// default on 9 (persist.traced.enable); heapprofd is a lazy service that
// no one has started yet.
func (d *Device) serviceProps(p map[string]string) {
	if d.cfg.API < apiPerfetto || d.cfg.NoPerfetto {
		return
	}
	p["init.svc.traced"] = "running"
	if d.cfg.API == apiPerfetto {
		p["init.svc.traced"] = "stopped"
	}
	if d.cfg.API >= apiEmptyPropTrigger {
		p["init.svc.heapprofd"] = "stopped"
	}
}

func release(api int) string {
	switch {
	case api >= 33: // Android 13 is API 33: 12L (32) took a level
		return strconv.Itoa(api - 20)
	case api == 32:
		return "12"
	case api >= 29:
		return strconv.Itoa(api - 19)
	case api >= 24:
		return map[int]string{24: "7.0", 25: "7.1", 26: "8.0", 27: "8.1", 28: "9"}[api]
	case api >= 21:
		return map[int]string{21: "5.0", 22: "5.1", 23: "6.0"}[api]
	default:
		return "4.4"
	}
}

// AddVM adds a running process. Its API level defaults to the device's.
func (d *Device) AddVM(vm *VM) {
	vm.mu.Lock()
	vm.fileWriter = d.PutFile
	vm.mu.Unlock()
	d.mu.Lock()
	d.vms[vm.PID()] = vm
	d.mu.Unlock()
	d.changed()
}

// RemoveVM removes a process from the list, as when it dies.
func (d *Device) RemoveVM(pid int) {
	d.mu.Lock()
	_, ok := d.vms[pid]
	delete(d.vms, pid)
	d.mu.Unlock()
	if ok {
		d.changed()
	}
}

// VM returns the process with pid, or nil.
func (d *Device) VM(pid int) *VM {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.vms[pid]
}

// VMs returns the processes, by pid.
func (d *Device) VMs() []*VM {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*VM, 0, len(d.vms))
	for _, vm := range d.vms {
		out = append(out, vm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID() < out[j].PID() })
	return out
}

// PIDs lists the pids of the processes with JDWP (the JDWP list:
// debuggable apps, and others as the build allows; debuggable.go),
// ascending.
func (d *Device) PIDs() []int {
	all := d.releaseJDWP()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]int, 0, len(d.vms))
	for pid, vm := range d.vms {
		if !vm.cfg.NotDebuggable || all {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// changed wakes every track-jdwp and track-app stream.
func (d *Device) changed() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch := range d.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Disconnect closes every open service stream of the device, as a pulled
// cable does. The transport (Adbd) drops its own connection separately.
func (d *Device) Disconnect() {
	d.mu.Lock()
	conns := d.conns
	d.conns = map[net.Conn]struct{}{}
	d.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	for _, vm := range d.VMs() {
		vm.dropClient()
	}
}

// OpenService opens a device service and returns the client's end of its
// stream. Services: shell:<cmd>, shell,v2,…:<cmd> (API 24+), track-jdwp, track-app
// (API 31+), jdwp, jdwp:<pid>, sync: (sync.go). Others are refused with ErrRefused.
func (d *Device) OpenService(name string) (net.Conn, error) {
	serve, err := d.service(name)
	if err != nil {
		return nil, err
	}
	client, server, err := streamPair()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		client.Close()
		server.Close()
		return nil, fmt.Errorf("%w: device is closed", ErrRefused)
	}
	d.conns[server] = struct{}{}
	d.mu.Unlock()
	go func() {
		defer func() {
			d.mu.Lock()
			delete(d.conns, server)
			d.mu.Unlock()
			server.Close()
		}()
		serve(server)
	}()
	return client, nil
}

// service returns what serves the named service's stream, or why adbd
// refuses it.
func (d *Device) service(name string) (func(net.Conn), error) {
	switch {
	case name == "track-jdwp":
		return d.serveTrackJDWP, nil
	case name == "track-app" && d.cfg.API >= APITrackApp:
		return d.serveTrackApp, nil
	case name == "sync:":
		return d.serveSync, nil
	case name == "jdwp":
		return d.serveJDWPList, nil
	case strings.HasPrefix(name, "jdwp:"):
		pid, err := strconv.Atoi(strings.TrimPrefix(name, "jdwp:"))
		if err != nil {
			return nil, fmt.Errorf("%w: %q: bad pid", ErrRefused, name)
		}
		vm := d.VM(pid)
		if vm == nil || !vm.Alive() || !d.hasJDWP(vm) {
			return nil, fmt.Errorf("%w: %q: no such debuggable process", ErrRefused, name)
		}
		return vm.ServeJDWP, nil
	case strings.HasPrefix(name, "shell,"):
		return d.shellV2Service(name)
	case strings.HasPrefix(name, "exec:"):
		return d.execService(strings.TrimPrefix(name, "exec:")), nil
	case strings.HasPrefix(name, "shell:"):
		return d.shellService(strings.TrimPrefix(name, "shell:")), nil
	}
	return nil, fmt.Errorf("%w: %q: unknown service", ErrRefused, name)
}

// serveJDWPList writes the JDWP pids once (the jdwp service).
func (d *Device) serveJDWPList(c net.Conn) {
	defer c.Close()
	var b strings.Builder
	for _, pid := range d.PIDs() {
		fmt.Fprintf(&b, "%d\n", pid)
	}
	io.WriteString(c, b.String())
}

// shellV2Service is shell,v2,raw:cmd or shell,v2,TERM=x,pty:cmd.
func (d *Device) shellV2Service(name string) (func(net.Conn), error) {
	i := strings.IndexByte(name, ':')
	if i < 0 {
		return nil, fmt.Errorf("%w: %q", ErrRefused, name)
	}
	args := strings.Split(name[len("shell,"):i], ",")
	switch {
	case d.cfg.API < apiShellV2:
		// adbd before 7.0 knows only shell:; an unknown service's
		// stream is closed at once.
		return nil, fmt.Errorf("%w: %q: unknown service (no shell protocol v2 before Android 7.0)", ErrRefused, name)
	case d.cfg.NoShellV2:
		return nil, fmt.Errorf("%w: %q: this adbd lists no shell_v2", ErrRefused, name)
	case !slices.Contains(args, "v2"):
		return nil, fmt.Errorf("%w: %q: only shell protocol v2 is offered", ErrRefused, name)
	}
	cmd := name[i+1:]
	return func(c net.Conn) { d.serveShellV2(c, cmd) }, nil
}

// execService is exec:cmd (exec-out): raw output, no pty, standard input
// until the client closes its side.
func (d *Device) execService(cmd string) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		if d.streamShell(c, cmd, streamExec) {
			return
		}
		out, _, _ := d.runShellIO(cmd, &shellInput{raw: c})
		c.Write(out)
	}
}

// shellService is shell:cmd, the one-stream shell.
func (d *Device) shellService(cmd string) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		if d.streamShell(c, cmd, d.legacyShellMode()) {
			return
		}
		out, _ := d.runShell(cmd)
		if d.cfg.API < apiShellV2 {
			// Before Android 7.0 the shell ran on a pty, which turns
			// each "\n" into "\r\n".
			out = bytes.ReplaceAll(out, []byte("\n"), []byte("\r\n"))
		}
		c.Write(out)
	}
}

// Close stops the device: every stream is closed and no more are opened.
func (d *Device) Close() {
	d.mu.Lock()
	if !d.closed {
		close(d.stopped)
	}
	d.closed = true
	d.mu.Unlock()
	d.Disconnect()
	d.stopPerfettos()
	for _, vm := range d.VMs() {
		vm.Kill()
	}
}

// follow serves a tracking stream (track-jdwp, track-app): ch wakes on
// every change of the device's processes, gone closes when the client
// writes anything or closes the stream, and stop ends the watch.
func (d *Device) follow(c net.Conn) (ch chan struct{}, gone <-chan struct{}, stop func()) {
	ch = make(chan struct{}, 1)
	d.mu.Lock()
	d.watchers[ch] = struct{}{}
	d.mu.Unlock()
	g := make(chan struct{})
	go func() {
		defer close(g)
		var b [1]byte
		c.Read(b[:]) // any byte or an error ends the service
		c.Close()
	}()
	return ch, g, func() {
		d.mu.Lock()
		delete(d.watchers, ch)
		d.mu.Unlock()
	}
}

// TrackJDWPUpdateMax is how many bytes of pid lines adbd puts in a
// track-jdwp update after the first list (1,024 less the 4 hex digits of
// length; adb/jdwp_service.c in 4.4, daemon/jdwp_service.cpp in 10 and 11).
const TrackJDWPUpdateMax = 1020

// serveTrackJDWP writes the pid list now and on every change, each list
// framed as 4 hex digits of length and "<pid>\n" lines. A write from the
// client, or its close, ends the service.
func (d *Device) serveTrackJDWP(c net.Conn) {
	ch, gone, stop := d.follow(c)
	defer stop()
	last := ""
	first := true
	for {
		// adbd sends the first list whole (bounded by its max payload),
		// and builds each later one in a 1,024-byte buffer, 4 of them for
		// the length: a line that does not fit is left out, and so is
		// every line after it (adb's jdwp_service).
		var b strings.Builder
		for _, pid := range d.PIDs() {
			line := fmt.Sprintf("%d\n", pid)
			if !first && b.Len()+len(line) > TrackJDWPUpdateMax {
				break
			}
			b.WriteString(line)
		}
		first = false
		if s := b.String(); s != last || last == "" {
			if _, err := fmt.Fprintf(c, "%04x%s", len(s), s); err != nil {
				return
			}
			last = s
			if last == "" {
				last = "\x00" // the empty list was sent once
			}
		}
		select {
		case <-ch:
		case <-gone:
			return
		}
	}
}

// serveShellV2 runs cmd and sends the shell protocol v2 frames: u8 id,
// u32 little-endian length, data; stdout (1), stderr (2), then the exit
// code (3). Standard input comes in frames too (0), ended by a
// close-stdin frame (4).
func (d *Device) serveShellV2(c net.Conn, cmd string) {
	defer c.Close()
	if d.streamShell(c, cmd, streamV2) {
		return
	}
	out, errOut, code := d.runShellIO(cmd, &shellInput{v2: c})
	var b []byte
	for _, f := range []struct {
		id   byte
		data []byte
	}{{1, out}, {2, errOut}} {
		if len(f.data) > 0 {
			n := len(f.data)
			b = append(b, f.id, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
			b = append(b, f.data...)
		}
	}
	b = append(b, 3, 1, 0, 0, 0, byte(code))
	c.Write(b)
}

// shellInput is a command's standard input, read only if the command
// reads it: from shell protocol v2 frames, or raw (exec-out).
type shellInput struct {
	v2   net.Conn
	raw  net.Conn
	done bool
	data []byte
}

// maxStdin bounds what a simulated command reads from its input.
const maxStdin = 1 << 20

func (in *shellInput) read() []byte {
	if in == nil || in.done {
		return in.data
	}
	in.done = true
	switch {
	case in.raw != nil:
		b, _ := io.ReadAll(io.LimitReader(in.raw, maxStdin))
		in.data = b
	case in.v2 != nil:
		var h [5]byte
		for len(in.data) <= maxStdin {
			if _, err := io.ReadFull(in.v2, h[:]); err != nil {
				break
			}
			n := int(h[1]) | int(h[2])<<8 | int(h[3])<<16 | int(h[4])<<24
			if n > maxStdin {
				break
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(in.v2, b); err != nil {
				break
			}
			if h[0] == 4 { // close-stdin
				break
			}
			if h[0] == 0 {
				in.data = append(in.data, b...)
			}
		}
	}
	return in.data
}
