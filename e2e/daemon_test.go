package e2e

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/adbtest"
)

// The daemon's timings in every test: 1 s windows, so that the tests count
// windows quickly, and short timeouts, so that faults show soon.
const (
	window         = time.Second
	requestTimeout = time.Second
	reportTimeout  = 3 * time.Second
)

// daemon is `alloctrack serve` running as a child process.
type daemon struct {
	*proc
	addr     string // its web listen address
	mono     monotonic
	stopping bool // shutdown was called
}

// startDaemon starts the daemon against an adb server and waits until it
// is ready (the server has answered). SIGTERM stops it when the test ends,
// and the test fails unless it then exits 0.
func startDaemon(t *testing.T, adbAddr string, extra ...string) *daemon {
	t.Helper()
	port := adbtest.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{"serve",
		"--adb.address", adbAddr,
		"--web.listen-address", addr,
		"--window", window.String(),
		"--window.min", "250ms",
		"--request.timeout", requestTimeout.String(),
		"--report.timeout", reportTimeout.String(),
		"--log.level", "debug",
	}, extra...)
	d := &daemon{proc: startProc(t, "alloctrack serve", t.TempDir(), nil, binary, args...), addr: addr}
	t.Cleanup(func() {
		d.shutdown(t)
		if t.Failed() {
			t.Logf("alloctrack serve %s log (tail):\n%s", strings.Join(args, " "), d.tail(300))
		}
	})
	waitFor(t, 20*time.Second, "daemon ready", func() (bool, string) {
		if d.exited() {
			t.Fatalf("daemon exited at start (%v); log:\n%s", d.state(), d.tail(100))
		}
		code, body, err := httpGet("http://" + addr + "/-/ready")
		return code == 200, fmt.Sprintf("%d %q %v", code, body, err)
	})
	return d
}

// shutdown sends SIGTERM and checks that the daemon exits 0 within its
// shutdown timeout (10 s) and a margin, and reported no data race. It
// returns the exit code; later calls only return it.
func (d *daemon) shutdown(t testing.TB) int {
	t.Helper()
	if d.stopping {
		return d.state().ExitCode()
	}
	d.stopping = true
	if d.exited() {
		t.Errorf("daemon exited before it was stopped: %v", d.state())
		return d.state().ExitCode()
	}
	start := time.Now()
	st, killed := d.stop(15 * time.Second)
	if killed {
		t.Errorf("daemon still running 15 s after SIGTERM; killed")
	} else if st.ExitCode() != 0 {
		t.Errorf("daemon exited with %v after SIGTERM, want status 0", st)
	} else {
		t.Logf("daemon exited 0, %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	}
	if strings.Contains(d.out.String(), "WARNING: DATA RACE") {
		t.Errorf("the daemon reported a data race; log:\n%s", d.tail(300))
	}
	return st.ExitCode()
}

// metrics fetches and parses /metrics, failing the test if the daemon has
// exited, and checks that no counter went down since the last fetch.
func (d *daemon) metrics(t testing.TB) scrape {
	t.Helper()
	if d.exited() {
		t.Fatalf("daemon exited unexpectedly (%v)", d.state())
	}
	text := d.metricsText(t)
	sc, err := parseMetrics(text)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	d.mono.observe(t, sc)
	return sc
}

// metricsText fetches /metrics as text.
func (d *daemon) metricsText(t testing.TB) string {
	t.Helper()
	code, body, err := httpGet("http://" + d.addr + "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	return string(body)
}

// app names one app's series: its serial as adb names the device, and
// its package.
type app struct{ serial, pkg string }

func (a app) String() string { return a.serial + "/" + a.pkg }

func (a app) labels(pairs ...string) []string {
	return append([]string{"serial", a.serial, "package", a.pkg}, pairs...)
}

// windows returns each app's alloctrack_windows_total.
func (d *daemon) windows(t testing.TB, apps []app) map[app]float64 {
	t.Helper()
	sc := d.metrics(t)
	m := map[app]float64{}
	for _, a := range apps {
		m[a] = sc.value("alloctrack_windows_total", a.labels()...)
	}
	return m
}

// waitWindows waits until every app has counted n more windows than now,
// and returns how long that took.
func (d *daemon) waitWindows(t testing.TB, apps []app, n int, timeout time.Duration) time.Duration {
	t.Helper()
	base := d.windows(t, apps)
	return waitFor(t, timeout, fmt.Sprintf("%d more windows of %v", n, apps), func() (bool, string) {
		now := d.windows(t, apps)
		for _, a := range apps {
			if now[a] < base[a]+float64(n) {
				return false, fmt.Sprintf("%v: %v windows, from %v", a, now[a], base[a])
			}
		}
		return true, ""
	})
}

// waitState waits until every app is in state (alloctrack_app_state).
func (d *daemon) waitState(t testing.TB, apps []app, state string, timeout time.Duration) time.Duration {
	t.Helper()
	return waitFor(t, timeout, fmt.Sprintf("apps %v in state %s", apps, state), func() (bool, string) {
		sc := d.metrics(t)
		for _, a := range apps {
			if sc.value("alloctrack_app_state", a.labels("state", state)...) != 1 {
				return false, fmt.Sprintf("%v not %s", a, state)
			}
		}
		return true, ""
	})
}

// goroutines is the daemon's go_goroutines, the least of five samples
// 100 ms apart, so that requests in flight (scrapes among them) do not
// count.
func (d *daemon) goroutines(t testing.TB) float64 {
	t.Helper()
	g := d.metrics(t).value("go_goroutines")
	for range 4 {
		time.Sleep(100 * time.Millisecond)
		g = min(g, d.metrics(t).value("go_goroutines"))
	}
	return g
}
