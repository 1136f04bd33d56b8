package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
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
func TestServeSimulatePrintsWebView(t *testing.T) {
	var errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"serve", "--simulate", "--simulate.devices", "3", "--simulate.apps", "2", "--window", "1s",
			"--web.listen-address", "127.0.0.1:0", "--log.level", "warn"}, io.Discard, &errOut)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			syscall.Kill(os.Getpid(), syscall.SIGINT)
			if code := <-done; code != exitOK {
				t.Errorf("serve exited %d: %s", code, errOut.String())
			}
		}
	}
	defer stop()
	urlRE := regexp.MustCompile(`web view at (http://127\.0\.0\.1:\d+/)`)
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := urlRE.FindStringSubmatch(errOut.String()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		t.Fatalf("serve did not print the web view's address: %q", errOut.String())
	}
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
	for !ok && time.Since(started) < 15*time.Second {
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

// TestWatchParent: the simulated demo follows its parent out (go run ends
// on SIGTERM without passing it on): gone is called once the parent pid
// changes, and not before.
func TestWatchParent(t *testing.T) {
	var ppid atomic.Int64
	ppid.Store(4242)
	gone := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchParent(ctx, func() int { return int(ppid.Load()) }, 5*time.Millisecond, func() { close(gone) })
	}()
	select {
	case <-gone:
		t.Fatal("gone while the parent lives")
	case <-time.After(50 * time.Millisecond):
	}
	ppid.Store(1)
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the parent's end went unnoticed")
	}
	<-done
}
