package web_test

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	toolkit "github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/exporter"
	"github.com/alloctrack/alloctrack/web"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource serves a fixed snapshot and recent counts.
type fakeSource struct {
	snap   alloctrack.Snapshot
	recent map[string]alloctrack.Recent
}

func (f fakeSource) Snapshot() alloctrack.Snapshot { return f.snap }

func (f fakeSource) Recent(serial, pkg string, n int) (alloctrack.Recent, bool) {
	r, ok := f.recent[serial+"/"+pkg]
	return r, ok
}

var (
	hostileClass = `<script>alert("class")</script>`
	hostileFrame = alloctrack.Frame{Class: `x.Y"'><img src=x onerror=alert(1)>`, Method: "m\xff\xfe", File: "<b>F.java</b>", Line: 3}
	hugeName     = strings.Repeat("A", 1<<20)
	hostilePkg   = `com.evil"><script>alert(1)</script>`
)

func fixture() fakeSource {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sites := []alloctrack.SiteCount{
		{SiteInfo: alloctrack.SiteInfo{ID: "0123456789ab", Class: "java.lang.String", Frame: "com.example.Main.run(Main.java:10)",
			Frames: []alloctrack.Frame{{Class: "com.example.Main", Method: "run", File: "Main.java", Line: 10}, {Class: "android.os.Looper", Method: "loop", File: "Looper.java", Line: 200}}},
			Count: alloctrack.Count{Allocations: 30, Bytes: 600}},
		{SiteInfo: alloctrack.SiteInfo{ID: "badbadbadbad", Class: hostileClass, Frame: "frame <script>", Frames: []alloctrack.Frame{hostileFrame}},
			Count: alloctrack.Count{Allocations: 5, Bytes: 5000}},
		{SiteInfo: alloctrack.SiteInfo{ID: "hugehugehuge", Class: hugeName, Frame: hugeName, Frames: []alloctrack.Frame{{Class: hugeName, Method: "m"}}},
			Count: alloctrack.Count{Allocations: 1, Bytes: 8}},
	}
	counts := alloctrack.AppCounts{
		Total:      alloctrack.Count{Allocations: 46, Bytes: 5708},
		Classes:    []alloctrack.ClassCount{{Class: "java.lang.String", Count: alloctrack.Count{Allocations: 30, Bytes: 600}}, {Class: hostileClass, Count: alloctrack.Count{Allocations: 5, Bytes: 5000}}, {Class: hugeName + "\xff", Count: alloctrack.Count{Allocations: 1, Bytes: 8}}},
		ClassOther: alloctrack.Count{Allocations: 10, Bytes: 100},
		Sites:      sites,
		SiteOther:  alloctrack.Count{Allocations: 10, Bytes: 100},
		Windows:    []alloctrack.WindowTotal{{Start: now.Add(-2 * time.Second), End: now, Count: alloctrack.Count{Allocations: 46, Bytes: 5708}}},
	}
	app := func(serial, pkg string) alloctrack.AppSnapshot {
		return alloctrack.AppSnapshot{AppStatus: alloctrack.AppStatus{Serial: serial, Package: pkg, PID: 42, State: alloctrack.StateTracking, Window: 2 * time.Second, Errors: map[string]uint64{"report": 1}}, Counts: counts}
	}
	recent := alloctrack.Recent{Windows: counts.Windows, Total: counts.Total, Classes: counts.Classes, ClassOther: counts.ClassOther, Sites: sites[:2], SiteOther: alloctrack.Count{Allocations: 11, Bytes: 108}}
	return fakeSource{
		snap: alloctrack.Snapshot{
			Servers: []alloctrack.ServerStatus{{Addr: "127.0.0.1:5037", Up: true}},
			Devices: []alloctrack.DeviceStatus{{Server: "127.0.0.1:5037", Serial: "emulator-5554", State: "device", API: 30, Model: "<i>Pixel</i>"}},
			Apps:    []alloctrack.AppSnapshot{app("emulator-5554", "com.example.a"), app("emulator-5554", hostilePkg)},
		},
		recent: map[string]alloctrack.Recent{"emulator-5554/com.example.a": recent, "emulator-5554/" + hostilePkg: recent},
	}
}

