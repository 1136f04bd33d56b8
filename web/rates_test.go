package web_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/perfetto"
	"github.com/alloctrack/alloctrack/web"
)

// countersSource serves apps from real Counters, whose Recent honours n.
type countersSource struct {
	snap alloctrack.Snapshot
	c    map[string]*alloctrack.Counters
}

func (s countersSource) Snapshot() alloctrack.Snapshot { return s.snap }

func (s countersSource) Recent(serial, pkg string, n int) (alloctrack.Recent, bool) {
	c, ok := s.c[serial+"/"+pkg]
	if !ok {
		return alloctrack.Recent{}, false
	}
	return c.Recent(n), true
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// oneApp serves one app in state with counters c.
func oneApp(t *testing.T, c *alloctrack.Counters, state string) (*web.Handler, countersSource) {
	t.Helper()
	app := alloctrack.AppSnapshot{AppStatus: alloctrack.AppStatus{Serial: "sim-1", Package: "com.example.a", PID: 7, State: state, Window: 2 * time.Second, Errors: map[string]uint64{}}, Counts: c.Snapshot()}
	src := countersSource{snap: alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{app}}, c: map[string]*alloctrack.Counters{"sim-1/com.example.a": c}}
	h, err := web.New(src, web.Config{Version: "test", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return h, src
}

// windows adds 2 s windows of the given allocation counts, one class each.
func windows(c *alloctrack.Counters, counts ...uint64) {
	for i, n := range counts {
		start := t0.Add(time.Duration(2*i) * time.Second)
		c.Add(&alloctrack.Window{Start: start, End: start.Add(2 * time.Second), Total: alloctrack.Count{Allocations: n, Bytes: 16 * n},
			Classes: []alloctrack.ClassDelta{{Class: "java.lang.String", Count: alloctrack.Count{Allocations: n, Bytes: 16 * n}}}})
	}
}

func getJSON(t *testing.T, h *web.Handler, path string, v any) {
	t.Helper()
	res, body := get(t, h, path)
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %s %.300s", path, res.Status, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// allocations_per_second means one thing everywhere: over the app's last
// RateWindows windows, on the farm page, the app page (whatever windows
// its chart draws) and its rows, in JSON and HTML.
func TestRateOneDefinition(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 5})
	windows(c, 1000, 1000, 1000, 10, 20, 30) // the last 3: 60 in 6 s
	h, _ := oneApp(t, c, alloctrack.StateTracking)
	var farm web.Farm
	getJSON(t, h, "/api/v1/apps", &farm)
	for _, path := range []string{"/api/v1/apps/sim-1/com.example.a", "/api/v1/apps/sim-1/com.example.a?n=5"} {
		var app web.App
		getJSON(t, h, path, &app)
		if farm.Apps[0].AllocRate != 10 || app.AllocRate != 10 || app.RateN != web.RateWindows || app.RateSeconds != 6 {
			t.Errorf("%s: farm %v/s, app %v/s over %d windows (%v s); want 10/s over the last %d (6 s) in both", path, farm.Apps[0].AllocRate, app.AllocRate, app.RateN, app.RateSeconds, web.RateWindows)
		}
		if len(app.Classes) == 0 || app.Classes[0].AllocRate != 10 {
			t.Errorf("%s: class rows %+v, want java.lang.String at 10/s", path, app.Classes)
		}
	}
	_, page := get(t, h, "/apps/sim-1/com.example.a")
	if !strings.Contains(page, "over the last 3 windows (6.0 s)") {
		t.Errorf("app page does not say what its rate is over:\n%.2000s", page)
	}
}

// An app that is not being tracked (its process exited) has no current
// rate anywhere: its last figures are not shown as a live rate.
func TestDeadAppHasNoRate(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 5})
	windows(c, 100, 100, 100)
	h, _ := oneApp(t, c, alloctrack.StateExited)
	var farm web.Farm
	getJSON(t, h, "/api/v1/apps", &farm)
	var app web.App
	getJSON(t, h, "/api/v1/apps/sim-1/com.example.a", &app)
	if a := farm.Apps[0]; a.AllocRate != 0 || a.ByteRate != 0 || a.RateN != 0 || app.AllocRate != 0 || app.Classes[0].AllocRate != 0 || app.Allocations != 300 {
		t.Errorf("exited app: farm %v/s over %d windows, app %v/s, class %v/s, %d allocations; want no rate, 300 allocations", a.AllocRate, a.RateN, app.AllocRate, app.Classes[0].AllocRate, app.Allocations)
	}
	_, farmPage := get(t, h, "/")
	_, appPage := get(t, h, "/apps/sim-1/com.example.a")
	if !strings.Contains(farmPage, "no current rate: the app is exited") || !strings.Contains(appPage, "no current rate") || strings.Contains(appPage, "50.0") {
		t.Error("pages show an exited app's last rate as current (50.0/s), or do not say it has none")
	}
}

// A process's first heapprofd dump (a window with no span) is neither drawn
// nor counted among the recent windows; the next one, 10 s long, is.
func TestHeapprofdFirstDumpNotDrawn(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopSites: 2})
	d := &perfetto.Dump{SamplingInterval: 4096, Heap: perfetto.ArtHeap}
	st := &perfetto.Stack{Key: "f", Frames: []*perfetto.Frame{{Function: "com.example.Foo.bar", Mapping: "/data/app/base.odex"}}}
	v := perfetto.Values{Count: 10, Allocated: 320}
	d.Stacks = []perfetto.StackDelta{{Stack: st, Delta: v, Total: v}}
	c.Add(heapprofd.WindowOfDump(d, t0, t0)) // the first dump: start = end, as heapprofd.Session.count makes it
	c.Add(heapprofd.WindowOfDump(d, t0, t0.Add(10*time.Second)))
	h, _ := oneApp(t, c, alloctrack.StateTracking)
	var app web.App
	getJSON(t, h, "/api/v1/apps/sim-1/com.example.a", &app)
	if len(app.Windows) != 1 || app.RecentN != 1 || app.RateN != 1 || app.RateSeconds != 10 || app.Samples != 20 {
		t.Errorf("chart %d windows (recent %d), rate over %d (%v s), %d samples; want 1, 1, 1 (10 s), 20", len(app.Windows), app.RecentN, app.RateN, app.RateSeconds, app.Samples)
	}
	if _, page := get(t, h, "/apps/sim-1/com.example.a"); !strings.Contains(page, "over the last 1 window (10.0 s)") {
		t.Errorf("app page:\n%.2000s", page)
	}
}

// A server that is down shows why (the error its track-devices ended with).
func TestServerDownShowsError(t *testing.T) {
	src := fakeSource{snap: alloctrack.Snapshot{Servers: []alloctrack.ServerStatus{
		{Addr: "127.0.0.1:7037", Errors: 3, LastError: "dial tcp 127.0.0.1:7037: connect: connection refused"},
		{Addr: "127.0.0.1:7038", Up: true, LastError: "stale <b>"},
	}}}
	h, err := web.New(src, web.Config{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var farm web.Farm
	getJSON(t, h, "/api/v1/apps", &farm)
	_, page := get(t, h, "/")
	if farm.Servers[0].LastError != src.snap.Servers[0].LastError || farm.Servers[1].LastError != "" ||
		!strings.Contains(page, "down</span>: <span class=\"error\">dial tcp 127.0.0.1:7037: connect: connection refused") || strings.Contains(page, "stale") {
		t.Errorf("servers %+v; farm page:\n%.3000s", farm.Servers, page)
	}
}
