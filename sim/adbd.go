package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
)

// adbd wire protocol (docs/protocol.md, section 3).
const (
	cmdCNXN = 0x4e584e43
	cmdAUTH = 0x48545541
	cmdOPEN = 0x4e45504f
	cmdOKAY = 0x59414b4f
	cmdWRTE = 0x45545257
	cmdCLSE = 0x45534c43

	adbVersionMin = 0x01000000 // data_check verified
	adbVersion    = 0x01000001 // data_check skipped

	adbHeaderLen = 24
	// AdbMaxPayload is the largest message payload Adbd accepts or sends
	// (Android 9+; earlier versions less, see AdbdMaxPayload).
	AdbMaxPayload = 1 << 20
	// adbMaxPayloadV1 bounds messages before the connection is made
	// (CNXN, AUTH).
	adbMaxPayloadV1 = 4096

	// adbInQueue is how many WRTE messages of one stream may wait for the
	// service. The adb server sends the next only after our OKAY, so one
	// is enough; more means the peer broke the protocol.
	adbInQueue = 4
)

var (
	errAdbMagic    = errors.New("sim: adbd: header magic does not match command")
	errAdbChecksum = errors.New("sim: adbd: data_check does not match data")
)

// adbTooLargeError reports a header that declares more data than the
// connection accepts.
type adbTooLargeError struct {
	Length uint32 // declared data_length
	Max    uint32
}

func (e *adbTooLargeError) Error() string {
	return fmt.Sprintf("sim: adbd: message data length %d exceeds maximum %d", e.Length, e.Max)
}

type adbMessage struct {
	cmd, arg0, arg1 uint32
	data            []byte
}

func adbCommandName(cmd uint32) string {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], cmd)
	for _, c := range b {
		if c < 'A' || c > 'Z' {
			return fmt.Sprintf("%#08x", cmd)
		}
	}
	return string(b[:])
}

// readAdbMessage reads one message. Header, six little-endian u32:
//
//	offset  size  field
//	0       4     command      CNXN, AUTH, OPEN, OKAY, WRTE, CLSE
//	4       4     arg0
//	8       4     arg1
//	12      4     data_length  checked against max before anything is allocated
//	16      4     data_check   byte sum of the data (checked when verify is set)
//	20      4     magic        command ^ 0xffffffff
//	24      n     data         data_length bytes
func readAdbMessage(r io.Reader, max uint32, verify bool) (adbMessage, error) {
	var h [adbHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return adbMessage{}, err
	}
	m := adbMessage{
		cmd:  binary.LittleEndian.Uint32(h[0:]),
		arg0: binary.LittleEndian.Uint32(h[4:]),
		arg1: binary.LittleEndian.Uint32(h[8:]),
	}
	n := binary.LittleEndian.Uint32(h[12:])
	check := binary.LittleEndian.Uint32(h[16:])
	if magic := binary.LittleEndian.Uint32(h[20:]); magic != m.cmd^0xffffffff {
		return adbMessage{}, fmt.Errorf("%w: command %#08x magic %#08x", errAdbMagic, m.cmd, magic)
	}
	if n > max {
		return adbMessage{}, &adbTooLargeError{Length: n, Max: max}
	}
	if n > 0 {
		m.data = make([]byte, n)
		if _, err := io.ReadFull(r, m.data); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return adbMessage{}, fmt.Errorf("sim: adbd: reading %d bytes of %s data: %w", n, adbCommandName(m.cmd), err)
		}
	}
	if verify {
		if sum := adbChecksum(m.data); sum != check {
			return adbMessage{}, fmt.Errorf("%w: %s: data_check %#x, sum %#x", errAdbChecksum, adbCommandName(m.cmd), check, sum)
		}
	}
	return m, nil
}

func adbChecksum(b []byte) uint32 {
	var s uint32
	for _, c := range b {
		s += uint32(c)
	}
	return s
}

// putAdbHeader fills the first 24 bytes of b for a message whose data is
// b[24:].
func putAdbHeader(b []byte, cmd, arg0, arg1 uint32, withCheck bool) {
	data := b[adbHeaderLen:]
	var check uint32
	if withCheck {
		check = adbChecksum(data)
	}
	binary.LittleEndian.PutUint32(b[0:], cmd)
	binary.LittleEndian.PutUint32(b[4:], arg0)
	binary.LittleEndian.PutUint32(b[8:], arg1)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(data)))
	binary.LittleEndian.PutUint32(b[16:], check)
	binary.LittleEndian.PutUint32(b[20:], cmd^0xffffffff)
}

