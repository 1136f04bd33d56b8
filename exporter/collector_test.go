package exporter_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/exporter"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fixedSource is an exporter.Source that always returns the same snapshot.
type fixedSource struct{ s alloctrack.Snapshot }

func (f fixedSource) Snapshot() alloctrack.Snapshot { return f.s }

var _ exporter.Source = fixedSource{}

func rtt(obs ...float64) alloctrack.Histogram {
	h := alloctrack.NewHistogram(alloctrack.RTTBuckets)
	for _, v := range obs {
		h.Observe(v)
	}
	return h
}

// A site that two apps share (same class and frames, so the same id).
var sharedSite = alloctrack.SiteInfo{
	ID:    "0123456789ab",
	Class: "java.lang.String",
	Frame: "com.example.a.Main.run(Main.java:12)",
	Stack: "java.lang.StringBuilder.toString(StringBuilder.java:400); com.example.a.Main.run(Main.java:12); java.lang.Thread.run(Thread.java:764)",
}

// fixture is a snapshot with two adb servers, a device seen through both,
// a device in a state the exporter does not know, an app tracking with
// classes, sites, other, errors and round trips, and an unsupported app
// that shares a site with the first.
func fixture() alloctrack.Snapshot {
	devErrs := map[string]uint64{"track-jdwp": 3, alloctrack.StageConnect: 1}
	return alloctrack.Snapshot{
		ReportBuffers: alloctrack.BufferStatus{InUse: 3 << 20, Free: 10 << 20},
		Servers: []alloctrack.ServerStatus{
			{Addr: "10.0.0.2:5037", Up: false, Errors: 7},
			{Addr: "127.0.0.1:5037", Up: true, Errors: 2},
		},
		Devices: []alloctrack.DeviceStatus{
			{Server: "10.0.0.2:5037", Serial: "emulator-5554", State: "offline", Errors: devErrs},
			{Server: "127.0.0.1:5037", Serial: "emulator-5554", State: "device", API: 30, Errors: devErrs},
			{Server: "127.0.0.1:5037", Serial: "usb-2", State: "no permissions", API: 0, Errors: map[string]uint64{}},
		},
		Apps: []alloctrack.AppSnapshot{
			{
				AppStatus: alloctrack.AppStatus{
					Serial: "emulator-5554", Package: "com.example.a", AppName: "com.example.a",
					PID: 1234, State: alloctrack.StateTracking, Tracking: true,
					Window: 10 * time.Second, Windows: 5, Overflowed: 1, ReportBytes: 123456, LastReportEntries: 789,
					Errors: map[string]uint64{alloctrack.StageReport: 2, alloctrack.StageParse: 1},
					RTT:    rtt(0.004, 0.02, 0.3, 12),
				},
				Counts: alloctrack.AppCounts{
					Total: alloctrack.Count{Allocations: 100, Bytes: 6400},
					Classes: []alloctrack.ClassCount{
						{Class: "byte[]", Count: alloctrack.Count{Allocations: 30, Bytes: 3000}},
						{Class: "java.lang.String", Count: alloctrack.Count{Allocations: 40, Bytes: 960}},
					},
					ClassOther: alloctrack.Count{Allocations: 30, Bytes: 2440},
					Sites: []alloctrack.SiteCount{
						{SiteInfo: sharedSite, Count: alloctrack.Count{Allocations: 50, Bytes: 1200}},
						{SiteInfo: alloctrack.SiteInfo{ID: "abcdef012345", Class: "byte[]"}, Count: alloctrack.Count{Allocations: 10, Bytes: 1000}},
					},
					SiteOther: alloctrack.Count{Allocations: 40, Bytes: 4200},
				},
			},
			{
				AppStatus: alloctrack.AppStatus{
					Serial: "usb-2", Package: "com.example.b", AppName: "com.example.b",
					PID: 999, State: alloctrack.StateUnsupported,
					Window: 10 * time.Second, RTT: rtt(),
				},
				Counts: alloctrack.AppCounts{
					Total: alloctrack.Count{Allocations: 7, Bytes: 168},
					Sites: []alloctrack.SiteCount{
						{SiteInfo: sharedSite, Count: alloctrack.Count{Allocations: 7, Bytes: 168}},
					},
				},
			},
		},
	}
}

func TestCollectorGolden(t *testing.T) {
	c := exporter.NewCollector(fixedSource{fixture()})
	golden := filepath.Join("testdata", "collector.prom")
	if *update {
		// testutil.CollectAndFormat keeps only the names it is given, so
		// gather and encode everything here.
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./exporter -run Golden -update to write it)", err)
	}
	defer f.Close()
	if err := testutil.CollectAndCompare(c, f); err != nil {
		t.Fatal(err)
	}
}

func TestCollectorLint(t *testing.T) {
	for name, s := range map[string]alloctrack.Snapshot{"fixture": fixture(), "empty": {}} {
		problems, err := testutil.CollectAndLint(exporter.NewCollector(fixedSource{s}))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s: %s", name, p.Metric, p.Text)
		}
	}
}

// The collector must be registrable next to what serve registers, and a
// pedantic registry must accept its output (descriptors match metrics).
func TestCollectorPedantic(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.NewCollector(fixedSource{fixture()}))
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

