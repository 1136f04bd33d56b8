package main

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/bcrypt"
)

// Bad flags of serve and sim are refused before anything starts, with a
// message that names the flag.
func TestServeAndSimUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--window", "0s"}, "--window"},
		{[]string{"serve", "--window", "1s", "--window.min", "2s"}, "--window.min"},
		{[]string{"serve", "--top.classes", "0"}, "--top.classes"},
		{[]string{"serve", "--reports.per-device", "0"}, "--reports.per-device"},
		{[]string{"serve", "--serial", "("}, "--serial"},
		{[]string{"serve", "--package.exclude", "[a"}, "--package"},
		{[]string{"serve", "--log.level", "loud"}, "log.level"},
		{[]string{"serve", "--simulate", "--simulate.devices", "0"}, "--simulate.devices"},
		{[]string{"serve", "--heapdump.dir", "/tmp/x"}, "basic_auth_users"},
		{[]string{"serve", "--heapdump.dir", "/tmp/x", "--heapdump.no-auth", "--heapdump.timeout", "0s"}, "--heapdump.timeout"},
		{[]string{"serve", "--simulate", "--simulate.control-address", "0.0.0.0:0"}, "loopback"},
		{[]string{"serve", "--simulate", "--simulate.control-address", ":9854"}, "loopback"},
		{[]string{"serve", "--web.max-connections", "-1"}, "--web.max-connections"},
		{[]string{"serve", "--tests.recent", "0"}, "--tests.recent"},
		{[]string{"serve", "--tests.recent", "10001"}, "--tests.recent"},
		{[]string{"serve", "--web.idle-timeout", "-1s"}, "--web."},
		{[]string{"sim", "--adb-server", "127.0.0.1:0", "--control", "0.0.0.0:0"}, "loopback"},
		{[]string{"sim"}, "--listen"},
		{[]string{"sim", "--adb-server", "127.0.0.1:0", "--skew", "1"}, "--skew"},
		{[]string{"sim", "--adb-server", "127.0.0.1:0", "--api", "0"}, "--api"},
		{[]string{"sim", "--listen", "nonsense"}, "--listen"},
	} {
		_, errOut, code := runCmd(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d naming %s", c.args, code, errOut, exitUsage, c.want)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serve --simulate prints the web view's address at start, and within about
// one window that address shows every simulated app tracking, with a report
// counted (DDM, Android 11 and before) or samples (heapprofd, the Android 12
// device), and a flame graph with allocations in it.
// startServe runs `alloctrack serve args...` in-process until stop (which
// SIGINTs it and checks it exits 0), and returns the web view's address.
func startServe(t *testing.T, args ...string) (base string, stop func(), errOut *lockedBuffer) {
	t.Helper()
	errOut = &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(append([]string{"serve", "--web.listen-address", "127.0.0.1:0", "--log.level", "warn"}, args...), io.Discard, errOut)
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			syscall.Kill(os.Getpid(), syscall.SIGINT)
			if code := <-done; code != exitOK {
				t.Errorf("serve exited %d: %s", code, errOut.String())
			}
		}
	}
	urlRE := regexp.MustCompile(`web view at (http://127\.0\.0\.1:\d+/)`)
	for deadline := time.Now().Add(testwait.Bound); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := urlRE.FindStringSubmatch(errOut.String()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		stop()
		t.Fatalf("serve did not print the web view's address: %q", errOut.String())
	}
	return base, stop, errOut
}

