// Package adbtest starts a private, real adb server for tests, in the manner
// of net/http/httptest: each Server is a foreground `adb -P <port> nodaemon
// server` child process on a free loopback port, with its own HOME, owned by
// the test that started it and killed by pid when the test ends
// (docs/protocol.md at the repository root, section 3).
//
// Tests that need it skip when adb is not installed (Debian package adb),
// and fail instead when the environment variable CI is set.
package adbtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/realtest"

	"github.com/alloctrack/alloctrack/internal/testwait"
)

// Timeouts for the server's start and for each adb command.
const (
	startTimeout   = testwait.Bound
	commandTimeout = testwait.Bound
	connectTimeout = testwait.Bound
)

// Server is a running adb server owned by a test.
type Server struct {
	bin  string
	port int
	home string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited

	mu  sync.Mutex
	log bytes.Buffer // the server's stdout and stderr
}

// Binary returns the path of the adb program, or skips the test (fails it
// when CI is set) if there is none.
func Binary(t testing.TB) string {
	t.Helper()
	return realtest.Program(t, "adb", "adb")
}

// FreePort returns a free TCP port on 127.0.0.1, never 5037 (the default
// adb server port) nor 5555–5585 (the range the adb server probes for
// emulators). Another process can take it before the caller does.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("adbtest: finding a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port == 5037 || (port >= 5555 && port <= 5585) {
			continue
		}
		return port
	}
	t.Fatal("adbtest: no free port outside 5037 and 5555-5585")
	return 0
}

// StartServer starts `adb -P <port> nodaemon server` on a free port with a
// fresh HOME and waits until it answers host:version. The process is
// killed, by its pid, when the test ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{bin: Binary(t), home: t.TempDir(), done: make(chan struct{})}
	s.port = FreePort(t)
	s.cmd = exec.Command(s.bin, "-P", strconv.Itoa(s.port), "nodaemon", "server")
	s.cmd.Env = s.env()
	s.cmd.Dir = s.home
	s.cmd.Stdout = (*logWriter)(s)
	s.cmd.Stderr = (*logWriter)(s)
	s.cmd.WaitDelay = 2 * time.Second // output pipes of anything it forked
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("adbtest: starting %s: %v", s.bin, err)
	}
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
		// A server that died early could have been restarted as a
		// daemon by an adb client; ask anything left on the port to go.
		if c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err == nil {
			io.WriteString(c, hostRequest("host:kill"))
			c.Close()
		}
		if t.Failed() {
			t.Logf("adb server log (port %d):\n%s", s.port, s.Log())
		}
	})

	deadline := time.Now().Add(startTimeout)
	for {
		_, err := s.version()
		if err == nil {
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("adbtest: adb server exited at start (%v); log:\n%s", s.cmd.ProcessState, s.Log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("adbtest: adb server on port %d not answering after %v: %v; log:\n%s", s.port, startTimeout, err, s.Log())
		}
	}
}

type logWriter Server

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.Write(p)
}

// Log returns what the server has written so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// env is the environment of the server and of every adb command.
func (s *Server) env() []string { return Env(s.home, s.port) }

// Env is the environment for an adb server (and adb commands) of a test: a
// private HOME and TMPDIR, the given port, and nothing that points adb at
// another server or device.
func Env(home string, port int) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "ANDROID_ADB_SERVER_PORT", "ADB_SERVER_SOCKET", "ANDROID_SERIAL",
			"ANDROID_SDK_HOME", "ANDROID_USER_HOME", "ADB_VENDOR_KEYS", "ADB_TRACE", "TMPDIR":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "TMPDIR="+home, "ANDROID_ADB_SERVER_PORT="+strconv.Itoa(port))
}

// Port is the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// Addr is the server's address, "127.0.0.1:<port>".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Home is the HOME directory the server and its commands use.
func (s *Server) Home() string { return s.home }

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

func hostRequest(req string) string { return fmt.Sprintf("%04x%s", len(req), req) }

// version asks host:version directly over the host protocol.
func (s *Server) version() (int, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, hostRequest("host:version")); err != nil {
		return 0, err
	}
	var b [12]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	if string(b[:4]) != "OKAY" {
		return 0, fmt.Errorf("adbtest: host:version: %q", b[:])
	}
	v, err := strconv.ParseUint(string(b[8:12]), 16, 16)
	return int(v), err
}