func TestSiteInfoOncePerSite(t *testing.T) {
	s := fixture()
	c := exporter.NewCollector(fixedSource{s})
	// Two apps report sharedSite; the other site is the first app's only;
	// site="other" has its own info series so that joins keep it.
	if n := testutil.CollectAndCount(c, "alloctrack_site_info"); n != 3 {
		t.Fatalf("%d alloctrack_site_info series, want 3 (one per distinct site id, and other)", n)
	}
	// Only the shared site: one series, while each app keeps its own
	// per-site counters.
	s.Apps[0].Counts.Sites = s.Apps[0].Counts.Sites[:1]
	c = exporter.NewCollector(fixedSource{s})
	want := `
# HELP alloctrack_site_info An exported allocation site's allocated class ("" for heapprofd sites) and first app frame, 1 per site across apps, joined on site.
# TYPE alloctrack_site_info gauge
alloctrack_site_info{class="java.lang.String",frame="com.example.a.Main.run(Main.java:12)",site="0123456789ab"} 1
alloctrack_site_info{class="other",frame="other",site="other"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "alloctrack_site_info"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "alloctrack_site_allocations_total"); n != 4 {
		t.Fatalf("%d site series, want 4 (a shared site per app, and other per app)", n)
	}
}

// The lean shape: site series carry serial, package and site only; class
// and frame live once per site in alloctrack_site_info; no label carries a
// stack.
func TestSiteSeriesLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.NewCollector(fixedSource{fixture()}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"alloctrack_site_allocations_total":     "package,serial,site",
		"alloctrack_site_allocated_bytes_total": "package,serial,site",
		"alloctrack_site_info":                  "class,frame,site",
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
				if l.GetName() == "stack" {
					t.Errorf("%s has a stack label", mf.GetName())
				}
			}
			if w, ok := want[mf.GetName()]; ok && strings.Join(names, ",") != w {
				t.Errorf("%s labels %v, want %s", mf.GetName(), names, w)
			}
		}
	}
}

// No apps, no site info (not even other).
func TestSiteInfoNoApps(t *testing.T) {
	if n := testutil.CollectAndCount(exporter.NewCollector(fixedSource{}), "alloctrack_site_info"); n != 0 {
		t.Fatalf("%d alloctrack_site_info series without apps, want 0", n)
	}
}

func TestUnknownDeviceStateIsOther(t *testing.T) {
	c := exporter.NewCollector(fixedSource{alloctrack.Snapshot{Devices: []alloctrack.DeviceStatus{
		{Server: "s", Serial: "x", State: "no permissions"},
	}}})
	var want bytes.Buffer
	want.WriteString("# HELP alloctrack_device_state Device state as adb reports it: 1 for the current state.\n# TYPE alloctrack_device_state gauge\n")
	for _, st := range exporter.DeviceStates {
		v := "0"
		if st == "other" {
			v = "1"
		}
		want.WriteString(`alloctrack_device_state{serial="x",server="s",state="` + st + `"} ` + v + "\n")
	}
	if err := testutil.CollectAndCompare(c, &want, "alloctrack_device_state"); err != nil {
		t.Fatal(err)
	}
}

// Every app state the daemon can set has a series of its own, so that
// sum by (state) works and no app vanishes from alloctrack_app_state.
func TestEveryAppStateIsExported(t *testing.T) {
	for _, st := range []string{
		alloctrack.StateConnecting, alloctrack.StateTracking, alloctrack.StateUnsupported,
		alloctrack.StateBackoff, alloctrack.StateHeld, alloctrack.StateExited, alloctrack.StateDisconnected,
	} {
		c := exporter.NewCollector(fixedSource{alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{
			{AppStatus: alloctrack.AppStatus{Serial: "s", Package: "p", State: st, RTT: rtt()}},
		}}})
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		ones := 0
		for _, mf := range mfs {
			if mf.GetName() != "alloctrack_app_state" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() == 1 {
					ones++
					for _, l := range m.GetLabel() {
						if l.GetName() == "state" && l.GetValue() != st {
							t.Errorf("state %s: series state=%s is 1", st, l.GetValue())
						}
					}
				}
			}
		}
		if ones != 1 {
			t.Errorf("state %s: %d alloctrack_app_state series are 1, want 1", st, ones)
		}
	}
}

// Java names need not be ASCII. A site whose stack is longer than the
// label cap must still give valid label values: client_golang's
// MustNewConstMetric panics on invalid UTF-8, and a panic in Collect runs
// in a registry goroutine, so it would end the whole process on a scrape.
func TestCollectorNonASCIIStacks(t *testing.T) {
	var bad []int
	for pad := range 3 {
		var frames []allocreport.FrameName
		for i := range 60 {
			frames = append(frames, allocreport.FrameName{Class: "Lcom/例子/应用/数据源;", Method: strings.Repeat("x", pad) + "加载", File: "数据源.java", Line: int16(i + 1)})
		}
		b := allocreport.NewBuilder()
		b.Add(16, 1, "Lcom/例子/应用/条目;", frames)
		r, err := b.Report()
		if err != nil {
			t.Fatal(err)
		}
		counters := alloctrack.NewCounters(alloctrack.AggregateConfig{}) // default 1024-byte stack cap
		counters.Add(ddm.WindowOfReport(r, time.Time{}, time.Unix(1, 0)))
		snap := alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{{
			AppStatus: alloctrack.AppStatus{Serial: "s", Package: "com.例子.应用", State: alloctrack.StateTracking, RTT: rtt()},
			Counts:    counters.Snapshot(),
		}}}
		if collectPanics(exporter.NewCollector(fixedSource{snap})) != nil {
			bad = append(bad, pad)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("regression: Collect panics (invalid UTF-8 label value) for a non-ASCII stack longer than the cap, padding %v: "+
			"alloctrack/aggregate.go Counters.siteInfo cuts the stack label by bytes, inside a UTF-8 sequence", bad)
	}
}

// collectPanics runs Collect in this goroutine and returns what it
// panicked with, if anything.
func collectPanics(c prometheus.Collector) (p any) {
	ch := make(chan prometheus.Metric)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range ch {
		}
	}()
	defer func() {
		p = recover()
		close(ch)
		<-done
	}()
	c.Collect(ch)
	return nil
}
