package sim

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrHostServerClosed is returned by Serve once Close was called, and by
// Listen on a closed server.
var ErrHostServerClosed = errors.New("sim: host server closed")

const (
	// hostServerVersion is ADB_SERVER_VERSION of every adb 29.x server.
	hostServerVersion = 41
	// maxHostRequest is the longest request the real server takes
	// (MAX_PAYLOAD_V1 in adb's smart socket).
	maxHostRequest = 4096
)

// HostServer is a stand-in adb server: it speaks the adb host protocol
// (docs/protocol.md, section 2) over TCP and serves in-process
// Devices, so that clients of the adb server run where no adb is installed.
//
// It answers host:version, host:devices[-l], host:track-devices[-l],
// host:transport:<serial>, host:transport-any, host:transport-id:<id>,
// features, get-state, get-serialno and get-devpath (plain, after host-serial:
// or host-transport-id:, or on a switched transport), and opens device
// services (Device.OpenService) on a transport. Replies, error texts and the
// device list format follow the adb 29 server. host:kill is refused: a test
// farm's server must not be killable by its clients. Port forwarding is not
// offered.
//
// A HostServer is safe for concurrent use.
type HostServer struct {
	mu        sync.Mutex
	devs      map[string]*hostDevice // by serial
	nextID    uint64
	watchers  map[chan struct{}]struct{} // track-devices streams
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	addr      net.Addr
	closed    bool
	wg        sync.WaitGroup // connection handlers and Listen's Serve
}

// hostDevice is a device as the server lists it: one transport.
type hostDevice struct {
	dev   *Device
	id    uint64 // transport id
	state string
	conns map[net.Conn]struct{} // connections switched to this transport
}

// NewHostServer returns a server with no devices that serves nothing until
// Serve or Listen.
func NewHostServer() *HostServer {
	return &HostServer{
		devs:      map[string]*hostDevice{},
		watchers:  map[chan struct{}]struct{}{},
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
	}
}

// AddDevice attaches d in state "device" with the next transport id. A
// device already attached under d's serial is replaced, its connections
// closed, as when a cable is replugged.
func (s *HostServer) AddDevice(d *Device) {
	s.mu.Lock()
	old := s.devs[d.Serial()]
	if old != nil && old.dev == d {
		s.mu.Unlock()
		return
	}
	s.nextID++
	s.devs[d.Serial()] = &hostDevice{dev: d, id: s.nextID, state: "device", conns: map[net.Conn]struct{}{}}
	kicked := s.kickLocked(old)
	s.notifyLocked()
	s.mu.Unlock()
	closeAll(kicked)
}

// RemoveDevice detaches the device with serial and closes every connection
// switched to it.
func (s *HostServer) RemoveDevice(serial string) {
	s.mu.Lock()
	hd := s.devs[serial]
	if hd == nil {
		s.mu.Unlock()
		return
	}
	delete(s.devs, serial)
	kicked := s.kickLocked(hd)
	s.notifyLocked()
	s.mu.Unlock()
	closeAll(kicked)
}

// SetState sets the state the device with serial is listed in ("device",
// "offline", "unauthorized", …). Only a device in state "device" can be
// switched to; leaving that state closes the device's connections.
func (s *HostServer) SetState(serial, state string) {
	s.mu.Lock()
	hd := s.devs[serial]
	if hd == nil || hd.state == state {
		s.mu.Unlock()
		return
	}
	hd.state = state
	var kicked []net.Conn
	if state != "device" {
		kicked = s.kickLocked(hd)
	}
	s.notifyLocked()
	s.mu.Unlock()
	closeAll(kicked)
}

// Devices returns the attached devices, ordered by serial as the device
// list is.
func (s *HostServer) Devices() []*Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Device, 0, len(s.devs))
	for _, hd := range s.sortedLocked() {
		out = append(out, hd.dev)
	}
	return out
}

// Addr is the address of the first listener served, or nil.
func (s *HostServer) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Listen listens on the TCP address addr (e.g. "127.0.0.1:0") and serves it
// in a goroutine that Close stops and waits for.
func (s *HostServer) Listen(addr string) (net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: host server: %w", err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil, ErrHostServerClosed
	}
	if s.addr == nil {
		s.addr = l.Addr()
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.Serve(l)
	}()
	return l.Addr(), nil
}

