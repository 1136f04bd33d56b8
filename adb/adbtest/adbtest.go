// Package adbtest serves a fake adb server that answers with hostile
// replies, for tests and measurements of the adb client and of what uses
// it, in the manner of net/http/httptest: NewServer listens on a free
// 127.0.0.1 port, Close ends every connection and waits for them.
//
// Each device of the server answers its services in a Mode: honestly, or
// with a negative or non-hex length (OKAY-001, FAIL-001, OKAYzzzz), the
// largest length each framing can declare followed by a stall, a reply
// that never ends, or no reply at all (docs/protocol.md, section 2, says
// what the honest replies are). Host services (host:version,
// host:devices-l, host:track-devices, host:transport) answer in the
// server's own Mode. Rotate gives each connection the next hostile mode.
//
// A real adb server for tests is internal/adbtest.
package adbtest

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is how the server answers a request.
type Mode string

// The modes. Where a reply has no length of its own (shell: output, a
// jdwp: stream), a mode about lengths answers FAIL with that length.
const (
	// Honest answers as an adb server with an idle device would.
	Honest Mode = "honest"
	// NegativeLength puts "-001" where a 4-hex-digit length is due
	// (OKAY-001, FAIL-001), and 0xffffffff (-1 as an int32) where a
	// binary length is (shell protocol v2 packets, sync DATA and FAIL).
	NegativeLength Mode = "negative-length"
	// FailNegative answers FAIL-001 to every request.
	FailNegative Mode = "fail-negative"
	// BadHex puts "zzzz" where a length is due (OKAYzzzz, FAILzzzz), and
	// an unknown sync id where a sync reply is.
	BadHex Mode = "bad-hex"
	// HugeLength declares the largest length the framing allows (ffff;
	// 0xfffffff0 for shell v2 packets and sync DATA), sends a few bytes
	// of it and stalls.
	HugeLength Mode = "huge-length"
	// Endless sends a reply that never ends: shell output, shell v2
	// stdout packets, sync DATA, a flood of device or pid lists, bytes on
	// a jdwp: stream.
	Endless Mode = "endless"
	// Stall reads the request and never answers.
	Stall Mode = "stall"
	// Rotate answers each connection in the next of Hostile's modes.
	Rotate Mode = "rotate"
)

// Hostile lists every hostile mode, the order Rotate takes them in.
var Hostile = []Mode{NegativeLength, FailNegative, BadHex, HugeLength, Endless, Stall}

// Device is one device of the server.
type Device struct {
	Serial string
	Mode   Mode // how its services answer; "" is Honest
	// HonestProps answers getprop honestly whatever the mode, so that a
	// client learns the API level and reaches the device's other
	// services.
	HonestProps bool
	API         int // ro.build.version.sdk (30 when 0)
}

// Config is what a Server serves.
type Config struct {
	Host    Mode // how host services answer; "" is Honest
	Devices []Device
	// Listen is the address to listen on, "127.0.0.1:0" (a free port)
	// when empty; a measurement restarts a server on its old address.
	Listen string
	// Pace is a pause between two 32 KiB writes of an endless reply (0:
	// as fast as the client reads), so that a long measurement does not
	// take the machine's CPU from everything else.
	Pace time.Duration
}

// Server is a running fake adb server.
type Server struct {
	cfg  Config
	ln   net.Listener
	wg   sync.WaitGroup
	next atomic.Uint64 // Rotate's counter

	mu    sync.Mutex
	conns map[net.Conn]bool
	reqs  []string
	done  bool
}

// NewServer starts a server on a free 127.0.0.1 port (or cfg.Listen). It
// panics if it cannot listen, as httptest.NewServer does.
func NewServer(cfg Config) *Server {
	addr := cfg.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		panic(fmt.Sprintf("adbtest: listening on %s: %v", addr, err))
	}
	s := &Server{cfg: cfg, ln: ln, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s
}

// Addr is the server's address, 127.0.0.1:<port>.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops listening, closes every connection and waits for their
// goroutines. It may be called more than once.
func (s *Server) Close() {
	s.ln.Close()
	s.mu.Lock()
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Requests returns the requests read so far, in order.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// Open is the number of connections the server still holds: one that the
// client closed is gone once the server has noticed (its next read or
// write).
func (s *Server) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer s.forget(c)
			s.serve(c)
		}()
	}
}

