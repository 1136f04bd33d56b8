package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	"github.com/alloctrack/alloctrack/exporter"
	"github.com/alloctrack/alloctrack/internal/source"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
	"github.com/alloctrack/alloctrack/web"
)

// chromium returns the browser's path, or skips the test (fails it when CI
// is set) if there is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not found: install the Debian package chromium")
	}
	t.Skip("chromium not found; install the Debian package chromium to run this test")
	return ""
}

// screenshotDir is $ALLOCTRACK_SCREENSHOTS, or a temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("ALLOCTRACK_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// liveFarm runs the daemon on a simulated farm in-process, served like
// serve --simulate serves it, and returns the farm and the base URL.
func liveFarm(t *testing.T, devices, apps int) (*sim.Farm, *supervisor.Daemon, string) {
	t.Helper()
	w := sim.DefaultWorkload()
	w.Rate = 500
	farm := sim.NewFarm(sim.FarmConfig{Devices: devices, AppsPerDevice: apps, APIs: []int{30, 28}, Workload: w})
	addr, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := supervisor.NewDaemon(supervisor.DaemonConfig{
		Session:   ddm.Config{Window: time.Second, MinWindow: 500 * time.Millisecond, RequestTimeout: 5 * time.Second, ReportTimeout: 10 * time.Second},
		Aggregate: alloctrack.AggregateConfig{TopClasses: 100, TopSites: 200},
	}, []supervisor.Source{source.New(addr.String())}, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	view, err := web.New(d, web.Config{Version: "test", Refresh: time.Second, Links: [][2]string{{"sim/devices", "Simulated devices"}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := exporter.NewHandler(prometheus.NewRegistry(), exporter.HandlerConfig{
		Root:  view,
		Extra: map[string]http.Handler{"/debug/pprof/allocs": exporter.ProfileHandler(d, time.Now()), "/sim/": http.StripPrefix("/sim", farm.Handler())},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
		farm.Close()
	})
	return farm, d, srv.URL
}

// waitWindows waits until every app has at least n counted windows.
func waitWindows(t *testing.T, d *supervisor.Daemon, apps, n int) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound)
	for time.Now().Before(deadline) {
		s := d.Snapshot()
		ok := len(s.Apps) == apps
		for _, a := range s.Apps {
			ok = ok && len(a.Counts.Windows) >= n
		}
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("apps did not count %d windows in %v: %+v", n, testwait.Bound, d.Snapshot().Apps)
}

// TestBrowser drives headless Chromium through every page against the
// daemon on a simulated farm and checks the tables against the simulator's
// ground truth.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	shots := screenshotDir(t)
	farm, d, base := liveFarm(t, 2, 2)
	waitWindows(t, d, 4, 2)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1200, 760), chromedp.Flag("headless", "new"))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	var mu sync.Mutex
	var consoleErrs []string
	listen := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError || e.Type == runtime.APITypeWarning {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				consoleErrs = append(consoleErrs, fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			consoleErrs = append(consoleErrs, fmt.Sprintf("exception: %s %+v", e.ExceptionDetails.Text, e.ExceptionDetails.Exception))
		case *log.EventEntryAdded:
			if e.Entry.Level == log.LevelError || e.Entry.Level == log.LevelWarning {
				consoleErrs = append(consoleErrs, fmt.Sprintf("log %s: %s %s", e.Entry.Level, e.Entry.Text, e.Entry.URL))
			}
		}
	}
	// This chromedp's protocol tables predate some event fields Chromium
	// sends (IPAddressSpace "Loopback"); those decode errors are noise.
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "IPAddressSpace") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	chromedp.ListenTarget(ctx, listen)
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 2*testwait.Bound)
	defer tcancel()

	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var buf []byte
			if err := chromedp.CaptureScreenshot(&buf).Do(ctx); err != nil {
				return err
			}
			p := filepath.Join(shots, name)
			t.Logf("screenshot %s", p)
			return os.WriteFile(p, buf, 0o644)
		})
	}
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Farm page: one row per simulated app, each linking to its page.
	var rows [][]string
	run("farm page", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#apps tbody tr"),
		chromedp.Evaluate(`[...document.querySelectorAll("#apps tbody tr")].map(r => [r.cells[0].textContent, r.cells[1].textContent, r.cells[3].textContent, r.cells[1].querySelector("a").getAttribute("href")])`, &rows),
		shot("farm.png"))
	want := map[string]bool{}
	for _, dev := range farm.Devices() {
		for _, vm := range farm.VMs(dev.Serial(), "") {
			want[dev.Serial()+"/"+vm.Config().Package] = true
		}
	}
	if len(want) != 4 {
		t.Fatalf("the simulator runs %d apps, want 4: %v", len(want), want)
	}
	got := map[string]bool{}
	for _, r := range rows {
		got[r[0]+"/"+r[1]] = true
		if r[2] != alloctrack.StateTracking {
			t.Errorf("farm page: %s/%s is %q, want tracking", r[0], r[1], r[2])
		}
		if r[3] != "/apps/"+r[0]+"/"+r[1] {
			t.Errorf("farm page: %s/%s links to %q", r[0], r[1], r[3])
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("farm page apps %v, simulator has %v", got, want)
	}

	// App page: classes and sites are the simulator's.
	serial, pkg := "sim-1", "com.example.app1"
	_, truth := farm.Truth(serial, pkg)
	var classes []string
	var sites [][]string
	run("app page", chromedp.Navigate(base+"/apps/"+serial+"/"+pkg), chromedp.WaitVisible("#sites tbody tr"),
		chromedp.Evaluate(`[...document.querySelectorAll("#classes tbody td.name")].map(td => td.textContent)`, &classes),
		chromedp.Evaluate(`[...document.querySelectorAll("#sites tbody tr")].map(r => [r.cells[0].textContent, r.cells[1].textContent, r.cells[3].textContent.replaceAll(",", "")])`, &sites))
	// The charts: one per quantity, each with its axes drawn.
	var axes []string
	run("charts", chromedp.Evaluate(`[...document.querySelectorAll("figure.chart canvas")].map(c => c.dataset.field + ": " + (c.dataset.axes || ""))`, &axes))
	if len(axes) != 2 || !strings.HasPrefix(axes[0], "allocations_per_second: y 0..") || !strings.Contains(axes[0], "/s; x ") ||
		!strings.HasPrefix(axes[1], "bytes_per_second: y 0..") || !strings.Contains(axes[1], "B/s") {
		t.Errorf("charts: %q, want two with y axes in their units and an x axis of windows", axes)
	}
	if len(classes) < 2 || classes[len(classes)-1] != alloctrack.Other {
		t.Errorf("classes table %v: want classes then other", classes)
	}
	for _, c := range classes[:len(classes)-1] {
		if _, ok := truth.ByClass[c]; !ok {
			t.Errorf("class %q on the page was never reported by the simulator", c)
		}
	}
	if len(sites) < 4 || sites[len(sites)-1][0] != alloctrack.Other {
		t.Fatalf("sites table %v: want sites then other", sites)
	}
	// The top sites' stacks, read from their site pages, are sites the
	// simulator reported, with no more allocations than it reported.
	for i, s := range sites[:3] {
		var stack []string
		var class string
		run("site page", chromedp.Navigate(base+"/sites/"+s[0]), chromedp.WaitVisible("#stack li"),
			chromedp.Evaluate(`[...document.querySelectorAll("#stack li")].map(li => li.textContent)`, &stack),
			chromedp.Text("dd.name", &class))
		if i == 0 {
			run("site screenshot", shot("site.png"))
		}
		n, _ := strconv.ParseUint(s[2], 10, 64)
		if _, ok := truth.ByClass[class]; class != s[1] || !ok {
			t.Errorf("site %s: class %q (table %q) not reported by the simulator", s[0], class, s[1])
		}
		_, truthNow := farm.Truth(serial, pkg)
		ts, ok := truthNow.BySite[sim.SiteKey(class, stack)]
		if !ok {
			t.Errorf("site %s: stack %q of %s is not a site the simulator reported", s[0], stack, class)
		} else if n == 0 || n > ts.Allocations {
			t.Errorf("site %s: %d allocations on the page, simulator reported %d", s[0], n, ts.Allocations)
		}
	}

	// Sorting: click the Bytes header; the table comes back by bytes
	// (share of bytes non-increasing) without a page load.
	var after string
	var shares []string
	run("sort", chromedp.Navigate(base+"/apps/"+serial+"/"+pkg), chromedp.WaitVisible("#sites tbody tr"),
		chromedp.Evaluate(`window.scrollTo(0, 0); window.__marker = 1`, nil),
		chromedp.Sleep(100*time.Millisecond), shot("app.png"),
		chromedp.Click(`#sites a[data-sort="bytes"]`),
		chromedp.Poll(`location.search.includes("sort=bytes") && document.body.dataset.refreshed !== undefined`, nil),
		chromedp.Evaluate(`[...document.querySelectorAll("#sites tbody tr:not(.other)")].map(r => r.cells[7].textContent)`, &shares),
		chromedp.Evaluate(`String(window.__marker) + location.search`, &after),
		shot("app-sorted.png"))
	if after != "1?sort=bytes" {
		t.Errorf("after sorting: %q (the page reloaded, or the URL did not follow)", after)
	}
	prev := 101.0
	for _, s := range shares {
		f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if err != nil || f > prev {
			t.Errorf("sites by bytes: shares %v not in descending order", shares)
			break
		}
		prev = f
	}

	// Filter box: typing filters the table in place.
	var filtered []string
	run("filter", chromedp.SendKeys("#filter", "byte[]"),
		chromedp.Poll(`location.search.includes("q=byte")`, nil), chromedp.Sleep(200*time.Millisecond),
		chromedp.Poll(`[...document.querySelectorAll("#classes td.name")].every(td => td.textContent.includes("byte[]") || td.textContent === "other")`, nil),
		chromedp.Evaluate(`[...document.querySelectorAll("#classes td.name")].map(td => td.textContent)`, &filtered))
	if len(filtered) != 2 || filtered[0] != "byte[]" {
		t.Errorf("classes filtered by byte[]: %v", filtered)
	}

	// Flame graph: follow the link from the app page; by count over the
	// last 5 windows too.
	var nodes, root string
	run("flame graph", chromedp.Navigate(base+"/apps/"+serial+"/"+pkg), chromedp.WaitVisible(`a[href$="/flame"]`),
		chromedp.Click(`a[href$="/flame"]`), chromedp.WaitVisible("#flame .fr"),
		chromedp.AttributeValue("#flame", "data-nodes", &nodes, nil),
		chromedp.Text("#flame .fr", &root), shot("flame.png"))
	if n, _ := strconv.Atoi(nodes); n < 20 || root != pkg {
		t.Errorf("flame graph: %s nodes, root %q", nodes, root)
	}
	run("flame by count", chromedp.Navigate(base+"/apps/"+serial+"/"+pkg+"/flame?by=count&n=5"), chromedp.WaitVisible("#flame .fr"),
		chromedp.AttributeValue("#flame", "data-nodes", &nodes, nil),
		chromedp.Click("#flame .fr.leaf"), chromedp.Sleep(100*time.Millisecond))
	if n, _ := strconv.Atoi(nodes); n < 20 {
		t.Errorf("flame graph by count: %s nodes", nodes)
	}

	// An unknown app is a 404 with a message the browser shows as text.
	var body string
	run("404", chromedp.Navigate(base+"/apps/"+serial+"/"+url.PathEscape("com.nope")), chromedp.Text("body", &body))
	if !strings.Contains(body, `no app "com.nope" on device "sim-1"`) {
		t.Errorf("unknown app page: %q", body)
	}

	mu.Lock()
	defer mu.Unlock()
	var errs []string
	for _, e := range consoleErrs {
		if strings.Contains(e, "com.nope") && strings.Contains(e, "404") {
			continue // the 404 we asked for
		}
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
	if err := chromedp.Cancel(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("closing the browser: %v", err)
	}
}