// Serve accepts connections on l until Close, then returns
// ErrHostServerClosed; any other accept error is returned as it is. l is
// closed on return.
func (s *HostServer) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrHostServerClosed
	}
	s.listeners[l] = struct{}{}
	if s.addr == nil {
		s.addr = l.Addr()
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrHostServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("sim: host server: accept: %w", err)
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return ErrHostServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops every listener, closes every connection and waits for every
// goroutine the server started. The devices are left as they are.
func (s *HostServer) Close() error {
	s.mu.Lock()
	s.closed = true
	ls := make([]net.Listener, 0, len(s.listeners))
	for l := range s.listeners {
		ls = append(ls, l)
	}
	cs := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	var errs []error
	for _, l := range ls {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	closeAll(cs)
	s.wg.Wait()
	return errors.Join(errs...)
}

// kickLocked detaches hd's connections for closing outside the lock.
func (s *HostServer) kickLocked(hd *hostDevice) []net.Conn {
	if hd == nil {
		return nil
	}
	out := make([]net.Conn, 0, len(hd.conns))
	for c := range hd.conns {
		out = append(out, c)
	}
	clear(hd.conns)
	return out
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// notifyLocked wakes every track-devices stream.
func (s *HostServer) notifyLocked() {
	for ch := range s.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *HostServer) sortedLocked() []*hostDevice {
	out := make([]*hostDevice, 0, len(s.devs))
	for _, hd := range s.devs {
		out = append(out, hd)
	}
	slices.SortFunc(out, func(a, b *hostDevice) int { return strings.Compare(a.dev.Serial(), b.dev.Serial()) })
	return out
}

// deviceList formats the device list as adb 29's list_transports does.
// Plain: "serial\tstate\n". Long: the serial padded to 22 columns, a space,
// the state, then " product:X model:Y device:Z" (each only if not empty;
// the model with every non-alphanumeric byte turned into '_') and
// " transport_id:N". A USB device would also show its devpath ("usb:1-1")
// after the state; simulated devices have none, like devices attached by
// adb connect.
func (s *HostServer) deviceList(long bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, hd := range s.sortedLocked() {
		serial := hd.dev.Serial()
		if serial == "" {
			serial = "(no serial number)"
		}
		if !long {
			b.WriteString(serial + "\t" + hd.state + "\n")
			continue
		}
		cfg := hd.dev.Config()
		fmt.Fprintf(&b, "%-22s %s", serial, hd.state)
		appendTransportInfo(&b, "product:", cfg.Product, false)
		appendTransportInfo(&b, "model:", cfg.Model, true)
		appendTransportInfo(&b, "device:", cfg.Device, false)
		fmt.Fprintf(&b, " transport_id:%d\n", hd.id)
	}
	return b.String()
}

func appendTransportInfo(b *strings.Builder, key, value string, alphanumeric bool) {
	if value == "" {
		return
	}
	b.WriteString(" " + key)
	for i := 0; i < len(value); i++ {
		c := value[i]
		isAlnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if alphanumeric && !isAlnum || c == '\n' {
			c = '_'
		}
		b.WriteByte(c)
	}
}

// A badRequestError is a request the server cannot read: it is answered
// with FAIL and the connection is closed.
type badRequestError struct{ msg string }

func (e *badRequestError) Error() string { return e.msg }

// readHostRequest reads one request: 4 hex digits of length, then that
// many bytes. It reads exactly the request, so that bytes after it (a JDWP
// handshake, say) stay in the socket for the service.
func readHostRequest(r io.Reader) (string, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", err
	}
	n := 0
	for _, c := range h {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return "", &badRequestError{fmt.Sprintf("bad request length %q: not 4 hex digits", h[:])}
		}
		n = n<<4 | int(v)
	}
	switch {
	case n == 0:
		return "", &badRequestError{"empty request"}
	case n > maxHostRequest:
		return "", &badRequestError{fmt.Sprintf("request length %d exceeds the maximum of %d", n, maxHostRequest)}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}

// lingerClose ends a connection whose peer may still be sending: it shuts
// down our side, then drains what arrives for a moment, so that closing
// with unread input does not reset the connection and destroy the FAIL
// just sent.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	c.Close()
}

// protocolString frames s as the server does: 4 hex digits of length, then
// s (clipped to what 4 hex digits can say).
func protocolString(s string) string {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	return fmt.Sprintf("%04x%s", len(s), s)
}

func writeOkay(c net.Conn, payload ...string) error {
	msg := "OKAY"
	for _, p := range payload {
		msg += protocolString(p)
	}
	_, err := io.WriteString(c, msg)
	return err
}

func writeFail(c net.Conn, reason string) error {
	_, err := io.WriteString(c, "FAIL"+protocolString(reason))
	return err
}

// hostTarget is the device a host request is about: the transport the
// connection was switched to, a serial (host-serial:), a transport id
// (host-transport-id:), or else the only device.
type hostTarget struct {
	cur    *hostDevice
	serial string
	id     uint64
}

// resolve finds the target's device and checks that it is online, with
// adb's error texts.
func (s *HostServer) resolve(t hostTarget) (*hostDevice, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hd := t.cur
	switch {
	case hd != nil:
		if s.devs[hd.dev.Serial()] != hd {
			return nil, "device offline"
		}
	case t.id != 0:
		for _, d := range s.devs {
			if d.id == t.id {
				hd = d
			}
		}
		if hd == nil {
			return nil, fmt.Sprintf("no device with transport id '%d'", t.id)
		}
	case t.serial != "":
		hd = s.devs[t.serial]
		if hd == nil {
			return nil, fmt.Sprintf("device '%s' not found", t.serial)
		}
	default:
		switch len(s.devs) {
		case 0:
			return nil, "no devices/emulators found"
		case 1:
			for _, d := range s.devs {
				hd = d
			}
		default:
			return nil, "more than one device/emulator"
		}
	}
	switch hd.state {
	case "device":
		return hd, ""
	case "unauthorized":
		return nil, "device unauthorized.\nThis adb server's $ADB_VENDOR_KEYS is not set\n" +
			"Try 'adb kill-server' if that seems wrong.\nOtherwise check for a confirmation dialog on your device."
	case "connecting":
		return nil, "device still connecting"
	case "authorizing":
		return nil, "device still authorizing"
	}
	return nil, "device offline"
}

// attach registers c as switched to hd, so that losing hd closes c. It
// fails if hd is no longer attached or online.
func (s *HostServer) attach(c net.Conn, hd *hostDevice) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.devs[hd.dev.Serial()] != hd || hd.state != "device" {
		return false
	}
	hd.conns[c] = struct{}{}
	return true
}