// Run runs `adb -P <port> args...` against the server, with its HOME and a
// timeout, and returns the command's standard output. A failed command's
// error carries its standard error text and wraps *exec.ExitError, whose
// ExitCode is the remote exit status for `adb shell` on shell_v2 devices.
// Run refuses to start adb once the server has exited, since adb would
// then start a daemon server of its own.
func (s *Server) Run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	select {
	case <-s.done:
		return "", fmt.Errorf("adbtest: adb server on port %d has exited", s.port)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"-P", strconv.Itoa(s.port)}, args...)...)
	cmd.Env = s.env()
	cmd.Dir = s.home
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return stdout.String(), fmt.Errorf("adbtest: adb %s: timed out after %v: %w", strings.Join(args, " "), commandTimeout, err)
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("adbtest: adb %s: %w (stderr %q)", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Devices returns the state of every device the server lists
// (`adb devices`), by serial.
func (s *Server) Devices(t testing.TB) (map[string]string, error) {
	t.Helper()
	out, err := s.Run(t, "devices")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		serial, state, ok := strings.Cut(sc.Text(), "\t")
		if ok {
			m[serial] = strings.TrimSpace(state)
		}
	}
	return m, nil
}

// WaitState waits until the device with serial is in state ("device",
// "offline"; "" means not listed) and fails the test after timeout.
func (s *Server) WaitState(t testing.TB, serial, state string, timeout time.Duration) {
	t.Helper()
	timeout = testwait.AtLeast(timeout)
	deadline := time.Now().Add(timeout)
	last := "?"
	for {
		m, err := s.Devices(t)
		if err != nil {
			t.Fatal(err)
		}
		if last = m[serial]; last == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("adbtest: device %s is %q after %v, want %q", serial, last, timeout, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Connect runs `adb connect addr` and waits until `adb devices` lists addr
// as "device". It retries the connect while the server reports a failure.
func (s *Server) Connect(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(connectTimeout)
	var out string
	var err error
	for {
		out, err = s.Run(t, "connect", addr)
		if err == nil && strings.Contains(out, "connected to") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("adbtest: adb connect %s: %q %v", addr, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.WaitState(t, addr, "device", time.Until(deadline)+time.Second)
}

// Dial opens a host-protocol connection to the server; it is closed when
// the test ends.
func (s *Server) Dial(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr(), 2*time.Second)
	if err != nil {
		t.Fatalf("adbtest: dialing the adb server: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// FailError is the server's FAIL answer to a request.
type FailError struct {
	Request string
	Reason  string
}

func (e *FailError) Error() string {
	return fmt.Sprintf("adbtest: %s: FAIL %q", e.Request, e.Reason)
}

// Request sends one host-protocol request on c (4 hex digits of length,
// then req) and reads the answer: nil for OKAY, *FailError for FAIL.
func Request(c io.ReadWriter, req string) error {
	if _, err := io.WriteString(c, hostRequest(req)); err != nil {
		return fmt.Errorf("adbtest: %s: %w", req, err)
	}
	var st [4]byte
	if _, err := io.ReadFull(c, st[:]); err != nil {
		return fmt.Errorf("adbtest: %s: reading the answer: %w", req, err)
	}
	switch string(st[:]) {
	case "OKAY":
		return nil
	case "FAIL":
		reason, err := ReadHex4(c)
		if err != nil {
			return fmt.Errorf("adbtest: %s: reading the FAIL reason: %w", req, err)
		}
		return &FailError{Request: req, Reason: reason}
	}
	return fmt.Errorf("adbtest: %s: answer %q is neither OKAY nor FAIL", req, st[:])
}

// ReadHex4 reads one message framed as 4 hex digits of length and the
// payload, as host:devices and track-jdwp send them.
func ReadHex4(r io.Reader) (string, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", err
	}
	n, err := strconv.ParseUint(string(h[:]), 16, 16)
	if err != nil {
		return "", fmt.Errorf("adbtest: bad length prefix %q", h[:])
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("adbtest: reading %d bytes: %w", n, err)
	}
	return string(b), nil
}

// Start starts `adb -P <port> args...` without waiting for it, for commands
// that do not exit on their own (`adb jdwp`, `adb logcat`), and returns its
// standard output. The process is killed by its pid, and waited for, when
// the test ends; stop does the same sooner and may be called more than once.
func (s *Server) Start(t testing.TB, args ...string) (stdout io.Reader, stop func()) {
	t.Helper()
	select {
	case <-s.done:
		t.Fatalf("adbtest: adb server on port %d has exited", s.port)
	default:
	}
	cmd := exec.Command(s.bin, append([]string{"-P", strconv.Itoa(s.port)}, args...)...)
	cmd.Env = s.env()
	cmd.Dir = s.home
	cmd.WaitDelay = time.Second
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("adbtest: starting adb %s: %v", strings.Join(args, " "), err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	t.Cleanup(stop)
	return r, stop
}
