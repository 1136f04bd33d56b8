package exporter_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/alloctrack/alloctrack/exporter"
)

func newHandler(t *testing.T, cfg exporter.HandlerConfig) http.Handler {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.NewCollector(fixedSource{fixture()}))
	h, err := exporter.NewHandler(reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func get(t *testing.T, h http.Handler, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func TestHandlerMetrics(t *testing.T) {
	h := newHandler(t, exporter.HandlerConfig{Version: "1.2.3"})
	res, body := get(t, h, "/metrics")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", res.Status)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("/metrics content type %q, want text/plain", ct)
	}
	for _, want := range []string{
		`alloctrack_allocations_total{class="java.lang.String",package="com.example.a",serial="emulator-5554"} 40`,
		`alloctrack_site_allocations_total{package="com.example.a",serial="emulator-5554",site="other"} 40`,
		`alloctrack_app_state{package="com.example.b",serial="usb-2",state="unsupported"} 1`,
		`alloctrack_report_round_trip_seconds_count{package="com.example.a",serial="emulator-5554"} 4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// OpenMetrics on request.
	res, body = get(t, h, "/metrics", "Accept", "application/openmetrics-text; version=1.0.0")
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("/metrics with an OpenMetrics Accept: content type %q", ct)
	}
	if !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("OpenMetrics body does not end with # EOF")
	}
}

func TestHandlerHealthyAndReady(t *testing.T) {
	ready := false
	h := newHandler(t, exporter.HandlerConfig{Ready: func() bool { return ready }})
	if res, body := get(t, h, "/-/healthy"); res.StatusCode != http.StatusOK || !strings.Contains(body, "Healthy") {
		t.Errorf("/-/healthy: %s %q", res.Status, body)
	}
	if res, _ := get(t, h, "/-/ready"); res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/-/ready while not ready: %s, want 503", res.Status)
	}
	ready = true
	if res, body := get(t, h, "/-/ready"); res.StatusCode != http.StatusOK || !strings.Contains(body, "Ready") {
		t.Errorf("/-/ready when ready: %s %q", res.Status, body)
	}
	// No Ready function: always ready.
	h = newHandler(t, exporter.HandlerConfig{})
	if res, _ := get(t, h, "/-/ready"); res.StatusCode != http.StatusOK {
		t.Errorf("/-/ready without a Ready func: %s, want 200", res.Status)
	}
}

func TestHandlerLandingPageAndExtra(t *testing.T) {
	extra := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "extra route") })
	h := newHandler(t, exporter.HandlerConfig{
		Version:    "v9.8.7",
		Extra:      map[string]http.Handler{"/sim/": extra},
		ExtraLinks: []web.LandingLinks{{Address: "sim/devices", Text: "Simulated devices"}},
	})
	res, body := get(t, h, "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/: %s", res.Status)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("/ content type %q", ct)
	}
	for _, want := range []string{`href="/metrics"`, "alloctrack", "v9.8.7", `href="/-/healthy"`, `href="/sim/devices"`, "Simulated devices"} {
		if !strings.Contains(body, want) {
			t.Errorf("landing page lacks %s", want)
		}
	}
	if res, body := get(t, h, "/sim/devices"); res.StatusCode != http.StatusOK || body != "extra route" {
		t.Errorf("extra route: %s %q", res.Status, body)
	}
	if res, _ := get(t, h, "/no/such/page"); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown path: %s, want 404", res.Status)
	}

	// Every link on the landing page must lead somewhere.
	var dead []string
	for _, m := range regexp.MustCompile(`href="(/[^"#]*)"`).FindAllStringSubmatch(body, -1) {
		path, _, _ := strings.Cut(m[1], "?")
		if res, _ := get(t, h, path); res.StatusCode == http.StatusNotFound {
			dead = append(dead, m[1])
		}
	}
	if len(dead) > 0 {
		t.Fatalf("regression: landing page links to paths the handler does not serve: %q "+
			"(exporter/handler.go NewHandler leaves web.LandingConfig.Profiling empty, which exporter-toolkit treats as \"true\")", dead)
	}
}

// With Root set, / and every path the handler does not serve itself go to
// Root (the web view) instead of the landing page; /metrics stays.
func TestHandlerRoot(t *testing.T) {
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "view "+r.URL.Path) })
	h := newHandler(t, exporter.HandlerConfig{Version: "1.2.3", Root: root})
	for path, want := range map[string]string{"/": "view /", "/apps/s/p": "view /apps/s/p", "/-/healthy": "Healthy"} {
		if res, body := get(t, h, path); res.StatusCode != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %s %q, want %q", path, res.Status, body, want)
		}
	}
	if _, body := get(t, h, "/metrics"); !strings.Contains(body, "alloctrack_app_state") {
		t.Errorf("/metrics is not served by the exporter with Root set")
	}
}

// Every request that may change something, on any route (the web view's,
// extra ones, unknown paths), is refused without the header a page of
// another site cannot send, before its handler sees it; with the header,
// and for GET, it reaches the handler.
func TestHandlerRefusesCrossSiteWrites(t *testing.T) {
	reached := map[string]bool{}
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached[r.Method+" "+r.URL.Path] = true })
	h := newHandler(t, exporter.HandlerConfig{Root: record, Extra: map[string]http.Handler{"/sim/": record}})
	for _, c := range []struct {
		method, path string
		header, pass bool
	}{
		{"POST", "/api/v1/apps/s/p/heapdump", false, false},
		{"POST", "/sim/devices/sim-1/apps", false, false},
		{"DELETE", "/sim/devices/sim-1/apps/1", false, false},
		{"PUT", "/sim/devices/sim-1/apps/1/faults", false, false},
		{"POST", "/anything", false, false},
		{"POST", "/sim/devices/sim-1/disconnect", true, true},
		{"GET", "/sim/devices", false, true},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(`{"package":"x"}`))
		req.Header.Set("Content-Type", "text/plain")
		if c.header {
			req.Header.Set("X-Alloctrack-Request", "1")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		got := reached[c.method+" "+c.path]
		if got != c.pass || !c.pass && rec.Code != http.StatusForbidden {
			t.Errorf("%s %s (header %v): %d, handler reached %v", c.method, c.path, c.header, rec.Code, got)
		}
	}
}
