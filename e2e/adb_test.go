package e2e

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/adbtest"
)

// adbServer is an adb server started on a given port, as after a restart
// of an adbtest.Server on the same port; adbtest picks a fresh port for
// every server it starts.
type adbServer struct {
	*proc
	port int
	home string
}

func (s *adbServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// killADB kills an adbtest server by its pid and waits until its port
// refuses connections.
func killADB(t testing.TB, srv *adbtest.Server) {
	t.Helper()
	if err := syscall.Kill(srv.PID(), syscall.SIGKILL); err != nil {
		t.Fatalf("killing the adb server (pid %d): %v", srv.PID(), err)
	}
	waitFor(t, 10*time.Second, "adb server port closed", func() (bool, string) {
		c, err := net.DialTimeout("tcp", srv.Addr(), 200*time.Millisecond)
		if err != nil {
			return true, ""
		}
		c.Close()
		return false, "still accepting"
	})
}

// startADBOnPort starts `adb -P port nodaemon server` with HOME home and
// waits until it answers host:version. It is killed by its pid when t
// ends.
func startADBOnPort(t testing.TB, port int, home string) *adbServer {
	t.Helper()
	bin := adbtest.Binary(t)
	s := &adbServer{port: port, home: home}
	s.proc = startProc(t, "adb server", home, adbtest.Env(home, port), bin, "-P", strconv.Itoa(port), "nodaemon", "server")
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("restarted adb server log (tail):\n%s", s.tail(40))
		}
	})
	waitFor(t, 15*time.Second, "restarted adb server answering", func() (bool, string) {
		if s.exited() {
			t.Fatalf("adb server on port %d exited at start (%v); log:\n%s", port, s.state(), s.tail(40))
		}
		_, err := s.request("host:version")
		return err == nil, fmt.Sprint(err)
	})
	return s
}

// request sends one host request and returns the hex-prefixed answer
// that follows OKAY.
func (s *adbServer) request(req string) (string, error) {
	c, err := net.DialTimeout("tcp", s.addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := adbtest.Request(c, req); err != nil {
		return "", err
	}
	return adbtest.ReadHex4(c)
}

// devices lists the devices the server knows, by serial.
func (s *adbServer) devices(t testing.TB) map[string]string {
	t.Helper()
	out, err := s.request("host:devices")
	if err != nil {
		t.Fatalf("host:devices: %v", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if serial, state, ok := strings.Cut(line, "\t"); ok {
			m[serial] = state
		}
	}
	return m
}

// connect attaches a device served on addr (host:connect, as `adb
// connect` does) and waits until the server lists it online.
func (s *adbServer) connect(t testing.TB, addr string) {
	t.Helper()
	waitFor(t, 15*time.Second, "adb connect "+addr, func() (bool, string) {
		out, err := s.request("host:connect:" + addr)
		return err == nil && strings.Contains(out, "connected to"), fmt.Sprintf("%q %v", out, err)
	})
	waitFor(t, 15*time.Second, addr+" online", func() (bool, string) {
		st := s.devices(t)[addr]
		return st == "device", fmt.Sprintf("state %q", st)
	})
}
