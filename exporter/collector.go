package exporter

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// Namespace prefixes every metric.
const Namespace = "alloctrack"

// Source gives the collector its snapshot. It must not do I/O.
type Source interface {
	Snapshot() alloctrack.Snapshot
}

// AppStates are the app states the collector reports, one series each.
var AppStates = []string{
	alloctrack.StateConnecting, alloctrack.StateTracking, alloctrack.StateUnsupported,
	alloctrack.StateBackoff, alloctrack.StateHeld, alloctrack.StateWaiting, alloctrack.StateExited, alloctrack.StateDisconnected,
}

// HeapprofdStates are the further states of apps watched through
// heapprofd; only those apps have a series for them.
var HeapprofdStates = []string{alloctrack.StateStarting, alloctrack.StateUnprofileable, alloctrack.StateRefused}

// DeviceStates are the device states reported, one series each; a state
// adb reports that is not listed shows as "other".
var DeviceStates = []string{"device", "offline", "unauthorized", "authorizing", "connecting", "recovery", "sideload", "bootloader", "gone", "other"}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// spec is a family the handler also writes as text (see sites.go).
type spec struct {
	name, help string
	labels     []string
	gauge      bool
}

func (s spec) desc() *prometheus.Desc { return desc(s.name, s.help, s.labels...) }

// The class and site families.
var (
	specClassAllocs = spec{"allocations_total", "Allocations per allocated class; classes without a series of their own count into class=\"other\".", []string{"serial", "package", "class"}, false}
	specClassBytes  = spec{"allocated_bytes_total", "Bytes allocated per allocated class; see alloctrack_allocations_total.", []string{"serial", "package", "class"}, false}
	specSiteAllocs  = spec{"site_allocations_total", "Allocations per allocation site (allocated class and whole stack; class and frame in alloctrack_site_info, joined on site), the rest counted into site=\"other\".", []string{"serial", "package", "site"}, false}
	specSiteBytes   = spec{"site_allocated_bytes_total", "Bytes allocated per allocation site; see alloctrack_site_allocations_total.", []string{"serial", "package", "site"}, false}
	specSiteInfo    = spec{"site_info", "An exported allocation site's allocated class (\"\" for heapprofd sites) and first app frame, 1 per site across apps, joined on site.", []string{"site", "class", "frame"}, true}

	// Heapprofd apps (Android 12+): estimates from samples, in families
	// of their own.
	specSiteEstAllocs = spec{"site_estimated_allocations_total", "Estimate: allocations per allocation site of heapprofd apps (Android 12+) from their samples, not exact (frame in alloctrack_site_info, joined on site), the rest counted into site=\"other\".", []string{"serial", "package", "site"}, false}
	specSiteEstBytes  = spec{"site_estimated_allocated_bytes_total", "Estimate: bytes allocated per allocation site of heapprofd apps, estimated from heapprofd samples (not exact); see alloctrack_site_estimated_allocations_total.", []string{"serial", "package", "site"}, false}
)