func (s *HostServer) detach(c net.Conn, hd *hostDevice) {
	s.mu.Lock()
	delete(hd.conns, c)
	s.mu.Unlock()
}

// serveConn serves one client connection: host requests, possibly a switch
// to a transport, then at most one device service.
func (s *HostServer) serveConn(c net.Conn) {
	var cur *hostDevice
	defer func() {
		if cur != nil {
			s.detach(c, cur)
		}
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
		s.wg.Done()
	}()
	for {
		req, err := readHostRequest(c)
		if err != nil {
			var bad *badRequestError
			if errors.As(err, &bad) {
				writeFail(c, bad.msg)
				lingerClose(c)
			}
			return
		}
		t := hostTarget{cur: cur}
		service, isHost, errMsg := splitHostRequest(req, &t)
		if errMsg != "" {
			writeFail(c, errMsg)
			return
		}
		if !isHost {
			// A device service: on the switched transport, or else on the
			// only device, as adb does.
			hd, reason := s.resolve(t)
			if hd == nil {
				writeFail(c, reason)
				return
			}
			if cur == nil {
				if !s.attach(c, hd) {
					writeFail(c, "device offline")
					return
				}
				cur = hd
			}
			s.serveDevice(c, hd, service)
			return
		}
		hd, ok := s.serveHost(c, service, t)
		if !ok {
			return
		}
		// Switched: the next request on this socket goes to hd.
		if cur != nil {
			s.detach(c, cur)
			cur = nil
		}
		if !s.attach(c, hd) {
			return // lost between the OKAY and now: the client sees EOF
		}
		cur = hd
	}
}

// splitHostRequest takes the host prefix off req: "host:", or
// "host-serial:<serial>:" and "host-transport-id:<id>:", which also set the
// target. isHost is false for a device service.
func splitHostRequest(req string, t *hostTarget) (service string, isHost bool, errMsg string) {
	switch {
	case strings.HasPrefix(req, "host:"):
		return req[len("host:"):], true, ""
	case strings.HasPrefix(req, "host-serial:"):
		rest := req[len("host-serial:"):]
		i := skipHostSerial(rest)
		if i < 0 {
			return "", true, "unknown host service"
		}
		t.cur, t.serial = nil, rest[:i]
		return rest[i+1:], true, ""
	case strings.HasPrefix(req, "host-transport-id:"):
		rest := req[len("host-transport-id:"):]
		idStr, svc, ok := strings.Cut(rest, ":")
		id, err := strconv.ParseUint(idStr, 10, 64)
		if !ok || err != nil || id == 0 {
			return "", true, "invalid transport id"
		}
		t.cur, t.id = nil, id
		return svc, true, ""
	}
	return req, false, ""
}