func newView(t *testing.T) http.Handler {
	t.Helper()
	// A fixed clock: two renders of one page are the same bytes.
	now := time.Now()
	h, err := web.New(fixture(), web.Config{Version: "test", Links: [][2]string{{"sim/devices", "Sim"}}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var hostilePkgPath = "/apps/emulator-5554/" + url.PathEscape(hostilePkg)

func TestStatusCodes(t *testing.T) {
	h := newView(t)
	for _, c := range []struct {
		path, ctype string
		code        int
		want        string
	}{
		{"/", "text/html", 200, `href="/apps/emulator-5554/com.example.a"`},
		{"/?fragment=1", "text/html", 200, `<table id="apps"`},
		{"/apps/emulator-5554/com.example.a", "text/html", 200, `href="/sites/0123456789ab"`},
		{"/apps/emulator-5554/com.example.a?sort=bytes&q=string", "text/html", 200, "java.lang.String"},
		{"/apps/emulator-5554/com.example.a/flame", "text/html", 200, `id="flame"`},
		{"/apps/emulator-5554/com.example.a/flame?by=count&n=5", "text/html", 200, `by=count&amp;n=5`},
		{"/sites/0123456789ab", "text/html", 200, "android.os.Looper.loop(Looper.java:200)"},
		{"/api/v1/apps", "application/json", 200, `"package":"com.example.a"`},
		{"/api/v1/apps/emulator-5554/com.example.a", "application/json", 200, `"site":"other"`},
		{"/api/v1/apps/emulator-5554/com.example.a/flame?by=count", "application/json", 200, `"n":"com.example.a","v":46`},
		{"/api/v1/sites/0123456789ab", "application/json", 200, `"stack":["com.example.Main.run(Main.java:10)","android.os.Looper.loop(Looper.java:200)"]`},
		{"/static/app.js", "text/javascript", 200, "use strict"},
		{"/static/style.css", "text/css", 200, "#flame"},
		{"/apps/nope/com.example.a", "text/plain", 404, `no device with serial "nope"`},
		{"/apps/emulator-5554/com.nope", "text/plain", 404, `no app "com.nope" on device "emulator-5554"`},
		{"/apps/emulator-5554/com.nope/flame", "text/plain", 404, `no app "com.nope"`},
		{"/api/v1/apps/emulator-5554/com.nope", "text/plain", 404, `no app "com.nope"`},
		{"/sites/ffffffffffff", "text/plain", 404, `no site "ffffffffffff"`},
		{"/api/v1/sites/%3Cscript%3E", "text/plain", 404, `no site "<script>"`},
		{"/apps/emulator-5554/com.example.a?n=-1", "text/plain", 400, "query parameter n"},
		{"/apps/emulator-5554/com.example.a/flame?by=heat", "text/plain", 400, "want bytes or count"},
		{"/static/farm.html", "text/plain", 404, ""},
		{"/nothing/here", "text/plain", 404, ""},
	} {
		res, body := get(t, h, c.path)
		if res.StatusCode != c.code {
			t.Errorf("GET %s: %d, want %d (%.200s)", c.path, res.StatusCode, c.code, body)
			continue
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, c.ctype) {
			t.Errorf("GET %s: content type %q, want %s", c.path, ct, c.ctype)
		}
		if !strings.Contains(body, c.want) {
			t.Errorf("GET %s: body lacks %q:\n%.600s", c.path, c.want, body)
		}
		if res.StatusCode == 404 && res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: 404 without nosniff", c.path)
		}
	}
}

// TestEscaping checks that no device-supplied string reaches a page as
// markup, that invalid UTF-8 is replaced, and that 1 MB names are cut in
// tables.
func TestEscaping(t *testing.T) {
	h := newView(t)
	for _, path := range []string{"/", "/?fragment=1", "/apps/emulator-5554/com.example.a", "/apps/emulator-5554/com.example.a?fragment=1",
		hostilePkgPath, hostilePkgPath + "/flame", "/sites/badbadbadbad", "/sites/hugehugehuge"} {
		res, body := get(t, h, path)
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %s %.300s", path, res.Status, body)
		}
		for _, bad := range []string{"<script>alert", "<img src", "<i>Pixel", "<b>F.java"} {
			if strings.Contains(body, bad) {
				t.Errorf("GET %s: unescaped %q", path, bad)
			}
		}
		if !utf8.ValidString(body) {
			t.Errorf("GET %s: invalid UTF-8 in the page", path)
		}
		if path != "/sites/hugehugehuge" && len(body) > 200_000 {
			t.Errorf("GET %s: %d bytes: 1 MB names are not cut in tables", path, len(body))
		}
		if strings.Contains(path, "hugehuge") && !strings.Contains(body, hugeName) {
			t.Errorf("GET %s: the site page does not show the whole 1 MB name", path)
		}
	}
	_, body := get(t, h, "/apps/emulator-5554/com.example.a")
	for _, want := range []string{"&lt;script&gt;alert(&#34;class&#34;)&lt;/script&gt;", "m\uFFFD(&lt;b&gt;F.java&lt;/b&gt;:3)"} {
		if !strings.Contains(body, want) {
			t.Errorf("app page lacks the escaped form %q", want)
		}
	}
	// The flame graph's JSON carries names as strings, invalid UTF-8 replaced.
	res, body := get(t, h, "/api/v1/apps/emulator-5554/com.example.a/flame")
	var tree web.FlameNode
	if err := json.Unmarshal([]byte(body), &tree); err != nil || res.StatusCode != 200 {
		t.Fatalf("flame JSON: %v %s", err, res.Status)
	}
	if !strings.Contains(body, `"new \u003cscript\u003ealert(\"class\")\u003c/script\u003e"`) {
		t.Errorf("flame JSON lacks the escaped hostile class:\n%.400s", body)
	}
	if tree.Value != 5708 {
		t.Errorf("flame root by bytes = %d, want 5708 (every site plus other)", tree.Value)
	}
}

func TestAppTables(t *testing.T) {
	h := newView(t)
	_, body := get(t, h, "/api/v1/apps/emulator-5554/com.example.a?sort=bytes")
	var app web.App
	if err := json.Unmarshal([]byte(body), &app); err != nil {
		t.Fatal(err)
	}
	if len(app.Sites) != 4 || app.Sites[0].Site != "badbadbadbad" || !app.Sites[3].Other {
		t.Fatalf("sites by bytes: %+v", app.Sites)
	}
	if app.Sites[1].Share != 600.0/5708 || len(app.Sites[1].Stack) != 2 {
		t.Errorf("second site share %v stack %v", app.Sites[1].Share, app.Sites[1].Stack)
	}
	if app.Sites[0].AllocRate != 2.5 { // 5 allocations in the 2 s window
		t.Errorf("rate %v, want 2.5/s", app.Sites[0].AllocRate)
	}
	if app.Sites[2].AllocRate != 0 { // expired from the recent windows
		t.Errorf("site outside the recent windows has rate %v", app.Sites[2].AllocRate)
	}
	_, body = get(t, h, "/api/v1/apps/emulator-5554/com.example.a?q=LOOPER")
	app = web.App{}
	json.Unmarshal([]byte(body), &app)
	if len(app.Sites) != 2 || app.Sites[0].Site != "0123456789ab" || !app.Sites[1].Other || app.NSites != 4 {
		t.Errorf("filter by frame: %+v", app.Sites)
	}
}

// TestBasicAuth serves the web view like serve does: through the exporter's
// handler and exporter-toolkit with a web config holding basic_auth_users.
func TestBasicAuth(t *testing.T) {
	view := newView(t)
	h, err := exporter.NewHandler(prometheus.NewRegistry(), exporter.HandlerConfig{Version: "test", Root: view})
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(cfgFile, []byte("basic_auth_users:\n  alice: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan error, 1)
	flags := &toolkit.FlagConfig{WebListenAddresses: &[]string{l.Addr().String()}, WebSystemdSocket: new(bool), WebConfigFile: &cfgFile}
	go func() { done <- toolkit.ServeMultiple([]net.Listener{l}, srv, flags, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { srv.Close(); <-done })
	base := "http://" + l.Addr().String()
	for _, p := range []string{"/", "/apps/emulator-5554/com.example.a", "/apps/emulator-5554/com.example.a/flame", "/sites/0123456789ab",
		"/api/v1/apps", "/api/v1/apps/emulator-5554/com.example.a", "/api/v1/apps/emulator-5554/com.example.a/flame", "/api/v1/sites/0123456789ab",
		"/static/app.js", "/metrics", "/apps/emulator-5554/com.nope"} {
		for _, c := range []struct {
			user, pass string
			want       int
		}{{"", "", 401}, {"alice", "wrong", 401}, {"alice", "s3cret", 200}} {
			req, _ := http.NewRequest(http.MethodGet, base+p, nil)
			if c.user != "" {
				req.SetBasicAuth(c.user, c.pass)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			want := c.want
			if want == 200 && strings.Contains(p, "nope") {
				want = 404
			}
			if res.StatusCode != want {
				t.Errorf("GET %s as %q: %d, want %d", p, c.user, res.StatusCode, want)
			}
			if want == 401 && strings.Contains(string(body), "com.example") {
				t.Errorf("GET %s without auth leaks app data", p)
			}
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

// Pages and JSON are gzipped for clients that take it, and only for them.
func TestGzip(t *testing.T) {
	h := newView(t)
	for _, path := range []string{"/apps/emulator-5554/com.example.a", "/api/v1/apps/emulator-5554/com.example.a"} {
		_, plain := get(t, h, path)
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Accept-Encoding", "br, gzip;q=0.8")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get("Content-Encoding") != "gzip" {
			t.Fatalf("GET %s with gzip accepted: Content-Encoding %q", path, rec.Header().Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		unzipped, err := io.ReadAll(zr)
		if err != nil || string(unzipped) != plain {
			t.Errorf("GET %s: gzipped body differs from the plain one (%v)", path, err)
		}
		req.Header.Set("Accept-Encoding", "gzip;q=0")
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get("Content-Encoding") != "" {
			t.Errorf("GET %s with gzip;q=0: gzipped anyway", path)
		}
	}
}

// TestDeviceFactsUnknown: a device whose facts the daemon could not read
// yet shows "unknown" in the API column, with the error, not an empty
// cell; the JSON says so too.
func TestDeviceFactsUnknown(t *testing.T) {
	src := fixture()
	src.snap.Devices = append(src.snap.Devices, alloctrack.DeviceStatus{Server: "127.0.0.1:5037", Serial: "slow-1", State: "device",
		Facts: alloctrack.FactsUnknown, FactsError: `getprop ro.build.version.sdk: <context deadline exceeded>`})
	h, err := web.New(src, web.Config{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	_, page := get(t, h, "/")
	if !strings.Contains(page, `title="getprop ro.build.version.sdk: &lt;context deadline exceeded&gt;">unknown</span>`) {
		t.Errorf("farm page does not show slow-1's facts unknown with the error:\n%s", page)
	}
	_, js := get(t, h, "/api/v1/apps")
	if !strings.Contains(js, `"facts":"unknown"`) {
		t.Errorf("JSON does not say slow-1's facts are unknown: %s", js)
	}
}