var (
	app = []string{"serial", "package"}

	descServerUp      = desc("adb_server_up", "Whether the adb server answered track-devices (1) or not (0).", "server")
	descServerErrors  = desc("adb_server_errors_total", "Times the connection to the adb server failed or ended.", "server")
	descDeviceState   = desc("device_state", "Device state as adb reports it: 1 for the current state.", "server", "serial", "state")
	descDeviceAPI     = desc("device_api_level", "Android API level of the device (ro.build.version.sdk); absent until read.", "server", "serial")
	descDeviceFacts   = desc("device_facts", "Whether the device's facts (API level, model) are read: 1 for the current value, unknown (being read or retried; no backend runs on the device) or known.", "server", "serial", "facts")
	descDeviceErrors  = desc("device_errors_total", "Errors on a device before an app was named, by stage.", "serial", "stage")
	descDeviceOrphans = desc("device_orphaned_trackers", "Apps the package filters exclude whose allocation tracker an earlier, wider run left on, slowing them for nobody (--orphans.turn-off turns such trackers off).", "server", "serial")

	descAppState      = desc("app_state", "App session state, 1 for the current one (docs/serve.md gives each state's meaning, unsupported and the heapprofd states starting, unprofileable and perfetto-refused included).", "serial", "package", "state")
	descAppTracking   = desc("app_tracking", "Whether allocation tracking is on for the app (1) or not (0).", app...)
	descAppPID        = desc("app_pid", "Process id of the app's newest process.", app...)
	descWindows       = desc("windows_total", "Windows whose report was counted.", app...)
	descOverflowed    = desc("overflowed_windows_total", "Windows whose report was full (65,535 entries; 65,536 on Dalvik; fewer where ART 7-9 set dalvik.vm.recentAllocMax), so older allocations were lost.", app...)
	descWindowSeconds = desc("window_seconds", "Current window length; shorter after overflowed windows.", app...)
	descAnswer        = desc("report_answer_seconds", "Time from REAL request to the first byte of its reply: the VM builds the report in it, holding its tracker lock, so the app's allocating threads stall for up to this long each window.", app...)
	descRTT           = desc("report_round_trip_seconds", "Time from REAL request to reply, each window's blind time (what the app allocates meanwhile is cleared with the window), part of it a stall of the app's allocating threads while the VM builds the report.", app...)
	descReportBytes   = desc("report_bytes_total", "Bytes of allocation reports received.", app...)
	descLastEntries   = desc("last_report_entries", "Entries in the app's last report.", app...)
	descAppErrors     = desc("app_errors_total", "Errors of the app's sessions, by stage.", "serial", "package", "stage")
	descAppAllocs     = desc("app_allocations_total", "Allocations counted for the app: the exact total, never reduced by series expiry.", app...)
	descAppBytes      = desc("app_allocated_bytes_total", "Bytes allocated by counted allocations of the app: the exact total.", app...)
	descClassAllocs   = specClassAllocs.desc()
	descClassBytes    = specClassBytes.desc()
	descSiteAllocs    = specSiteAllocs.desc()
	descSiteBytes     = specSiteBytes.desc()
	descSiteInfo      = specSiteInfo.desc()
	descSiteEstAllocs = specSiteEstAllocs.desc()
	descSiteEstBytes  = specSiteEstBytes.desc()
	descSnapshotApps  = desc("apps", "Apps the daemon has counters for.")

	descAppSampledAllocs = desc("app_sampled_allocations_total", "Allocations heapprofd sampled in the app (Android 12+): the exact number of samples its traces held, not of allocations.", app...)
	descAppSampledBytes  = desc("app_sampled_bytes_total", "Bytes of the allocations heapprofd sampled in the app: exact, what its traces held; see alloctrack_app_sampled_allocations_total.", app...)
	descAppEstAllocs     = desc("app_estimated_allocations_total", "Estimate: allocations of a heapprofd app (Android 12+), estimated from its samples for the sampling interval (not exact).", app...)
	descAppEstBytes      = desc("app_estimated_allocated_bytes_total", "Estimate: bytes allocated by a heapprofd app, estimated from its samples for the sampling interval (not exact).", app...)
	descHPInterval       = desc("heapprofd_sampling_interval_bytes", "Sampling interval of the app's heapprofd sessions, in bytes, as its last dump gave it; 1 samples every allocation.", app...)
	descHPSessions       = desc("heapprofd_sessions_total", "Perfetto sessions started for the app.", app...)
	descHPDumps          = desc("heapprofd_dumps_total", "Heapprofd dumps of the app counted.", app...)
	descHPTraceBytes     = desc("heapprofd_trace_bytes_total", "Trace bytes of the app's heapprofd sessions read from the device.", app...)
	descHPBroken         = desc("heapprofd_broken_stack_samples_total", "Samples on stacks that did not unwind, by failure: error (heapprofd's ERROR frame) or unknown (unnamed outermost frame: the Android 12/13 ART unwinding bug).", "serial", "package", "unwind")
	descSnapshotSeries   = desc("site_series", "Site series currently exported across all apps.")
	descTestInfo         = desc("test_info", "The test an app runs now, 1 while it runs (one series per app at most; none between tests): test is the name as the runner gives it, method(class), cut to 256 bytes.", "serial", "package", "test", "class")
	descTests            = desc("tests_total", "Tests of the app's instrumentation runs that ended, by outcome (passed, failed, error, ignored, assumption_failed, crashed, unfinished).", "serial", "package", "outcome")
	descTestAllocs       = desc("test_allocations_total", "Allocations counted inside the app's tests, between each test's started and finished (the running test's so far included); DDM apps only.", app...)
	descTestBytes        = desc("test_allocated_bytes_total", "Bytes of the allocations counted inside the app's tests; see alloctrack_test_allocations_total.", app...)
	descTestEstAllocs    = desc("test_estimated_allocations_total", "Estimate: allocations inside the tests of a heapprofd app (Android 12+), its dumps split among its tests by device time (each test's boundary error on its page); not exact.", app...)
	descTestEstBytes     = desc("test_estimated_allocated_bytes_total", "Estimate: bytes allocated inside the tests of a heapprofd app; see alloctrack_test_estimated_allocations_total.", app...)
	descReportBuffers    = desc("report_buffer_bytes", "Memory of the buffers reports are read into, by state (in_use or free), which on Unix are memory maps outside the Go heap (in process_resident_memory_bytes, not go_memstats_*).", "state")
)

