package adb

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultPort is the adb server's port when nothing says otherwise.
const DefaultPort = 5037

// Errors callers branch on; FailError wraps them when the reason matches.
var (
	// ErrDeviceNotFound: the server does not know the serial.
	ErrDeviceNotFound = errors.New("adb: device not found")
	// ErrDeviceOffline: the device is known but not online.
	ErrDeviceOffline = errors.New("adb: device offline")
	// ErrServiceClosed: the device closed the service before accepting it;
	// for jdwp:<pid> the process is gone, not debuggable, or frozen.
	ErrServiceClosed = errors.New("adb: service closed by the device")
	// ErrProtocol: the server sent something that is not the host protocol.
	ErrProtocol = errors.New("adb: protocol error")
)

// FailError is a FAIL reply from the server.
type FailError struct {
	Request string
	Reason  string
}

func (e *FailError) Error() string {
	return fmt.Sprintf("adb: %s: server says %q", e.Request, e.Reason)
}

// Unwrap maps the server's reason to a sentinel.
func (e *FailError) Unwrap() error {
	switch r := e.Reason; {
	case r == "closed":
		return ErrServiceClosed
	case strings.HasPrefix(r, "device '") && strings.HasSuffix(r, "' not found"),
		r == "no devices/emulators found", strings.HasPrefix(r, "device not found"):
		return ErrDeviceNotFound
	case strings.Contains(r, "offline"):
		return ErrDeviceOffline
	}
	return nil
}

// DefaultAddress is the adb server address from the environment:
// ADB_SERVER_SOCKET=tcp:host:port, else ANDROID_ADB_SERVER_PORT, else
// 127.0.0.1:5037.
func DefaultAddress() string {
	if s := os.Getenv("ADB_SERVER_SOCKET"); strings.HasPrefix(s, "tcp:") {
		a := strings.TrimPrefix(s, "tcp:")
		if _, err := strconv.Atoi(a); err == nil {
			return net.JoinHostPort("127.0.0.1", a) // tcp:<port> is the local host
		}
		return a
	}
	if p := os.Getenv("ANDROID_ADB_SERVER_PORT"); p != "" {
		if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 {
			return net.JoinHostPort("127.0.0.1", p)
		}
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultPort))
}

// Client talks to one adb server.
type Client struct {
	addr   string
	dialer net.Dialer
}

// NewClient returns a client of the server at addr (host:port).
func NewClient(addr string) *Client { return &Client{addr: addr} }

// Addr is the server's address.
func (c *Client) Addr() string { return c.addr }

// conn is a connection to the server with its context watched.
type conn struct {
	net.Conn
	r    *bufio.Reader
	stop func() bool
	ctx  context.Context
}

// fail wraps err, preferring the context's error once the context has
// ended (its deadline or cancel is what made the socket time out).
func (c *conn) fail(format string, err error, args ...any) error {
	if cerr := c.ctx.Err(); cerr != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w (%v)", cerr, err)
	} else if dl, ok := c.ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
		err = fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// dial connects to the server. The context's deadline bounds reads and
// writes unless stream is set (a tracking connection waits for changes as
// long as it lives); cancelling the context always ends them.
func (c *Client) dial(ctx context.Context, stream bool) (*conn, error) {
	nc, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("adb: connecting to the server at %s: %w", c.addr, err)
	}
	if dl, ok := ctx.Deadline(); ok && !stream {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	return &conn{Conn: nc, r: bufio.NewReader(nc), stop: stop, ctx: ctx}, nil
}

func (c *conn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c *conn) Close() error {
	c.stop()
	return c.Conn.Close()
}

// send writes one request, framed as 4 hex digits of length, in one write,
// and reads the OKAY/FAIL status.
func (c *conn) send(req string) error {
	if len(req) > 0xffff {
		return fmt.Errorf("adb: request of %d bytes is too long", len(req))
	}
	if _, err := c.Conn.Write([]byte(fmt.Sprintf("%04x%s", len(req), req))); err != nil {
		return c.fail("adb: sending %s", err, req)
	}
	return c.readStatus(req)
}

// readStatus reads the answer to req: OKAY, or FAIL and a reason framed
// as 4 hex digits of length and that many bytes.
func (c *conn) readStatus(req string) error {
	var st [4]byte
	if _, err := io.ReadFull(c.r, st[:]); err != nil {
		return c.fail("adb: reading status of %s", err, req)
	}
	switch string(st[:]) {
	case "OKAY":
		return nil
	case "FAIL":
		msg, err := c.readHex(req + " failure reason")
		if err != nil {
			return err
		}
		return &FailError{Request: req, Reason: string(msg)}
	}
	return fmt.Errorf("%w: %s: status %q", ErrProtocol, req, st[:])
}

// readHex reads 4 hex digits of length and that many bytes (65,535 at
// most), into a buffer that grows as they arrive.
func (c *conn) readHex(what string) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return nil, c.fail("adb: reading length of %s", err, what)
	}
	n, err := parseHexLen(h)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: length %q is not 4 hex digits", ErrProtocol, what, h[:])
	}
	b, err := readExactly(c.r, n)
	if err != nil {
		return nil, c.fail("adb: reading %d bytes of %s", err, n, what)
	}
	return b, nil
}

