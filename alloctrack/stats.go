package alloctrack

import (
	"maps"
	"sync"
	"time"
)

// App states, as the exporter shows them.
const (
	StateConnecting  = "connecting"
	StateTracking    = "tracking"
	StateUnsupported = "unsupported" // Android 12+: no answer to REAQ
	StateFiltered    = "filtered"    // excluded by --package
	StateBackoff     = "backoff"     // waiting to retry after an error
	StateHeld        = "held"        // another debugger holds the app
	StateWaiting     = "waiting"     // the app waits for a debugger; left free for it
)

// Error stages counted per app.
const (
	StageConnect = "connect" // opening jdwp:<pid> through adb
	StageHello   = "hello"   // handshake, HELO, app name
	StageProbe   = "probe"   // REAQ
	StageReport  = "report"  // REAL request and reply
	StageParse   = "parse"   // malformed report
	StageDisable = "disable" // REAE 0 on the way out
)

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

// AppStats is what one app's session reports about itself. It is safe for
// concurrent use; Snapshot copies it.
type AppStats struct {
	mu sync.Mutex
	s  AppStatus
}

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

// Backends an app can be watched with.
const (
	BackendDDM       = "ddm"       // the VM's allocation tracker over JDWP (Android 4.4 to 11)
	BackendHeapprofd = "heapprofd" // perfetto's heapprofd sampling the Java heap (Android 12+)
)

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

// NewAppStats returns stats for the app with pid on a device.
func NewAppStats(serial string, pid int) *AppStats {
	return &AppStats{s: AppStatus{Serial: serial, PID: pid, State: StateConnecting, Errors: map[string]uint64{}, RTT: NewHistogram(RTTBuckets), Answer: NewHistogram(RTTBuckets), Since: time.Now()}}
}

func (a *AppStats) update(f func(s *AppStatus)) {
	a.mu.Lock()
	f(&a.s)
	a.mu.Unlock()
}

// SetState records a state change.
func (a *AppStats) SetState(state string) {
	a.update(func(s *AppStatus) {
		if s.State != state {
			s.State, s.Since = state, time.Now()
		}
		s.Tracking = state == StateTracking
	})
}

// SetStateIf records a state change only while pid is still the app's
// newest process, so that a session of a newer process is not overruled.
func (a *AppStats) SetStateIf(pid int, state string) {
	a.update(func(s *AppStatus) {
		if s.PID == pid && s.State != state {
			s.State, s.Since = state, time.Now()
			s.Tracking = false
		}
	})
}

// CountError counts an error at a stage.
func (a *AppStats) CountError(stage string) {
	a.update(func(s *AppStatus) { s.Errors[stage]++ })
}

// Snapshot returns a copy.
func (a *AppStats) Snapshot() AppStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.s
	s.Errors = maps.Clone(a.s.Errors)
	s.RTT = a.s.RTT.clone()
	s.Answer = a.s.Answer.clone()
	return s
}