// Collector turns a snapshot into metrics.
type Collector struct {
	src   Source
	cache fragmentCache
}

// NewCollector returns a collector over src.
func NewCollector(src Source) *Collector { return &Collector{src: src} }

// parts of the metrics a collect call emits.
type parts int

const (
	partLight parts = 1 << iota // everything but the per-app class and site families
	partSites                   // class and site counters, site info
	partAll   = partLight | partSites
)

// view is a collector of some parts of one snapshot.
type view struct {
	c     *Collector
	snap  alloctrack.Snapshot
	parts parts
}

func (v view) Describe(ch chan<- *prometheus.Desc) { v.c.Describe(ch) }
func (v view) Collect(ch chan<- prometheus.Metric) { v.c.collect(ch, v.snap, v.parts) }

var _ prometheus.Collector = (*Collector)(nil)

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descServerUp, descServerErrors, descDeviceState, descDeviceAPI, descDeviceFacts, descDeviceErrors, descDeviceOrphans,
		descAppState, descAppTracking, descAppPID, descWindows, descOverflowed, descWindowSeconds,
		descRTT, descAnswer, descReportBytes, descLastEntries, descAppErrors, descAppAllocs, descAppBytes,
		descClassAllocs, descClassBytes, descSiteAllocs, descSiteBytes, descSiteInfo,
		descSnapshotApps, descSnapshotSeries, descReportBuffers,
		descSiteEstAllocs, descSiteEstBytes, descAppSampledAllocs, descAppSampledBytes, descAppEstAllocs, descAppEstBytes,
		descHPInterval, descHPSessions, descHPDumps, descHPTraceBytes, descHPBroken,
		descTestInfo, descTests, descTestAllocs, descTestBytes, descTestEstAllocs, descTestEstBytes,
	} {
		ch <- d
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect builds the metrics from one snapshot.
func (c *Collector) Collect(ch chan<- prometheus.Metric) { c.collect(ch, c.src.Snapshot(), partAll) }

func (c *Collector) collect(ch chan<- prometheus.Metric, s alloctrack.Snapshot, p parts) {
	if p&partLight != 0 {
		c.collectLight(ch, s)
	}
	if p&partSites != 0 {
		c.collectSites(ch, s)
	}
}

func (c *Collector) collectLight(ch chan<- prometheus.Metric, s alloctrack.Snapshot) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	m := prometheus.MustNewConstMetric
	for _, sv := range s.Servers {
		ch <- m(descServerUp, gauge, b2f(sv.Up), sv.Addr)
		ch <- m(descServerErrors, counter, float64(sv.Errors), sv.Addr)
	}
	seenDevErr := map[string]bool{}
	for _, d := range s.Devices {
		// A serial seen through two servers counts its errors once.
		collectDevice(ch, &d, !seenDevErr[d.Serial])
		seenDevErr[d.Serial] = true
	}
	nSites := 0
	for _, a := range s.Apps {
		collectApp(ch, &a)
		nSites += len(a.Counts.Sites)
	}
	ch <- m(descSnapshotApps, gauge, float64(len(s.Apps)))
	ch <- m(descSnapshotSeries, gauge, float64(nSites))
	ch <- m(descReportBuffers, gauge, float64(s.ReportBuffers.InUse), "in_use")
	ch <- m(descReportBuffers, gauge, float64(s.ReportBuffers.Free), "free")
}

// collectDevice sends one device's series; errors: its error counters too.
func collectDevice(ch chan<- prometheus.Metric, d *alloctrack.DeviceStatus, errors bool) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	m := prometheus.MustNewConstMetric
	state := "other"
	if slices.Contains(DeviceStates, d.State) {
		state = d.State
	}
	for _, st := range DeviceStates {
		ch <- m(descDeviceState, gauge, b2f(st == state), d.Server, d.Serial, st)
	}
	if d.API > 0 {
		ch <- m(descDeviceAPI, gauge, float64(d.API), d.Server, d.Serial)
	}
	if d.Facts != "" { // followed devices only
		for _, f := range []string{alloctrack.FactsUnknown, alloctrack.FactsKnown} {
			ch <- m(descDeviceFacts, gauge, b2f(f == d.Facts), d.Server, d.Serial, f)
		}
	}
	ch <- m(descDeviceOrphans, gauge, float64(d.OrphanedTrackers), d.Server, d.Serial)
	if errors {
		for stage, n := range d.Errors {
			ch <- m(descDeviceErrors, counter, float64(n), d.Serial, stage)
		}
	}
}