// parseHexLen reads the 4 hex digits of a length; anything else (a sign,
// a space, "0x") is an error, so no length is negative.
func parseHexLen(h [4]byte) (int, error) {
	n := 0
	for _, c := range h {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, ErrProtocol
		}
		n = n<<4 | int(d)
	}
	return n, nil
}

// Version asks the server for its protocol version (41 for adb 29).
func (c *Client) Version(ctx context.Context) (int, error) {
	cn, err := c.dial(ctx, false)
	if err != nil {
		return 0, err
	}
	defer cn.Close()
	if err := cn.send("host:version"); err != nil {
		return 0, err
	}
	b, err := cn.readHex("version")
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(string(b), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: version %q", ErrProtocol, b)
	}
	return int(v), nil
}

// DeviceState is one line of a device list.
type DeviceState struct {
	Serial string
	State  string // "device" when online; "offline", "unauthorized", …
}

// ParseDevices parses a host:devices / host:track-devices list:
// "serial<TAB>state" lines. Lines it cannot read are an error.
func ParseDevices(b []byte) ([]DeviceState, error) {
	var out []DeviceState
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		serial, state, ok := strings.Cut(line, "\t")
		if !ok || serial == "" {
			return nil, fmt.Errorf("%w: device list line %q", ErrProtocol, line)
		}
		out = append(out, DeviceState{Serial: serial, State: strings.TrimSpace(state)})
	}
	return out, nil
}

// TrackDevices follows host:track-devices, calling fn with each new list
// (one equal to the last is dropped), until ctx ends or the connection
// breaks; it returns the reason.
func (c *Client) TrackDevices(ctx context.Context, fn func([]DeviceState)) error {
	cn, err := c.dial(ctx, true) // a list comes only on change
	if err != nil {
		return err
	}
	defer cn.Close()
	if err := cn.send("host:track-devices"); err != nil {
		return err
	}
	var last lastList
	for {
		b, err := cn.nextList("device list", &last)
		if err != nil {
			return err
		}
		list, err := ParseDevices(b)
		if err != nil {
			return err
		}
		fn(list)
	}
}

// lastList is the last list a tracking connection delivered.
type lastList struct {
	b    []byte
	seen bool
}

// nextList reads framed lists until one differs from the last it returned
// (the context's error once it has ended): the server sends a list at once
// and on every change, so a repeat tells nothing, and a flood of repeats
// costs only their reading, not a caller's work on each.
func (c *conn) nextList(what string, last *lastList) ([]byte, error) {
	for {
		b, err := c.readHex(what)
		if err != nil {
			if c.ctx.Err() != nil {
				return nil, c.ctx.Err()
			}
			return nil, err
		}
		if !last.seen || !bytes.Equal(b, last.b) {
			last.b, last.seen = b, true
			return b, nil
		}
	}
}

// transport opens a connection switched to the device with serial.
func (c *Client) transport(ctx context.Context, serial string, stream bool) (*conn, error) {
	cn, err := c.dial(ctx, stream)
	if err != nil {
		return nil, err
	}
	if err := cn.send("host:transport:" + serial); err != nil {
		cn.Close()
		return nil, err
	}
	return cn, nil
}

// ParsePIDs parses a track-jdwp list: one decimal pid per line.
func ParsePIDs(b []byte) ([]int, error) {
	var out []int
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%w: pid list line %q", ErrProtocol, line)
		}
		out = append(out, pid)
	}
	return out, nil
}

// TrackJDWP follows track-jdwp on a device, calling fn with each list of
// debuggable pids (one equal to the last is dropped), until ctx ends or
// the stream breaks.
func (c *Client) TrackJDWP(ctx context.Context, serial string, fn func([]int)) error {
	cn, err := c.transport(ctx, serial, true)
	if err != nil {
		return err
	}
	defer cn.Close()
	if err := cn.send("track-jdwp"); err != nil {
		return err
	}
	var last lastList
	for {
		b, err := cn.nextList("pid list", &last)
		if err != nil {
			return err
		}
		pids, err := ParsePIDs(b)
		if err != nil {
			return err
		}
		fn(pids)
	}
}

// OpenJDWP opens jdwp:<pid> on a device and returns the raw JDWP stream.
// The context bounds only the opening; the returned conn has no deadline.
func (c *Client) OpenJDWP(ctx context.Context, serial string, pid int) (net.Conn, error) {
	cn, err := c.transport(ctx, serial, false)
	if err != nil {
		return nil, err
	}
	if err := cn.send("jdwp:" + strconv.Itoa(pid)); err != nil {
		cn.Close()
		return nil, err
	}
	if !cn.stop() {
		// The context ended as the stream opened; its deadline is set.
		cn.Conn.Close()
		return nil, fmt.Errorf("adb: opening jdwp:%d on %s: %w", pid, serial, ctx.Err())
	}
	cn.SetDeadline(time.Time{})
	if cn.r.Buffered() > 0 {
		// Bytes that came with the OKAY belong to the stream.
		return &bufferedConn{Conn: cn.Conn, r: cn.r}, nil
	}
	return cn.Conn, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }
