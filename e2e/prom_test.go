package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/realtest"
)

// tool returns the path of a program of the Debian package pkg, or skips
// the test (fails it when CI is set) if it is not installed.
func tool(t testing.TB, name, pkg string) string { return realtest.Program(t, name, pkg) }

// promServer is a Prometheus server owned by a test, scraping one target
// every second.
type promServer struct {
	*proc
	addr string
}

const promJob = "alloctrack"

// startPrometheus starts Prometheus on a free loopback port with a
// generated configuration that scrapes target's /metrics every second and
// evaluates the given rule files every second, and waits until it is
// ready. It is stopped by its pid when the test ends.
func startPrometheus(t *testing.T, target string, ruleFiles ...string) *promServer {
	t.Helper()
	bin := tool(t, "prometheus", "prometheus")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: %s
scrape_configs:
  - job_name: %s
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, quoteList(ruleFiles), promJob, target)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(adbtest.FreePort(t)))
	p := &promServer{addr: addr}
	p.proc = startProc(t, "prometheus", dir, nil, bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	t.Cleanup(func() {
		if _, killed := p.stop(10 * time.Second); killed {
			t.Errorf("prometheus still running 10 s after SIGTERM; killed")
		}
		if t.Failed() {
			t.Logf("prometheus log (tail):\n%s", p.tail(40))
		}
	})
	waitFor(t, 30*time.Second, "prometheus ready", func() (bool, string) {
		if p.exited() {
			t.Fatalf("prometheus exited at start (%v); log:\n%s", p.state(), p.tail(40))
		}
		code, body, err := httpGet("http://" + addr + "/-/ready")
		return code == 200, fmt.Sprintf("%d %q %v", code, body, err)
	})
	return p
}

// quoteList writes a YAML flow list of quoted strings.
func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// promSample is one element of an instant vector.
type promSample struct {
	Metric map[string]string
	Time   float64 // evaluation time, Unix seconds
	Value  float64
}

// query evaluates an instant query now, through the HTTP API.
func (p *promServer) query(t testing.TB, q string) []promSample {
	t.Helper()
	return p.queryAt(t, q, 0)
}

// queryAt evaluates an instant query at a time in Unix seconds (0: now).
// Pinned to the time of a successful scrape, the answer does not depend
// on later scrapes (one that times out marks every series stale).
func (p *promServer) queryAt(t testing.TB, q string, at float64) []promSample {
	t.Helper()
	v := url.Values{"query": {q}}
	if at > 0 {
		v.Set("time", strconv.FormatFloat(at, 'f', 3, 64))
	}
	code, body, err := httpGet("http://" + p.addr + "/api/v1/query?" + v.Encode())
	if err != nil {
		t.Fatalf("prometheus query %q: %v", q, err)
	}
	var resp struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("prometheus query %q: HTTP %d, %v: %.200s", q, code, err, body)
	}
	if resp.Status != "success" {
		t.Fatalf("prometheus query %q: %s: %s", q, resp.ErrorType, resp.Error)
	}
	if resp.Data.ResultType != "vector" {
		t.Fatalf("prometheus query %q: result type %q, want vector", q, resp.Data.ResultType)
	}
	out := make([]promSample, 0, len(resp.Data.Result))
	for _, r := range resp.Data.Result {
		ts, ok := r.Value[0].(float64)
		vs, ok2 := r.Value[1].(string)
		if !ok || !ok2 {
			t.Fatalf("prometheus query %q: bad sample %v", q, r.Value)
		}
		v, err := strconv.ParseFloat(vs, 64)
		if err != nil {
			t.Fatalf("prometheus query %q: value %q: %v", q, vs, err)
		}
		out = append(out, promSample{Metric: r.Metric, Time: ts, Value: v})
	}
	return out
}

// byLabels indexes a vector by the values of the given labels, joined
// with "/".
func byLabels(v []promSample, labels ...string) map[string]float64 {
	m := map[string]float64{}
	for _, s := range v {
		k := ""
		for i, l := range labels {
			if i > 0 {
				k += "/"
			}
			k += s.Metric[l]
		}
		m[k] += s.Value
	}
	return m
}

// scrapedAfter waits until Prometheus has scraped the daemon successfully
// with a scrape that started after when, and returns that scrape's time in
// Unix seconds, for queryAt.
func (p *promServer) scrapedAfter(t testing.TB, when time.Time) float64 {
	t.Helper()
	after := float64(when.UnixMilli()) / 1000
	up := fmt.Sprintf(`up{job=%q}`, promJob)
	var at float64
	waitFor(t, 20*time.Second, "a successful Prometheus scrape after "+when.Format(time.TimeOnly), func() (bool, string) {
		v := p.query(t, "timestamp("+up+")")
		if len(v) != 1 {
			return false, fmt.Sprintf("%d series", len(v))
		}
		if v[0].Value <= after {
			return false, fmt.Sprintf("last scrape at %.3f", v[0].Value)
		}
		u := p.queryAt(t, up, v[0].Value)
		at = v[0].Value
		return len(u) == 1 && u[0].Value == 1, fmt.Sprintf("up %v at %.3f", u, at)
	})
	return at
}