// collectApp sends one app's series other than its classes and sites.
func collectApp(ch chan<- prometheus.Metric, a *alloctrack.AppSnapshot) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	m := prometheus.MustNewConstMetric
	l := []string{a.Serial, a.Package}
	for _, st := range AppStates {
		ch <- m(descAppState, gauge, b2f(st == a.State), a.Serial, a.Package, st)
	}
	if a.Backend == alloctrack.BackendHeapprofd {
		for _, st := range HeapprofdStates {
			ch <- m(descAppState, gauge, b2f(st == a.State), a.Serial, a.Package, st)
		}
	}
	ch <- m(descAppTracking, gauge, b2f(a.Tracking), l...)
	ch <- m(descAppPID, gauge, float64(a.PID), l...)
	ch <- m(descWindows, counter, float64(a.Windows), l...)
	ch <- m(descOverflowed, counter, float64(a.Overflowed), l...)
	ch <- m(descWindowSeconds, gauge, a.Window.Seconds(), l...)
	ch <- m(descReportBytes, counter, float64(a.ReportBytes), l...)
	ch <- m(descLastEntries, gauge, float64(a.LastReportEntries), l...)
	for _, h := range []struct {
		d *prometheus.Desc
		h *alloctrack.Histogram
	}{{descRTT, &a.RTT}, {descAnswer, &a.Answer}} {
		buckets := make(map[float64]uint64, len(h.h.Bounds))
		for i, b := range h.h.Bounds {
			buckets[b] = h.h.Counts[i]
		}
		ch <- prometheus.MustNewConstHistogram(h.d, h.h.Count, h.h.Sum, buckets, l...)
	}
	for stage, n := range a.Errors {
		ch <- m(descAppErrors, counter, float64(n), a.Serial, a.Package, stage)
	}
	if heapprofd(a) {
		collectHeapprofd(ch, a)
	} else {
		ch <- m(descAppAllocs, counter, float64(a.Counts.Total.Allocations), l...)
		ch <- m(descAppBytes, counter, float64(a.Counts.Total.Bytes), l...)
	}
	collectTests(ch, a)
}

// collectHeapprofd sends a heapprofd app's sampled and estimated counts
// and its sessions' figures.
func collectHeapprofd(ch chan<- prometheus.Metric, a *alloctrack.AppSnapshot) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	m := prometheus.MustNewConstMetric
	l := []string{a.Serial, a.Package}
	ct, hp := &a.Counts, &a.Heapprofd
	ch <- m(descAppSampledAllocs, counter, float64(ct.Sampled.Allocations), l...)
	ch <- m(descAppSampledBytes, counter, float64(ct.Sampled.Bytes), l...)
	ch <- m(descAppEstAllocs, counter, ct.Estimated.Allocations, l...)
	ch <- m(descAppEstBytes, counter, ct.Estimated.Bytes, l...)
	ch <- m(descHPInterval, gauge, float64(hp.SamplingInterval), l...)
	ch <- m(descHPSessions, counter, float64(hp.Sessions), l...)
	ch <- m(descHPDumps, counter, float64(hp.Dumps), l...)
	ch <- m(descHPTraceBytes, counter, float64(hp.TraceBytes), l...)
	ch <- m(descHPBroken, counter, float64(hp.ErrorStackSamples), a.Serial, a.Package, "error")
	ch <- m(descHPBroken, counter, float64(hp.UnknownStackSamples), a.Serial, a.Package, "unknown")
}

