package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// controlURL is the simulator control API's address serve printed.
func controlURL(t *testing.T, errOut *lockedBuffer) string {
	t.Helper()
	m := regexp.MustCompile(`simulator control API at (http://[^ ]+/)devices`).FindStringSubmatch(errOut.String())
	if m == nil {
		t.Fatalf("serve did not print the control API's address:\n%s", errOut.String())
	}
	return m[1]
}

// httpDo sends one request, with the header every change needs when
// header is set, and returns the status and body.
func httpDo(t *testing.T, method, u, body string, header bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/plain")
	if header {
		req.Header.Set("X-Alloctrack-Request", "test")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// farmState is what the control API's changes would alter: each app's
// pid, package, life and faults.
func farmState(t *testing.T, u string) string {
	t.Helper()
	code, body := httpDo(t, "GET", u, "", false)
	var devs []sim.DeviceView
	if err := json.Unmarshal([]byte(body), &devs); code != 200 || err != nil {
		t.Fatalf("GET %s: %d %v %.200s", u, code, err, body)
	}
	var b strings.Builder
	for _, d := range devs {
		for _, a := range d.Apps {
			j, _ := json.Marshal(a.Faults)
			b.WriteString(d.Serial + " " + strconv.Itoa(a.PID) + " " + a.Package + " " + strconv.FormatBool(a.Alive) + " " + string(j) + "\n")
		}
	}
	return b.String()
}

// serve --simulate takes changes of the simulated farm only on its
// control address, on loopback (printed at start), and only with the
// header pages of other sites cannot send; the web port shows the farm
// read-only.
func TestServeSimControlOnLoopbackOnly(t *testing.T) {
	base, stop, errOut := startServe(t, "--simulate", "--simulate.devices", "1", "--simulate.apps", "1", "--window", "1s")
	defer stop()
	defer http.DefaultClient.CloseIdleConnections()
	ctl := controlURL(t, errOut)
	if u, err := url.Parse(ctl); err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("control API at %s, not on loopback", ctl)
	}
	before := farmState(t, base+"sim/devices")
	pid := strings.Fields(before)[1]
	routes := []struct{ method, path, body string }{
		{"POST", "devices/sim-1/apps", `{"package":"com.evil"}`},
		{"DELETE", "devices/sim-1/apps/" + pid, ""},
		{"POST", "devices/sim-1/apps/" + pid + "/restart", ""},
		{"PUT", "devices/sim-1/apps/" + pid + "/faults", `{"hang_real":-1}`},
		{"POST", "devices/sim-1/disconnect", ""},
		{"POST", "devices/sim-1/reconnect", ""},
	}
	for _, r := range routes {
		for _, header := range []bool{false, true} {
			if code, body := httpDo(t, r.method, base+"sim/"+r.path, r.body, header); code != http.StatusForbidden {
				t.Errorf("web port: %s /sim/%s (header %v): %d %s", r.method, r.path, header, code, body)
			}
		}
		if code, body := httpDo(t, r.method, ctl+r.path, r.body, false); code != http.StatusForbidden {
			t.Errorf("control address without the header: %s %s: %d %s", r.method, r.path, code, body)
		}
	}
	if after := farmState(t, base+"sim/devices"); after != before {
		t.Fatalf("refused requests changed the farm:\n%s\nbecame\n%s", before, after)
	}
	if code, body := httpDo(t, "POST", ctl+"devices/sim-1/apps", `{"package":"com.added"}`, true); code != http.StatusCreated {
		t.Fatalf("control address: POST an app: %d %s", code, body)
	}
	if code, body := httpDo(t, "PUT", ctl+"devices/sim-1/apps/"+pid+"/faults", `{"hang_real":1}`, true); code != http.StatusOK {
		t.Fatalf("control address: PUT faults: %d %s", code, body)
	}
	if after := farmState(t, base+"sim/devices"); !strings.Contains(after, "com.added") || !strings.Contains(after, `"hang_real":1`) {
		t.Errorf("the control address's changes are not in the farm:\n%s", after)
	}
}

// closedBy reads c until the server closes it, and fails unless it does
// by deadline; it returns what was read.
func closedBy(t *testing.T, c net.Conn, deadline time.Time, what string) string {
	t.Helper()
	c.SetReadDeadline(deadline)
	b, err := io.ReadAll(c)
	if err != nil {
		t.Errorf("%s: not closed by the server: %v (read %q)", what, err, b)
	}
	return string(b)
}

func dial(t *testing.T, u, send string) net.Conn {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, send); err != nil {
		t.Fatal(err)
	}
	return c
}