// skipHostSerial returns the index of the colon that ends the serial in
// "<serial>:<service>", as adb's skip_host_serial finds it: a serial may be
// host:port (optionally tcp: or udp: first, IPv6 hosts in brackets), so a
// colon followed by digits and another colon belongs to the serial. -1 if
// there is no colon.
func skipHostSerial(s string) int {
	start := 0
	if strings.HasPrefix(s, "tcp:") || strings.HasPrefix(s, "udp:") {
		start = 4
	}
	if strings.HasPrefix(s[start:], "[") {
		if j := strings.IndexByte(s[start:], ']'); j >= 0 {
			start += j
		}
	}
	colon := strings.IndexByte(s[start:], ':')
	if colon < 0 {
		return -1
	}
	colon += start
	end := colon + 1
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	if end > colon+1 && end < len(s) && s[end] == ':' {
		return end
	}
	return colon
}

// serveHost answers one host service. It returns the device and true when
// the connection switched to a transport (OKAY sent); false when the
// connection is done.
func (s *HostServer) serveHost(c net.Conn, service string, t hostTarget) (*hostDevice, bool) {
	switch {
	case service == "version":
		writeOkay(c, fmt.Sprintf("%04x", hostServerVersion))
	case service == "devices" || service == "devices-l":
		writeOkay(c, s.deviceList(service == "devices-l"))
	case service == "track-devices" || service == "track-devices-l":
		s.trackDevices(c, service == "track-devices-l")
	case strings.HasPrefix(service, "transport"):
		sel := hostTarget{}
		switch {
		case service == "transport-any":
		case strings.HasPrefix(service, "transport:"):
			sel.serial = service[len("transport:"):]
			if sel.serial == "" {
				writeFail(c, "device '' not found")
				return nil, false
			}
		case strings.HasPrefix(service, "transport-id:"):
			id, err := strconv.ParseUint(service[len("transport-id:"):], 10, 64)
			if err != nil || id == 0 {
				writeFail(c, "invalid transport id")
				return nil, false
			}
			sel.id = id
		default:
			writeFail(c, "unknown host service")
			return nil, false
		}
		hd, reason := s.resolve(sel)
		if hd == nil {
			writeFail(c, reason)
			return nil, false
		}
		if writeOkay(c) != nil {
			return nil, false
		}
		return hd, true
	case service == "features" || service == "get-state" || service == "get-serialno" || service == "get-devpath":
		hd, reason := s.resolve(t)
		if hd == nil {
			writeFail(c, reason)
			break
		}
		var v string
		switch service {
		case "features":
			v = strings.Join(hd.dev.Features(), ",")
		case "get-state":
			v = "device" // resolve only returns devices in this state
		case "get-serialno":
			v = cmp.Or(hd.dev.Serial(), "unknown")
		case "get-devpath":
			v = "unknown" // no USB path: like a device attached by adb connect
		}
		writeOkay(c, v)
	case service == "kill":
		writeFail(c, "not supported")
	default:
		writeFail(c, "unknown host service")
	}
	return nil, false
}

// trackDevices sends OKAY and the device list, then a new list on every
// change, until the client closes or writes (adb closes a tracker that is
// written to).
func (s *HostServer) trackDevices(c net.Conn, long bool) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.watchers[ch] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, ch)
		s.mu.Unlock()
	}()
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		var b [1]byte
		c.Read(b[:])
		c.Close()
	}()
	defer func() {
		c.Close()
		<-gone
	}()
	msg := "OKAY"
	for {
		msg += protocolString(s.deviceList(long))
		if _, err := io.WriteString(c, msg); err != nil {
			return
		}
		msg = ""
		select {
		case <-ch:
		case <-gone:
			return
		}
	}
}

// serveDevice opens service on hd's device and, once it is accepted, copies
// bytes both ways until either side ends. A refused service is answered
// "FAIL closed", as the adb server reports a stream the device closed.
func (s *HostServer) serveDevice(c net.Conn, hd *hostDevice, service string) {
	svc, err := hd.dev.OpenService(service)
	if err != nil {
		writeFail(c, "closed")
		return
	}
	defer svc.Close()
	if writeOkay(c) != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(svc, c)
		// The client is done sending (or the service stopped reading):
		// the service sees the end of its input, and what it still has
		// to say keeps flowing to the client. Closing svc here would cut
		// that short.
		if cw, ok := svc.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			svc.Close()
		}
		// Whatever else the client sends is read and dropped: closing a
		// TCP connection with data unread resets it, and the client
		// would lose output it has not read yet.
		io.Copy(io.Discard, c)
	}()
	io.Copy(c, svc)
	// The service ended: the client reads the rest and then the end of
	// the stream; it gets a moment to close its side first.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	}
	c.Close()
	svc.Close()
	<-done
}