// collectSites sends the class and site families: the series of
// alloctrack_allocations_total, alloctrack_allocated_bytes_total,
// alloctrack_site_allocations_total, alloctrack_site_allocated_bytes_total
// and alloctrack_site_info. The handler writes the same series from
// cached text instead (see writeSites).
func (c *Collector) collectSites(ch chan<- prometheus.Metric, s alloctrack.Snapshot) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	m := prometheus.MustNewConstMetric
	type siteLabels struct{ class, frame string }
	sites := map[string]siteLabels{}
	for _, a := range s.Apps {
		ct := a.Counts
		if heapprofd(&a) {
			// Sampled: estimate families only, and no class series.
			for _, sc := range ct.Sites {
				if !sc.Heapprofd {
					continue
				}
				ch <- m(descSiteEstAllocs, counter, sc.Estimated.Allocations, a.Serial, a.Package, sc.ID)
				ch <- m(descSiteEstBytes, counter, sc.Estimated.Bytes, a.Serial, a.Package, sc.ID)
				sites[sc.ID] = siteLabels{sc.Class, frameLabel(sc.Frame)}
			}
			ch <- m(descSiteEstAllocs, counter, ct.SiteOtherEstimated.Allocations, a.Serial, a.Package, alloctrack.Other)
			ch <- m(descSiteEstBytes, counter, ct.SiteOtherEstimated.Bytes, a.Serial, a.Package, alloctrack.Other)
			continue
		}
		for _, cc := range ct.Classes {
			ch <- m(descClassAllocs, counter, float64(cc.Allocations), a.Serial, a.Package, cc.Class)
			ch <- m(descClassBytes, counter, float64(cc.Bytes), a.Serial, a.Package, cc.Class)
		}
		ch <- m(descClassAllocs, counter, float64(ct.ClassOther.Allocations), a.Serial, a.Package, alloctrack.Other)
		ch <- m(descClassBytes, counter, float64(ct.ClassOther.Bytes), a.Serial, a.Package, alloctrack.Other)
		for _, sc := range ct.Sites {
			if sc.Heapprofd {
				continue
			}
			ch <- m(descSiteAllocs, counter, float64(sc.Allocations), a.Serial, a.Package, sc.ID)
			ch <- m(descSiteBytes, counter, float64(sc.Bytes), a.Serial, a.Package, sc.ID)
			sites[sc.ID] = siteLabels{sc.Class, frameLabel(sc.Frame)}
		}
		ch <- m(descSiteAllocs, counter, float64(ct.SiteOther.Allocations), a.Serial, a.Package, alloctrack.Other)
		ch <- m(descSiteBytes, counter, float64(ct.SiteOther.Bytes), a.Serial, a.Package, alloctrack.Other)
	}
	if len(s.Apps) > 0 {
		// site="other" joins too, so a join keeps every app's remainder.
		sites[alloctrack.Other] = siteLabels{alloctrack.Other, alloctrack.Other}
	}
	for id, l := range sites {
		ch <- m(descSiteInfo, gauge, 1, id, l.class, l.frame)
	}
}

// frameLabel is the frame label of a site: "none" for an empty stack.
func frameLabel(f string) string {
	if f == "" {
		return "none"
	}
	return f
}

// heapprofd tells whether an app is watched through heapprofd (Android
// 12+): its counts are samples and estimates, exported in the sampled and
// estimated families, and it has none of the exact DDM ones (app totals,
// classes, site counts).
func heapprofd(a *alloctrack.AppSnapshot) bool {
	return a.Backend == alloctrack.BackendHeapprofd || a.Counts.Heapprofd
}

// TestOutcomes are the outcomes alloctrack_tests_total has a series for,
// on every app that ran tests.
var TestOutcomes = []pertest.Outcome{pertest.Passed, pertest.Failed, pertest.Errored, pertest.Ignored,
	pertest.AssumptionFailed, pertest.Crashed, pertest.Unfinished}

// maxTestLabel bounds the test name in alloctrack_test_info.
const maxTestLabel = 256

// collectTests sends an app's test families, once it ran tests: a few
// series per app, whatever the number of tests (no test name on a
// counter).
func collectTests(ch chan<- prometheus.Metric, a *alloctrack.AppSnapshot) {
	ts := &a.Tests
	if !ts.Seen {
		return
	}
	m := prometheus.MustNewConstMetric
	for _, o := range TestOutcomes {
		ch <- m(descTests, prometheus.CounterValue, float64(ts.Outcomes[string(o)]), a.Serial, a.Package, string(o))
	}
	allocs, bytes := descTestAllocs, descTestBytes
	if heapprofd(a) {
		allocs, bytes = descTestEstAllocs, descTestEstBytes
	}
	ch <- m(allocs, prometheus.CounterValue, float64(ts.Allocations), a.Serial, a.Package)
	ch <- m(bytes, prometheus.CounterValue, float64(ts.Bytes), a.Serial, a.Package)
	if c := ts.Current; c != nil {
		ch <- m(descTestInfo, prometheus.GaugeValue, 1, a.Serial, a.Package, labelValue(c.Name, maxTestLabel), labelValue(c.Class, maxTestLabel))
	}
}

// labelValue makes a device-supplied name a label value: valid UTF-8
// (client_golang refuses anything else), at most n bytes.
func labelValue(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