// serve closes connections that hold it without progress: one that sends
// nothing, or half its headers, one kept alive idle after a request, and
// one whose request body stalls (on the web port and the control address).
func TestServeCutsIdleAndSlowConnections(t *testing.T) {
	base, stop, errOut := startServe(t, "--simulate", "--simulate.devices", "1", "--simulate.apps", "0",
		"--web.read-header-timeout", "1s", "--web.read-timeout", "1s", "--web.idle-timeout", "1s")
	defer stop()
	ctl := controlURL(t, errOut)
	// The server's bounds are long enough for a loaded machine to send a
	// whole request at once (the idle connection's GET must be answered),
	// and far shorter than the test's.
	const bound = 30 * time.Second
	body := "POST /devices/sim-1/apps HTTP/1.1\r\nHost: x\r\nX-Alloctrack-Request: 1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pack"
	conns := map[string]net.Conn{
		"silent":            dial(t, base, ""),
		"half headers":      dial(t, base, "GET /metrics HTTP/1.1\r\nHost: x\r\n"),
		"idle after a GET":  dial(t, base, "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"),
		"stalled body":      dial(t, ctl, body),
		"stalled body, web": dial(t, base, strings.Replace(body, "/devices", "/api/v1/apps/sim-1/com.x/heapdump", 1)),
	}
	deadline := time.Now().Add(bound)
	for what, c := range conns {
		got := closedBy(t, c, deadline, what)
		if what == "idle after a GET" && !strings.Contains(got, "Healthy") {
			t.Errorf("%s: no answer before the close: %q", what, got)
		}
	}
}

// Over --web.max-connections, a new connection waits until one of those
// served closes.
func TestServeBoundsConnections(t *testing.T) {
	base, stop, _ := startServe(t, "--simulate", "--simulate.devices", "1", "--simulate.apps", "0", "--web.max-connections", "2")
	defer stop()
	var held []net.Conn
	for range 2 {
		c := dial(t, base, "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
		// Served, so accepted; kept alive, so still held.
		if res, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("a connection within the bound: %v", err)
		}
		held = append(held, c)
	}
	third := dial(t, base, "GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	// Nothing can say "not served yet" but time: a connection over the
	// bound gets no answer while the others are held.
	third.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	r := bufio.NewReader(third)
	if _, err := r.Peek(1); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection over the bound was served at once (%v)", err)
	}
	held[0].Close()
	third.SetReadDeadline(time.Now().Add(30 * time.Second))
	if res, err := http.ReadResponse(r, nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("the waiting connection was not served once one closed: %v", err)
	}
}

// statPPID is the parent pid of process pid, and whether it still runs
// (a zombie does not).
func statPPID(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid, f[0] != "Z"
}

// metricSum adds the samples of one metric family on u's /metrics.
func metricSum(u, name string) (float64, error) {
	res, err := http.Get(u + "metrics")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	sum := 0.0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+"{") {
			v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			sum += v
		}
	}
	return sum, nil
}

// A daemon started in the background by a shell that then exits (`nohup
// … &` in a script) was not started by go run: it serves on after its
// parent is gone, window after window, and claims no signal nobody sent.
func TestServeOutlivesAShellParent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc to see the daemon's parent in")
	}
	bin := buildAlloctrack(t)
	logPath := filepath.Join(t.TempDir(), "serve.log")
	// The shell starts the daemon, says its pid, and exits when its
	// standard input closes: after the daemon is up, as a script that
	// goes on to other things would.
	sh := exec.Command("sh", "-c", `"$0" serve --simulate --simulate.devices 1 --simulate.apps 1 --window 1s --web.listen-address 127.0.0.1:0 >"$1" 2>&1 </dev/null & echo $!; read x; exit 0`, bin, logPath)
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		stdin.Close()
		sh.Wait()
		t.Fatalf("sh printed %q, not the daemon's pid: %v", line, err)
	}
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGINT)
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if _, alive := statPPID(pid); !alive {
				return
			}
		}
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the daemon (pid %d) did not stop on SIGINT", pid)
	})
	logText := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	var base string
	for end := time.Now().Add(60 * time.Second); base == "" && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if m := regexp.MustCompile(`web view at (http://127\.0\.0\.1:\d+/)`).FindStringSubmatch(logText()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		stdin.Close()
		sh.Wait()
		t.Fatalf("no web view address:\n%s", logText())
	}
	stdin.Close()
	if err := sh.Wait(); err != nil {
		t.Fatalf("sh: %v", err)
	}
	if ppid, alive := statPPID(pid); !alive || ppid == sh.Process.Pid {
		t.Fatalf("the daemon (pid %d) runs %v with parent %d, the exited shell %d:\n%s", pid, alive, ppid, sh.Process.Pid, logText())
	}
	defer http.DefaultClient.CloseIdleConnections()
	// Its parent is gone: three more windows counted (seconds, where the
	// old watch stopped it within one) say it serves on.
	first := -1.0
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n, err := metricSum(base, "alloctrack_windows_total")
		if err != nil {
			t.Fatalf("the daemon stopped serving after its parent exited: %v\n%s", err, logText())
		}
		if first < 0 && n > 0 {
			first = n
		}
		if first > 0 && n >= first+3 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("windows counted: %v then %v in 90 s:\n%s", first, n, logText())
		}
	}
	if l := logText(); strings.Contains(strings.ToLower(l), "signal") || strings.Contains(l, "go run") {
		t.Errorf("the daemon's log speaks of a signal or go run:\n%s", l)
	}
}
