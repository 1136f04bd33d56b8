// The snapshot: a consistent copy of what the daemon knows, the only thing
// the exporter and the web view read. Building it does no device I/O.

package alloctrack

import "time"

// Snapshot is a consistent copy of everything the daemon knows.
type Snapshot struct {
	Servers       []ServerStatus
	Devices       []DeviceStatus
	Apps          []AppSnapshot
	ReportBuffers BufferStatus
}

// ServerStatus describes an adb server.
type ServerStatus struct {
	Addr   string
	Up     bool
	Errors uint64
	// LastError is why the server was last found down (the error its
	// track-devices ended with); "" while it is up.
	LastError string
}

// DeviceStatus describes a device as the daemon sees it.
type DeviceStatus struct {
	Server, Serial, State string
	API                   int
	Model                 string // ro.product.model; "" until read
	// Facts is FactsUnknown while the device's facts are being read
	// (no backend runs then), FactsKnown once read, "" for a device
	// the daemon does not follow.
	Facts string
	// FactsError is the last error reading the facts, while unknown.
	FactsError string
	// Since is when State last changed (for a gone device: when it left).
	Since  time.Time
	Errors map[string]uint64 // by stage, before an app is named
	// OrphanedTrackers counts apps the package filters exclude whose
	// allocation tracker was found left on.
	OrphanedTrackers int
}

// AppSnapshot is one app's stats and counters.
type AppSnapshot struct {
	AppStatus
	Counts AppCounts
	// Tests is what the daemon saw of the app's instrumentation runs.
	Tests AppTests
}

// BufferStatus is the memory of the buffers reports are read into, in
// bytes: in use (reports being read or counted) and free (kept for the
// next windows).
type BufferStatus struct{ InUse, Free int64 }

// AppStatus is a copy of an app's stats.
type AppStatus struct {
	Serial, Package, AppName string
	PID                      int
	State                    string
	Tracking                 bool
	Window                   time.Duration // current window length
	Windows                  uint64        // windows whose report was counted
	Overflowed               uint64        // windows whose report was full
	ReportBytes              uint64        // bytes of reports received
	LastReportEntries        int
	Errors                   map[string]uint64 // by stage
	RTT                      Histogram         // REAL round trips, seconds
	Answer                   Histogram         // REAL request to the reply's first byte, seconds (the app's stall, at most)
	Since                    time.Time         // state since

	// Backend is how the app is watched: BackendDDM or BackendHeapprofd
	// ("" until decided).
	Backend string
	// Heapprofd is the state of the app's perfetto sessions (Backend
	// BackendHeapprofd only).
	Heapprofd HeapprofdStatus
}

// HeapprofdStatus counts what an app's heapprofd sessions delivered.
type HeapprofdStatus struct {
	SamplingInterval uint64 // bytes, as the last dump said
	Sessions         uint64 // perfetto sessions started
	Dumps            uint64 // dumps counted
	TraceBytes       uint64 // trace bytes read from the device
	Samples          uint64 // sampled allocations counted (exact: what the trace held)
	SampledBytes     uint64 // their bytes
	// Broken stacks (the Android 12/13 ART unwinding bug): samples and
	// bytes on stacks with heapprofd's ERROR frame or an unnamed
	// outermost frame.
	ErrorStackSamples, UnknownStackSamples uint64
}

// ClassCount and SiteCount are admitted series and their counts.
type (
	SiteCount struct {
		SiteInfo
		Count // exact allocations (DDM sites)
		// Heapprofd sites (SiteInfo.Heapprofd): the samples the traces held,
		// exactly, and the allocations estimated from them.
		Sampled   Count
		Estimated Estimate
	}
	// AppCounts is a consistent copy of one app's counters. Sites share
	// their SiteInfo (frames included) with the counters: do not modify.
	AppCounts struct {
		// Gen identifies the state of the counters: it changes whenever
		// Add runs and is never the same for two states of any two
		// Counters of the process (0: never added to).
		Gen        uint64
		Total      Count
		Classes    []ClassCount // admitted, by name
		ClassOther Count
		Sites      []SiteCount // admitted, by id
		SiteOther  Count
		// Windows are the totals of the last remembered windows, oldest
		// first; the last one's End is when the last report was counted.
		Windows []WindowTotal

		// Heapprofd is true once a heapprofd dump was counted (a sampled window).
		// Sampled is what the dumps held (samples and their bytes,
		// exact); Estimated the allocations and bytes estimated from
		// them. SiteOtherSampled and SiteOtherEstimated are the heapprofd
		// share of site "other". Total, classes and SiteOther hold exact
		// DDM counts only.
		Heapprofd          bool
		Sampled            Count
		Estimated          Estimate
		SiteOtherSampled   Count
		SiteOtherEstimated Estimate
	}
)