func (s *Server) forget(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// mode resolves Rotate for one connection.
func (s *Server) mode(m Mode) Mode {
	switch m {
	case "":
		return Honest
	case Rotate:
		return Hostile[(s.next.Add(1)-1)%uint64(len(Hostile))]
	}
	return m
}

// request reads one request: 4 hex digits of length, then the request.
func (s *Server) request(c net.Conn) (string, bool) {
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return "", false
	}
	n, err := strconv.ParseUint(string(h[:]), 16, 16)
	if err != nil {
		return "", false
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return "", false
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, string(b))
	s.mu.Unlock()
	return string(b), true
}

func (s *Server) device(serial string) (Device, bool) {
	for _, d := range s.cfg.Devices {
		if d.Serial == serial {
			return d, true
		}
	}
	return Device{}, false
}

// serve answers the requests of one connection.
func (s *Server) serve(c net.Conn) {
	req, ok := s.request(c)
	if !ok {
		return
	}
	host := s.mode(s.cfg.Host)
	serial, isTransport := strings.CutPrefix(req, "host:transport:")
	if !isTransport {
		s.host(c, host, req)
		return
	}
	d, ok := s.device(serial)
	switch {
	case host != Honest:
		s.answerLength(c, host, "FAIL") // transport has no reply of its own
		return
	case !ok:
		write(c, "FAIL"+hex4("device '"+serial+"' not found"))
		return
	}
	write(c, "OKAY")
	if req, ok = s.request(c); ok {
		s.service(c, d, req)
	}
}

// list is the device list, long (devices -l) or not.
func (s *Server) list(long bool) string {
	var b strings.Builder
	for _, d := range s.cfg.Devices {
		if long {
			fmt.Fprintf(&b, "%-22s device product:hostile model:Hostile_%s device:hostile transport_id:1\n", d.Serial, d.Mode)
		} else {
			fmt.Fprintf(&b, "%s\tdevice\n", d.Serial)
		}
	}
	return b.String()
}

// host answers a host service.
func (s *Server) host(c net.Conn, m Mode, req string) {
	var payload string
	switch req {
	case "host:version":
		payload = "0029"
	case "host:devices", "host:devices-l":
		payload = s.list(req == "host:devices-l")
	case "host:track-devices":
		payload = s.list(false)
		if m == Endless {
			write(c, "OKAY")
			s.flood(c, hex4(payload))
			return
		}
	default:
		write(c, "FAIL"+hex4("unknown host service"))
		return
	}
	if m == Honest {
		write(c, "OKAY"+hex4(payload))
		hold(c)
		return
	}
	s.answerLength(c, m, "OKAY")
}

// answerLength answers in a hostile mode where a status and a 4-hex-digit
// length are due; status is OKAY, or FAIL for a request whose OKAY has no
// length after it.
func (s *Server) answerLength(c net.Conn, m Mode, status string) {
	switch m {
	case NegativeLength:
		write(c, status+"-001")
	case FailNegative:
		write(c, "FAIL-001")
	case BadHex:
		write(c, status+"zzzz")
	case HugeLength:
		write(c, status+"ffff"+strings.Repeat("x", 16))
	case Endless:
		write(c, status+"ffff")
		s.flood(c, "endless ")
		return
	}
	hold(c)
}

// hex4 frames s with 4 hex digits of length.
func hex4(s string) string { return fmt.Sprintf("%04x%s", len(s), s) }

func write(c net.Conn, s string) bool {
	_, err := io.WriteString(c, s)
	return err == nil
}

// hold waits until the client closes the connection (or Close does),
// discarding what the client sends.
func hold(c net.Conn) { io.Copy(io.Discard, c) }

// flood writes chunk again and again until the client closes the
// connection (or Close does).
func (s *Server) flood(c net.Conn, chunk string) {
	b := []byte(strings.Repeat(chunk, max(1, (32<<10)/len(chunk))))
	for {
		if _, err := c.Write(b); err != nil {
			return
		}
		if s.cfg.Pace > 0 {
			time.Sleep(s.cfg.Pace)
		}
	}
}