// appendAdbMessage appends one encoded message to dst.
func appendAdbMessage(dst []byte, cmd, arg0, arg1 uint32, data []byte, withCheck bool) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, adbHeaderLen)...)
	dst = append(dst, data...)
	putAdbHeader(dst[start:], cmd, arg0, arg1, withCheck)
	return dst
}

// Adbd serves one Device over the adbd wire protocol on TCP, so that a real
// adb server accepts it after `adb connect` (protocol.md, section 3). It
// needs no authentication and advertises the device's features; it does
// not advertise delayed_ack.
type Adbd struct {
	d adbdDevice

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	addr      net.Addr
	conns     map[*adbTransport]struct{}
	offline   bool
	closed    bool
	wg        sync.WaitGroup // Listen's Serve, every transport
}

// adbdDevice is what an Adbd serves: a simulated Device or a Replay.
type adbdDevice interface {
	Banner() string
	OpenService(name string) (net.Conn, error)
	Disconnect()
	maxPayload() uint32
}

var (
	_ adbdDevice = (*Device)(nil)
	_ adbdDevice = (*Replay)(nil)
)

// NewAdbd returns an Adbd for d. It serves nothing until Serve or Listen.
func NewAdbd(d *Device) *Adbd { return newAdbd(d) }

func newAdbd(d adbdDevice) *Adbd {
	return &Adbd{d: d, listeners: map[net.Listener]struct{}{}, conns: map[*adbTransport]struct{}{}}
}

// ErrAdbdClosed is returned by Serve and Listen after Close.
var ErrAdbdClosed = errors.New("sim: adbd closed")

// Listen listens on addr (e.g. "127.0.0.1:0") and serves in a goroutine
// that Close waits for. Ports 5555–5585 are refused: the adb server probes
// them for emulators and would claim the device on its own.
func (a *Adbd) Listen(addr string) (net.Addr, error) {
	if _, p, err := net.SplitHostPort(addr); err == nil && emulatorPort(p) {
		return nil, fmt.Errorf("sim: adbd: listen %s: ports 5555-5585 are the adb server's emulator range", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: adbd: %w", err)
	}
	if _, p, err := net.SplitHostPort(l.Addr().String()); err == nil && emulatorPort(p) {
		l.Close()
		return nil, fmt.Errorf("sim: adbd: listen %s: got port %s, in the adb server's emulator range 5555-5585", addr, p)
	}
	if err := a.register(l, true); err != nil {
		return nil, err
	}
	go func() {
		defer a.wg.Done()
		a.serve(l)
	}()
	return l.Addr(), nil
}

// register adds l to the listeners Close closes, or closes l after Close.
func (a *Adbd) register(l net.Listener, owned bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		l.Close()
		return ErrAdbdClosed
	}
	a.listeners[l] = struct{}{}
	if a.addr == nil {
		a.addr = l.Addr()
	}
	if owned {
		a.wg.Add(1)
	}
	return nil
}

func emulatorPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 5555 && n <= 5585
}

// Addr is the address of the first listener served, or nil.
func (a *Adbd) Addr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// Serve accepts connections on l until l or the Adbd is closed. It returns
// nil after Close, the accept error otherwise. l is closed on return.
func (a *Adbd) Serve(l net.Listener) error {
	if err := a.register(l, false); err != nil {
		return err
	}
	return a.serve(l)
}

func (a *Adbd) serve(l net.Listener) error {
	defer func() {
		a.mu.Lock()
		delete(a.listeners, l)
		a.mu.Unlock()
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			a.mu.Lock()
			closed := a.closed
			a.mu.Unlock()
			if closed {
				return nil
			}
			return fmt.Errorf("sim: adbd: accept: %w", err)
		}
		a.mu.Lock()
		if a.closed || a.offline {
			a.mu.Unlock()
			c.Close()
			continue
		}
		t := newAdbTransport(a, c)
		a.conns[t] = struct{}{}
		a.wg.Add(1)
		a.mu.Unlock()
		go func() {
			defer a.wg.Done()
			t.run()
			a.mu.Lock()
			delete(a.conns, t)
			a.mu.Unlock()
		}()
	}
}

// dropAll closes every transport connection; their goroutines end on
// their own.
func (a *Adbd) dropAll() {
	a.mu.Lock()
	ts := make([]*adbTransport, 0, len(a.conns))
	for t := range a.conns {
		ts = append(ts, t)
	}
	a.mu.Unlock()
	for _, t := range ts {
		t.c.Close()
	}
}

// Disconnect drops every transport connection now, as a pulled cable
// does, and closes the device's service streams (Device.Disconnect). The
// adb server may reconnect at once unless the Adbd is offline.
func (a *Adbd) Disconnect() {
	a.dropAll()
	a.d.Disconnect()
}

// SetOnline(false) takes the device off the network: new TCP connections
// are accepted and closed at once, and the transports up now are dropped
// (their streams end). SetOnline(true) lets the adb server's reconnect, or
// a new `adb connect`, succeed again.
func (a *Adbd) SetOnline(on bool) {
	a.mu.Lock()
	a.offline = !on
	a.mu.Unlock()
	if !on {
		a.dropAll()
	}
}

// Close closes every listener and connection and waits for every
// goroutine the Adbd started. It is safe to call more than once.
func (a *Adbd) Close() error {
	a.mu.Lock()
	a.closed = true
	ls := make([]net.Listener, 0, len(a.listeners))
	for l := range a.listeners {
		ls = append(ls, l)
	}
	a.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	a.dropAll()
	a.wg.Wait()
	return nil
}

// adbTransport is one connection from an adb server.
type adbTransport struct {
	a *Adbd
	c net.Conn

	wmu sync.Mutex // one message per Write, whole

	mu        sync.Mutex
	connected bool   // CNXN answered
	maxData   uint32 // negotiated max payload
	checksum  bool   // peer is version 0x01000000: data_check computed and verified
	streams   map[uint32]*adbStream
	nextID    uint32
	dead      bool
	wg        sync.WaitGroup // stream goroutines
}

func newAdbTransport(a *Adbd, c net.Conn) *adbTransport {
	return &adbTransport{a: a, c: c, streams: map[uint32]*adbStream{}, maxData: adbMaxPayloadV1}
}

// write sends one message whose data is b[24:]; b[:24] is overwritten with
// its header. One Write per message, under the write lock.
func (t *adbTransport) write(b []byte, cmd, arg0, arg1 uint32) error {
	t.mu.Lock()
	check := t.checksum
	t.mu.Unlock()
	putAdbHeader(b, cmd, arg0, arg1, check)
	t.wmu.Lock()
	defer t.wmu.Unlock()
	_, err := t.c.Write(b)
	return err
}

func (t *adbTransport) send(cmd, arg0, arg1 uint32, data []byte) error {
	b := make([]byte, adbHeaderLen+len(data))
	copy(b[adbHeaderLen:], data)
	return t.write(b, cmd, arg0, arg1)
}

// AdbdMaxPayload is the largest payload the adbd of an Android version
// sends or accepts (MAX_PAYLOAD in adb/adb.h of each release): 4 KiB up
// to Android 6, 256 KiB on 7 and 8, 1 MiB from 9. It sets how many
// messages, each acknowledged before the next, a report takes to move.
func AdbdMaxPayload(api int) uint32 {
	switch {
	case api >= 28:
		return AdbMaxPayload
	case api >= 24:
		return 256 << 10
	}
	return adbMaxPayloadV1
}

// run reads messages until the connection fails, then ends every stream
// and waits for their goroutines.
func (t *adbTransport) run() {
	defer t.shutdown()
	for {
		t.mu.Lock()
		max, verify := t.maxData, t.checksum
		if !t.connected {
			max = adbMaxPayloadV1
		}
		t.mu.Unlock()
		m, err := readAdbMessage(t.c, max, verify)
		if err != nil {
			return // a bad header drops the connection
		}
		if !t.handle(&m) {
			return
		}
	}
}

func (t *adbTransport) shutdown() {
	t.c.Close()
	t.mu.Lock()
	t.dead = true
	ss := make([]*adbStream, 0, len(t.streams))
	for _, s := range t.streams {
		ss = append(ss, s)
	}
	t.mu.Unlock()
	for _, s := range ss {
		s.end(false)
	}
	t.wg.Wait()
}

// handle acts on one message; false drops the connection.
func (t *adbTransport) handle(m *adbMessage) bool {
	if m.cmd == cmdCNXN {
		return t.connect(m)
	}
	t.mu.Lock()
	connected := t.connected
	t.mu.Unlock()
	if !connected {
		// AUTH and anything else before CNXN: no authentication here;
		// the device answers the server's CNXN only.
		return true
	}
	switch m.cmd {
	case cmdOPEN:
		t.open(m)
	case cmdOKAY:
		if s := t.stream(m.arg1); s != nil && s.remote == m.arg0 {
			select {
			case s.acks <- struct{}{}:
			default:
			}
		}
	case cmdWRTE:
		if s := t.stream(m.arg1); s != nil && s.remote == m.arg0 {
			select {
			case s.in <- m.data:
			default:
				s.end(true) // WRTE after WRTE with no OKAY between: end the stream
			}
		}
	case cmdCLSE:
		if s := t.stream(m.arg1); s != nil && (m.arg0 == 0 || s.remote == m.arg0) {
			s.end(false) // never answer a CLSE
		}
	}
	return true
}

// connect answers CNXN. A repeated CNXN resets the connection, as adbd
// does: every stream ends.
func (t *adbTransport) connect(m *adbMessage) bool {
	if m.arg0 < adbVersionMin || m.arg1 == 0 {
		return false
	}
	t.mu.Lock()
	again := t.connected
	ss := make([]*adbStream, 0, len(t.streams))
	for _, s := range t.streams {
		ss = append(ss, s)
	}
	t.mu.Unlock()
	if again {
		for _, s := range ss {
			s.end(false)
		}
	}
	t.mu.Lock()
	t.connected = true
	t.maxData = min(m.arg1, t.a.d.maxPayload())
	t.checksum = m.arg0 < adbVersion
	maxData := t.maxData
	t.mu.Unlock()
	return t.send(cmdCNXN, adbVersion, maxData, []byte(t.a.d.Banner())) == nil
}

func (t *adbTransport) stream(id uint32) *adbStream {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.streams[id]
}

// open answers OPEN(remote, 0, "service\0") with OKAY(local, remote) and
// starts the stream, or refuses it with CLSE(0, remote).
func (t *adbTransport) open(m *adbMessage) {
	if m.arg0 == 0 {
		return
	}
	name := string(m.data)
	if i := len(name) - 1; i >= 0 && name[i] == 0 {
		name = name[:i]
	}
	svc, err := t.a.d.OpenService(name)
	if err != nil {
		t.send(cmdCLSE, 0, m.arg0, nil)
		return
	}
	t.mu.Lock()
	if t.dead {
		t.mu.Unlock()
		svc.Close()
		return
	}
	t.nextID++
	if t.nextID == 0 {
		t.nextID++
	}
	s := &adbStream{
		t:      t,
		local:  t.nextID,
		remote: m.arg0,
		svc:    svc,
		acks:   make(chan struct{}, 1),
		in:     make(chan []byte, adbInQueue),
		done:   make(chan struct{}),
		max:    int(t.maxData),
	}
	t.streams[s.local] = s
	t.wg.Add(2)
	t.mu.Unlock()
	// OKAY goes out before the pump can send the first WRTE.
	t.send(cmdOKAY, s.local, s.remote, nil)
	go s.pumpOut()
	go s.pumpIn()
}

// adbStream joins one adb stream to one service connection.
type adbStream struct {
	t             *adbTransport
	local, remote uint32
	svc           net.Conn
	acks          chan struct{} // the peer's OKAY for our WRTE
	in            chan []byte   // the peer's WRTE data, for the service
	done          chan struct{}
	max           int
	once          sync.Once
}

// end closes the stream once: the service connection closes, and CLSE goes
// to the peer when sendClose is set (the service ended, not the peer).
func (s *adbStream) end(sendClose bool) {
	s.once.Do(func() {
		t := s.t
		t.mu.Lock()
		delete(t.streams, s.local)
		t.mu.Unlock()
		close(s.done)
		s.svc.Close()
		if sendClose {
			t.send(cmdCLSE, s.local, s.remote, nil)
		}
	})
}

// pumpOut sends what the service writes as WRTE messages of at most the
// negotiated size, one in flight: the next waits for the peer's OKAY.
func (s *adbStream) pumpOut() {
	defer s.t.wg.Done()
	defer s.end(true)
	buf := make([]byte, adbHeaderLen+s.max)
	for {
		n, err := s.svc.Read(buf[adbHeaderLen:])
		if n > 0 {
			if s.t.write(buf[:adbHeaderLen+n], cmdWRTE, s.local, s.remote) != nil {
				return
			}
			select {
			case <-s.acks:
			case <-s.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pumpIn writes the peer's WRTE data into the service, each acknowledged
// with OKAY once written, so a slow service holds up only its own stream.
func (s *adbStream) pumpIn() {
	defer s.t.wg.Done()
	for {
		select {
		case b := <-s.in:
			if _, err := s.svc.Write(b); err != nil {
				return // the service is gone; pumpOut sees it end
			}
			select {
			case <-s.done:
				return // no OKAY on a closed stream
			default:
			}
			if s.t.send(cmdOKAY, s.local, s.remote, nil) != nil {
				return
			}
		case <-s.done:
			return
		}
	}
}