func TestServeSimulatePrintsWebView(t *testing.T) {
	base, stop, _ := startServe(t, "--simulate", "--simulate.devices", "3", "--simulate.apps", "2", "--window", "1s")
	defer stop()
	started := time.Now()
	get := func(path string) (int, string) {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(""); code != 200 || !strings.Contains(body, "<h1>Farm</h1>") || !strings.Contains(body, `href="/metrics"`) {
		t.Fatalf("GET %s: %d %.300s", base, code, body)
	}
	var farm struct {
		Apps []struct {
			Serial, Package, State, Backend string
			LastReport                      *time.Time `json:"last_report"`
			Samples                         uint64
		}
	}
	ok := false
	for !ok && time.Since(started) < testwait.Bound {
		time.Sleep(100 * time.Millisecond)
		_, body := get("api/v1/apps")
		farm.Apps = nil
		if err := json.Unmarshal([]byte(body), &farm); err != nil {
			t.Fatalf("/api/v1/apps: %v", err)
		}
		ok = len(farm.Apps) == 6
		heapprofd := 0
		for _, a := range farm.Apps {
			switch a.Backend {
			case "heapprofd":
				heapprofd++
				ok = ok && a.State == "tracking" && a.Samples > 0
			default:
				ok = ok && a.State == "tracking" && a.LastReport != nil
			}
		}
		ok = ok && heapprofd == 2
	}
	if !ok {
		t.Fatalf("no report from every simulated app after %v: %+v", time.Since(started), farm.Apps)
	}
	t.Logf("every app reported %v after the address was printed", time.Since(started).Round(time.Millisecond))
	a := farm.Apps[0]
	code, body := get("api/v1/apps/" + a.Serial + "/" + a.Package + "/flame")
	var tree struct {
		V uint64 `json:"v"`
		C []any  `json:"c"`
	}
	if err := json.Unmarshal([]byte(body), &tree); code != 200 || err != nil || tree.V == 0 || len(tree.C) == 0 {
		t.Errorf("flame graph of %s/%s: %d %v %.200s", a.Serial, a.Package, code, err, body)
	}
	if code, _ := get("apps/" + a.Serial + "/" + a.Package + "/flame"); code != 200 {
		t.Errorf("flame page: %d", code)
	}
	stop()
}

// TestWatchParent: gone is called once the parent pid is no longer the
// one given, and not before.
func TestWatchParent(t *testing.T) {
	var ppid atomic.Int64
	ppid.Store(4242)
	var looked atomic.Int64
	gone := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchParent(ctx, 4242, func() int { looked.Add(1); return int(ppid.Load()) }, time.Millisecond, func() { close(gone) })
	}()
	for looked.Load() < 5 {
		select {
		case <-gone:
			t.Fatal("gone while the parent lives")
		case <-time.After(time.Millisecond):
		}
	}
	ppid.Store(1)
	select {
	case <-gone:
	case <-time.After(testwait.Bound):
		t.Fatal("the parent's end went unnoticed")
	}
	<-done
}

// Only a build of go run (in a go-build directory) under the go command
// running `run` follows its parent: not a binary started by a shell, a
// script or a service manager, nor a test binary under go test.
func TestIsGoRun(t *testing.T) {
	const built = "/tmp/go-build1234/b001/exe/alloctrack"
	for _, c := range []struct {
		self, exe string
		args      []string
		want      bool
	}{
		{built, "/usr/lib/go-1.26/bin/go", []string{"go", "run", "-buildvcs=true", "./cmd/alloctrack", "serve"}, true},
		{built, "/root/go/pkg/mod/golang.org/toolchain@v0.0.1-go1.26.8.linux-amd64/bin/go", []string{"/usr/bin/go", "run", "."}, true},
		{built, "", []string{"go", "-C", "/src", "run", "./cmd/alloctrack"}, true}, // exe unreadable: argv[0]
		{built, "/usr/bin/go", []string{"go", "-C=/src", "run", "."}, true},
		{built, "/usr/bin/go", []string{"go", "test", "./cmd/alloctrack"}, false},
		{built, "/usr/bin/dash", []string{"sh", "-c", "alloctrack serve --simulate &"}, false},
		{built, "/usr/bin/nohup", []string{"nohup", "go", "run", "."}, false},
		{built, "/usr/bin/go", []string{"go"}, false},
		{"/usr/local/bin/alloctrack", "/usr/bin/go", []string{"go", "run", "."}, false}, // not a build of go run
		{"/home/u/go-builds/alloctrack", "/usr/bin/dash", []string{"sh"}, false},
	} {
		if got := isGoRun(c.self, c.exe, c.args); got != c.want {
			t.Errorf("isGoRun(%q, %q, %q) = %v, want %v", c.self, c.exe, c.args, got, c.want)
		}
	}
}

// When its go run parent exits, the daemon says so and stops; it never
// claims a signal nobody sent.
func TestFollowGoRunSaysWhy(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	var ppid atomic.Int64
	ppid.Store(4242)
	stopped := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		followGoRun(context.Background(), zap.New(core), 4242, func() int { return int(ppid.Load()) }, time.Millisecond, func() { close(stopped) })
	}()
	ppid.Store(1)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon did not stop when go run exited")
	}
	<-done
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	all := strings.Join(msgs, "\n")
	if !strings.Contains(all, "parent go run (pid 4242) exited; stopping") || strings.Contains(strings.ToLower(all), "signal") {
		t.Errorf("log:\n%s", all)
	}
}

