package adb_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer is a scripted adb server on 127.0.0.1: connection i runs
// script i. It records every request it reads. Its goroutines report
// failures through a channel that the test reads in Cleanup; they never
// call t.Fatal.
type fakeServer struct {
	ln      net.Listener
	scripts []script
	errs    chan error
	wg      sync.WaitGroup

	mu    sync.Mutex
	reqs  []string
	conns []net.Conn
}

// script is what the server does on one connection.
type script func(p *peer) error

// peer is the server's side of one connection.
type peer struct {
	net.Conn
	s *fakeServer
}

func newFakeServer(t *testing.T, scripts ...script) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{ln: ln, scripts: scripts, errs: make(chan error, 16+len(scripts))}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		ln.Close()
		// Let the scripts finish with the client (which has closed its
		// side by now, unless the test keeps it), then end the rest.
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			s.closeConns()
			<-done
		}
		close(s.errs)
		for err := range s.errs {
			t.Errorf("fake adb server: %v", err)
		}
	})
	return s
}

// closeConns closes the server's side of every connection.
func (s *fakeServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

func (s *fakeServer) accept() {
	defer s.wg.Done()
	for i := 0; ; i++ {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed by Cleanup
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		if i >= len(s.scripts) {
			s.errs <- fmt.Errorf("unexpected connection %d (script has %d)", i+1, len(s.scripts))
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func(p *peer, sc script) {
			defer s.wg.Done()
			defer p.Close()
			if err := sc(p); err != nil {
				s.errs <- fmt.Errorf("connection %d: %w", i+1, err)
			}
		}(&peer{Conn: c, s: s}, s.scripts[i])
	}
}

// requests returns the requests read so far, in order.
func (s *fakeServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// request reads one request as the adb server does: 4 lowercase hex
// digits of length, then the request.
func (p *peer) request() (string, error) {
	var h [4]byte
	if _, err := io.ReadFull(p, h[:]); err != nil {
		return "", fmt.Errorf("reading request length: %w", err)
	}
	n, err := strconv.ParseUint(string(h[:]), 16, 16)
	if err != nil || fmt.Sprintf("%04x", n) != string(h[:]) {
		return "", fmt.Errorf("request length %q is not 4 lowercase hex digits", h[:])
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(p, b); err != nil {
		return "", fmt.Errorf("reading %d bytes of request: %w", n, err)
	}
	p.s.mu.Lock()
	p.s.reqs = append(p.s.reqs, string(b))
	p.s.mu.Unlock()
	return string(b), nil
}

// expect reads a request and checks it.
func (p *peer) expect(want string) error {
	got, err := p.request()
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("request %q, want %q", got, want)
	}
	return nil
}

func (p *peer) write(s string) error {
	_, err := io.WriteString(p, s)
	return err
}

// waitClose reads until the client closes the connection (or Cleanup
// does); bytes the client sends meanwhile are an error.
func (p *peer) waitClose() error {
	var b [64]byte
	n, err := p.Read(b[:])
	if n > 0 {
		return fmt.Errorf("client sent %q after its request", b[:n])
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return nil // reset by the client
	}
	return err
}

// hexs frames s as the server does.
func hexs(s string) string { return fmt.Sprintf("%04x%s", len(s), s) }

// steps chains script parts.
func steps(parts ...func(p *peer) error) script {
	return func(p *peer) error {
		for _, f := range parts {
			if err := f(p); err != nil {
				return err
			}
		}
		return nil
	}
}

func expect(req string) func(*peer) error { return func(p *peer) error { return p.expect(req) } }
func send(s string) func(*peer) error     { return func(p *peer) error { return p.write(s) } }
func waitClose(p *peer) error             { return p.waitClose() }