// ClassCount is a class and its count.
type ClassCount struct {
	Class string
	Count
}

// WindowTotal is what one counted window held.
type WindowTotal struct {
	Start, End time.Time
	Count      // exact (DDM reports)
	// Heapprofd dumps: samples (exact) and the estimate from them.
	Sampled   Count
	Estimated Estimate
}

// Recent is an app's counts over its last windows.
type Recent struct {
	Windows    []WindowTotal // oldest first
	Total      Count
	Classes    []ClassCount // classes with a series, by name
	ClassOther Count
	Sites      []SiteCount // sites with a series, by id
	SiteOther  Count
	// Heapprofd dumps: as the AppCounts fields of the same names.
	Sampled            Count
	Estimated          Estimate
	SiteOtherSampled   Count
	SiteOtherEstimated Estimate
}

// Span is the time the windows cover, from the first start to the last end.
func (r Recent) Span() time.Duration {
	if len(r.Windows) == 0 {
		return 0
	}
	return r.Windows[len(r.Windows)-1].End.Sub(r.Windows[0].Start)
}

// Histogram is a cumulative bucketed histogram, kept here so that this
// package needs no metrics library; the exporter turns it into a metric.
type Histogram struct {
	Bounds []float64 // upper bounds, ascending; +Inf is implied
	Counts []uint64  // cumulative count per bound
	Count  uint64
	Sum    float64
}

// NewHistogram returns an empty histogram with the given upper bounds.
func NewHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds))}
}

// Observe adds v.
func (h *Histogram) Observe(v float64) {
	for i, b := range h.Bounds {
		if v <= b {
			h.Counts[i]++
		}
	}
	h.Count++
	h.Sum += v
}

func (h Histogram) clone() Histogram {
	h.Counts = append([]uint64(nil), h.Counts...)
	return h
}

// RTTBuckets are the REAL round-trip buckets, in seconds.
var RTTBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// AppTests is what the daemon saw of an app's instrumentation runs
// (docs/test-runs.md, "In the daemon"): the tests its processes ran, by
// the runner's logcat lines and the listener's own records in the
// app's DDM reports.
type AppTests struct {
	// Seen: a process of the app logged a runner line, or its report
	// held the runner's listener.
	Seen bool
	// Recent are the last finished tests, oldest first (--tests.recent
	// at most); the figures of a test of a running process may still
	// grow until the report holding its end is read.
	Recent []TestSummary
	// Current is the test running now (nil: none).
	Current *TestSummary
	// Runs is how many runs of the app are under way: processes that
	// ran tests and have not ended (their figures may still change).
	Runs int
	// Outcomes counts the finished tests by outcome since the daemon
	// started (pertest's outcome names).
	Outcomes map[string]uint64
	// Allocations and Bytes are what was counted inside tests (every
	// test, the running one included) since the daemon started.
	Allocations, Bytes uint64
}

// TestSummary is one test as the daemon keeps it: its figures without the
// tally of every class and site.
type TestSummary struct {
	Name, Class, Method string
	Outcome             string
	PID                 int
	// Duration is from the test's started: line to its end, by device
	// time (0: not known).
	Duration           time.Duration
	Allocations, Bytes uint64
	// Estimated: heapprofd estimates, not exact counts.
	Estimated bool
	// Partial: the figures miss part of the test; Notes say why.
	Partial bool
	Notes   []string
	// Failure is the first line of a failure's text, cut to 1 KiB.
	Failure string
	// TopClasses are the test's classes by bytes (a few).
	TopClasses []ClassCount
	// BoundaryError is how far either boundary may be from the test's
	// own (0: exact, DDM).
	BoundaryError time.Duration
}

// StageLogcat counts, per device, times the logcat stream of the test
// runner's lines failed or ended (it is started again with backoff).
const StageLogcat = "logcat"