// serve --heapdump.dir: an app page offers the button; a POST without the
// header is refused, with it a dump of a simulated app is taken (Android
// 11 and 12 devices), summarised, kept and served; its time is a metric.
func TestServeHeapDump(t *testing.T) {
	dir := t.TempDir()
	base, stop, errOut := startServe(t, "--simulate", "--simulate.devices", "2", "--simulate.apps", "1", "--window", "1s", "--heapdump.dir", dir, "--heapdump.no-auth")
	defer stop()
	defer http.DefaultClient.CloseIdleConnections()
	var farm struct {
		Apps []struct{ Serial, Package string }
	}
	for deadline := time.Now().Add(testwait.Bound); len(farm.Apps) < 2 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		res, err := http.Get(base + "api/v1/apps")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(res.Body).Decode(&farm)
		res.Body.Close()
	}
	if len(farm.Apps) < 2 {
		t.Fatalf("apps %+v; %s", farm.Apps, errOut.String())
	}
	post := func(path string, header bool) (int, string) {
		req, _ := http.NewRequest("POST", base+path, nil)
		if header {
			req.Header.Set("X-Alloctrack-Request", "heapdump")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, a := range farm.Apps {
		path := "api/v1/apps/" + url.PathEscape(a.Serial) + "/" + url.PathEscape(a.Package) + "/heapdump"
		if code, _ := post(path, false); code != http.StatusForbidden {
			t.Errorf("POST without the header: %d", code)
		}
		code, body := post(path, true)
		var res struct {
			ID      string
			Files   map[string]string
			Summary offline.HeapSummary
		}
		if err := json.Unmarshal([]byte(body), &res); err != nil || code != 200 {
			t.Fatalf("POST %s: %d %s %v", path, code, body, err)
		}
		if res.Summary.Objects == 0 || res.Summary.Package != a.Package || res.Summary.DumpBytes == 0 {
			t.Errorf("summary %+v", res.Summary)
		}
		r, err := http.Get(strings.TrimSuffix(base, "/") + res.Files["heap.hprof"])
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if !bytes.HasPrefix(b, []byte("JAVA PROFILE 1.0.3\x00")) || int64(len(b)) != res.Summary.DumpBytes {
			t.Errorf("heap.hprof: %d bytes, %.20q", len(b), b)
		}
		if _, err := os.Stat(filepath.Join(dir, res.ID, "summary.json")); err != nil {
			t.Error(err)
		}
		for _, p := range []string{"heapdumps/" + res.ID, "heapdumps"} {
			r, err := http.Get(base + p)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != 200 || !strings.Contains(string(b), "Heap dump") || p != "heapdumps" && (!strings.Contains(string(b), "Leaked Activities and Fragments") ||
				!strings.Contains(string(b), html.EscapeString(res.Summary.TopClasses[0].Class))) {
				t.Errorf("GET %s: %d %.300s", p, r.StatusCode, b)
			}
		}
		page, _ := http.Get(base + "apps/" + url.PathEscape(a.Serial) + "/" + url.PathEscape(a.Package))
		pb, _ := io.ReadAll(page.Body)
		page.Body.Close()
		if !strings.Contains(string(pb), "Take heap dump") {
			t.Error("the app page has no heap dump button")
		}
	}
	if code, _ := post("api/v1/apps/nope/com.nope/heapdump", true); code != http.StatusNotFound {
		t.Errorf("unknown app: %d", code)
	}
	for _, bad := range []string{"api/v1/heapdumps/..%2f..%2fetc/heap.hprof", "api/v1/heapdumps/x/passwd"} {
		r, err := http.Get(base + bad)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d", bad, r.StatusCode)
		}
	}
	res, _ := http.Get(base + "metrics")
	m, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(m), `alloctrack_heapdump_duration_seconds_count{result="ok"} 2`) {
		t.Errorf("metrics lack the dumps' durations:\n%s", regexp.MustCompile(`(?m)^alloctrack_heapdump.*$`).FindAllString(string(m), -1))
	}
}

// With basic auth users in the web config, --heapdump.dir needs no
// --heapdump.no-auth, and a POST without the user's password is refused.
func TestServeHeapDumpNeedsAuth(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "web.yml")
	os.WriteFile(cfg, []byte("basic_auth_users:\n  alice: "+string(hash)+"\n"), 0o600)
	base, stop, _ := startServe(t, "--simulate", "--simulate.devices", "1", "--simulate.apps", "1", "--window", "1s",
		"--heapdump.dir", t.TempDir(), "--web.config.file", cfg)
	defer stop()
	defer http.DefaultClient.CloseIdleConnections()
	post := func(user, pass string) int {
		req, _ := http.NewRequest("POST", base+"api/v1/apps/nope/com.nope/heapdump", nil)
		req.Header.Set("X-Alloctrack-Request", "heapdump")
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if code := post("", ""); code != http.StatusUnauthorized {
		t.Errorf("without a password: %d", code)
	}
	if code := post("alice", "s3cret"); code != http.StatusNotFound { // authorised; no such app
		t.Errorf("with the password: %d", code)
	}
}
