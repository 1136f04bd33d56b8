package supervisor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/jdwp"
)

// DeviceState is one line of an adb server's device list.
type DeviceState struct {
	Serial string
	State  string // "device" when online; "offline", "unauthorized", …
}

// Source is an adb server as the daemon uses it. internal/source adapts
// *adb.Client to it; this package knows nothing of adb itself.
type Source interface {
	Addr() string
	TrackDevices(ctx context.Context, fn func([]DeviceState)) error
	TrackJDWP(ctx context.Context, serial string, fn func([]int)) error
	OpenJDWP(ctx context.Context, serial string, pid int) (net.Conn, error)
	Prop(ctx context.Context, serial, name string) (string, error)
	// ProcessName names a process from the device's process list (its
	// argv[0]), for one whose VM cannot be asked: another debugger holds
	// its JDWP stream. api is the device's API level (0: unknown), which
	// decides how the list is read.
	ProcessName(ctx context.Context, serial string, pid, api int) (string, error)
	// Exec runs a command on a device through shell protocol v2: stdin
	// is its input; its output, errors and exit status come back apart.
	Exec(ctx context.Context, serial string, stdin []byte, argv ...string) (stdout, stderr []byte, code int, err error)
	// Processes lists a device's processes (pid and argv[0]).
	Processes(ctx context.Context, serial string, api int) ([]Process, error)
	// TrackApp follows a device's debuggable or profileable processes
	// (adbd's track-app, Android 12+), calling fn with each list; a
	// device without the service gives ErrTrackAppUnsupported.
	TrackApp(ctx context.Context, serial string, fn func([]AppProcess)) error
}

// AppProcess is one process of a device's track-app list. Name and
// WaitingForDebugger come from Android 15's adbd on; older ones leave
// them zero.
type AppProcess struct {
	PID                int
	Debuggable         bool
	Profileable        bool
	Name               string
	WaitingForDebugger bool
}

// Process is one line of a device's process list.
type Process struct {
	PID  int
	Name string
}

// Filter selects names by anchored regular expressions: a name passes when
// it matches some Include (or there are none) and no Exclude.
type Filter struct {
	Include, Exclude []*regexp.Regexp
}

// NewFilter compiles include and exclude patterns; each must match the
// whole name.
func NewFilter(include, exclude []string) (Filter, error) {
	var f Filter
	for _, p := range include {
		re, err := regexp.Compile("^(?:" + p + ")$")
		if err != nil {
			return f, fmt.Errorf("pattern %q: %w", p, err)
		}
		f.Include = append(f.Include, re)
	}
	for _, p := range exclude {
		re, err := regexp.Compile("^(?:" + p + ")$")
		if err != nil {
			return f, fmt.Errorf("pattern %q: %w", p, err)
		}
		f.Exclude = append(f.Exclude, re)
	}
	return f, nil
}

// Match tells whether name passes the filter.
func (f Filter) Match(name string) bool {
	if len(f.Include) > 0 && !slices.ContainsFunc(f.Include, func(re *regexp.Regexp) bool { return re.MatchString(name) }) {
		return false
	}
	return !slices.ContainsFunc(f.Exclude, func(re *regexp.Regexp) bool { return re.MatchString(name) })
}

// DaemonConfig configures a Daemon.
type DaemonConfig struct {
	Serials, Packages Filter
	Session           ddm.Config
	Aggregate         alloctrack.AggregateConfig
	ReportsPerDevice  int // concurrent REAL transfers per device (default 2)
	// ReportsInFlight bounds the reports being read at once across all
	// devices (default 8): each holds a whole report in memory, up to
	// about 9 MB, so this bounds the memory reports take. A VM building
	// its report takes no turn.
	ReportsInFlight int
	// ReportBuffers is how many free report buffers are kept for the
	// next windows of any app (default ReportsInFlight + 4: the reports
	// being read, and 4 read and still being counted): reports are read
	// into reused buffers rather than new ones each window. Fewer means
	// that after every burst of concurrent reads some buffers are
	// dropped and, next window, made again (at 64 saturated apps, page
	// faults and zeroing that cost a noticeable part of the daemon's CPU).
	ReportBuffers int
	// ReportBufferIdle is how long a free report buffer (and a free
	// entry array) is kept unused before it is dropped (default two
	// windows: one used once a window, as a steady load uses them, is
	// kept even when its report comes a little late): after a burst,
	// such as every app reporting at once when an adb server restarts,
	// the daemon goes back to holding what the steady load uses.
	ReportBufferIdle time.Duration
	BackoffMin       time.Duration // first retry delay (default 1 s)
	BackoffMax       time.Duration // retry delay cap (default 1 min)
	Reprobe          time.Duration // re-probe of an unsupported app (default 30 min)
	// HeldRetry is how long a session waits on its connection to an app
	// another debugger holds, on Android 9+ where the VM leaves it unread
	// and takes it once the holder leaves (default 5 min; each new try
	// would queue one more connection in the VM). Session.HeldWait takes
	// it unless set.
	HeldRetry time.Duration
	// TurnOffOrphans turns tracking off in apps the package filters
	// exclude when it was left on (nobody reads it, and it slows the app).
	TurnOffOrphans bool
	// WaitingRetry is how long an app waiting for a debugger is left
	// alone before it is tried again (default 1 min).
	WaitingRetry time.Duration
	LogEvery     time.Duration // identical errors are logged at most this often (default 1 min)
	// Backend picks how apps are watched: BackendDDM (default) for
	// every app; BackendHeapprofd for every app; BackendAuto for DDM
	// below API 31 and heapprofd from API 31 (Android 12) on.
	Backend   string
	Heapprofd heapprofd.Config
	// Retention is how long a device gone from its adb server, or an app
	// exited or disconnected, is kept before it is forgotten with its
	// counters, errors and series (default 1 h).
	Retention time.Duration
	// MaxGone bounds the gone devices kept within the retention (default
	// 64): past it the longest gone are forgotten at once, so that
	// serials which change on every reconnect cannot grow the daemon
	// however fast they come. Each keeps its apps' series (up to some
	// 300 per app with the default top flags).
	MaxGone int
	// Tests says how instrumentation runs are followed (tests.go).
	Tests TestsConfig
}

// backendFor returns the backend the daemon uses on a device at api
// (0: unknown).
func (c *DaemonConfig) backendFor(api int) string {
	switch c.Backend {
	case alloctrack.BackendHeapprofd:
		return alloctrack.BackendHeapprofd
	case alloctrack.BackendAuto:
		if api >= alloctrack.APIHeapprofd {
			return alloctrack.BackendHeapprofd
		}
	}
	return alloctrack.BackendDDM
}

func (c *DaemonConfig) fill() {
	if c.ReportsPerDevice <= 0 {
		c.ReportsPerDevice = 2
	}
	if c.ReportsInFlight <= 0 {
		c.ReportsInFlight = 8
	}
	if c.ReportBuffers <= 0 {
		c.ReportBuffers = c.ReportsInFlight + 4
	}
	if c.ReportBufferIdle <= 0 {
		sc := c.Session
		sc.Fill()
		c.ReportBufferIdle = 2 * sc.Window
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = time.Second
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(time.Minute, c.BackoffMin)
	}
	if c.Reprobe <= 0 {
		c.Reprobe = 30 * time.Minute
	}
	if c.HeldRetry <= 0 {
		c.HeldRetry = 5 * time.Minute
	}
	if c.WaitingRetry <= 0 {
		c.WaitingRetry = time.Minute
	}
	if c.Retention <= 0 {
		c.Retention = time.Hour
	}
	if c.MaxGone <= 0 {
		c.MaxGone = 64
	}
	if c.LogEvery <= 0 {
		c.LogEvery = time.Minute
	}
	if c.Session.HeldWait <= 0 {
		c.Session.HeldWait = c.HeldRetry
	}
	c.Session.Fill()
	c.Tests.fill()
	c.Aggregate.Fill()
	c.Heapprofd.Fill(c.Session.Window)
}

type appKey struct{ serial, app string }

type appEntry struct {
	counters *alloctrack.Counters
	stats    *alloctrack.AppStats
	tests    *appTests
	bound    time.Time // last handed out by bind: a session may be starting with it
}

type deviceEntry struct {
	server, serial, state string
	since                 time.Time // state last changed
	api                   int
	model                 string
	facts, factsErr       string                  // alloctrack.Facts…, and the last read's error while unknown
	cancel                context.CancelCauseFunc // nil when not followed
	done                  chan struct{}
}

type serverEntry struct {
	up      bool
	errors  uint64
	lastErr string // why it was last found down; "" while up
}

// Daemon follows devices and debuggable apps on adb servers and runs a
// Session for each process that passes the filters.
type Daemon struct {
	cfg     DaemonConfig
	sources []Source
	log     *zap.Logger
	logs    *rateLog
	buffers *jdwp.Buffers
	allocs  *ddm.AllocArrays

	mu      sync.Mutex
	servers map[string]*serverEntry
	devices map[string]*deviceEntry // by server + "/" + serial
	apps    map[appKey]*appEntry
	devErrs map[string]map[string]uint64 // serial -> stage -> count, before an app is named
	orphans map[string]map[int]string    // serial -> pid -> app: filtered apps whose tracker was left on
	ready   atomic.Bool
	// newAttributor makes the attributor of one process's run (tests
	// of the wiring replace it).
	newAttributor func(pertest.Config) attributor
}

// NewDaemon returns a daemon over the given adb servers.
func NewDaemon(cfg DaemonConfig, sources []Source, log *zap.Logger) *Daemon {
	cfg.fill()
	if log == nil {
		log = zap.NewNop()
	}
	buffers := jdwp.NewBuffers(cfg.ReportBuffers, cfg.ReportsInFlight)
	buffers.SetIdle(cfg.ReportBufferIdle)
	return &Daemon{
		cfg: cfg, sources: sources, log: log,
		logs:          newRateLog(cfg.LogEvery),
		buffers:       buffers,
		allocs:        ddm.NewAllocArrays(cfg.ReportBuffers, cfg.ReportBufferIdle),
		servers:       map[string]*serverEntry{},
		devices:       map[string]*deviceEntry{},
		apps:          map[appKey]*appEntry{},
		devErrs:       map[string]map[string]uint64{},
		orphans:       map[string]map[int]string{},
		newAttributor: newAttributor,
	}
}

// Ready tells whether every adb server has answered at least once.
func (d *Daemon) Ready() bool { return d.ready.Load() }

// Run follows every server until ctx ends, then waits for every session
// to disable tracking and end.
func (d *Daemon) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, src := range d.sources {
		d.mu.Lock()
		d.servers[src.Addr()] = &serverEntry{}
		d.mu.Unlock()
		wg.Go(func() { d.runServer(ctx, src) })
	}
	wg.Go(func() { d.forgetting(ctx) })
	wg.Wait()
	return nil
}

func (d *Daemon) backoff(attempt int) time.Duration {
	b := d.cfg.BackoffMin << min(attempt, 16)
	if b > d.cfg.BackoffMax || b <= 0 {
		b = d.cfg.BackoffMax
	}
	// Full jitter over the upper half.
	return b/2 + time.Duration(rand.Int64N(int64(b/2)+1))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (d *Daemon) runServer(ctx context.Context, src Source) {
	addr := src.Addr()
	log := d.log.With(zap.String("adb_server", addr))
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := src.TrackDevices(ctx, func(list []DeviceState) {
			attempt = 0
			d.mu.Lock()
			d.servers[addr].up, d.servers[addr].lastErr = true, ""
			d.mu.Unlock()
			d.updateReady()
			d.onDevices(ctx, src, list, log)
		})
		if ctx.Err() != nil {
			break
		}
		d.mu.Lock()
		d.servers[addr].up = false
		d.servers[addr].errors++
		d.servers[addr].lastErr = "track-devices ended"
		if err != nil {
			d.servers[addr].lastErr = err.Error()
		}
		d.mu.Unlock()
		d.logs.warn(log, "adb/"+addr, "adb server unreachable or track-devices ended; retrying", err)
		// The server is gone: its devices and their streams with it.
		d.onDevices(ctx, src, nil, log)
		if !sleepCtx(ctx, d.backoff(attempt)) {
			break
		}
	}
	d.onDevices(ctx, src, nil, zap.NewNop()) // shutting down: no device is gone
	d.waitDevices(addr)
}

func (d *Daemon) updateReady() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.servers {
		if !s.up {
			return
		}
	}
	d.ready.Store(true)
}

// onDevices reconciles the followed devices of one server with a list.
func (d *Daemon) onDevices(ctx context.Context, src Source, list []DeviceState, log *zap.Logger) {
	addr := src.Addr()
	seen := map[string]bool{}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ds := range list {
		key := addr + "/" + ds.Serial
		seen[key] = true
		e := d.devices[key]
		if e == nil {
			e = &deviceEntry{server: addr, serial: ds.Serial}
			d.devices[key] = e
		}
		if e.state != ds.State {
			log.Info("device state", zap.String("serial", ds.Serial), zap.String("state", ds.State))
			e.since = time.Now()
		}
		e.state = ds.State
		follow := ds.State == "device" && d.cfg.Serials.Match(ds.Serial)
		switch {
		case follow && e.cancel == nil:
			d.followLocked(ctx, src, e, log)
		case !follow && e.cancel != nil:
			e.cancel(errDeviceGone)
			e.cancel = nil
		}
	}
	for key, e := range d.devices {
		if e.server == addr && !seen[key] {
			if e.cancel != nil {
				e.cancel(errDeviceGone)
				e.cancel = nil
			}
			if e.state != "gone" {
				log.Info("device gone", zap.String("serial", e.serial), zap.Duration("forgotten_after", d.cfg.Retention))
				e.since = time.Now()
			}
			e.state = "gone"
		}
	}
	d.trimGoneLocked()
}

// followLocked starts a follower of device e (d.mu held), once the last
// one has let go of the device's apps.
func (d *Daemon) followLocked(ctx context.Context, src Source, e *deviceEntry, log *zap.Logger) {
	dctx, cancel := context.WithCancelCause(ctx)
	prev, done := e.done, make(chan struct{})
	e.cancel, e.done = cancel, done
	go func() {
		defer func() {
			close(done)
			d.mu.Lock()
			d.trimGoneLocked() // the device may now be forgotten
			d.mu.Unlock()
		}()
		if prev != nil {
			<-prev // the last follower of this device has let go of its apps
		}
		d.runDevice(dctx, src, e, log.With(zap.String("serial", e.serial)))
	}()
}

func (d *Daemon) waitDevices(addr string) {
	d.mu.Lock()
	var dones []chan struct{}
	for _, e := range d.devices {
		if e.server == addr && e.done != nil {
			dones = append(dones, e.done)
		}
	}
	d.mu.Unlock()
	for _, ch := range dones {
		<-ch
	}
}

// Why a process's sessions end, as context causes.
var (
	errPIDGone    = errors.New("the process left the device's JDWP list")
	errDeviceGone = errors.New("the device is gone or no longer followed")
	errWaiting    = errors.New("the process waits for a debugger")
)

type pidRun struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func (d *Daemon) runDevice(ctx context.Context, src Source, e *deviceEntry, log *zap.Logger) {
	defer d.forgetDeviceLogs(e)
	f, ok := d.readFacts(ctx, src, e, log)
	if !ok {
		return // the device left, or the daemon stops, before its facts were read
	}
	if d.cfg.backendFor(f.api) == alloctrack.BackendHeapprofd {
		d.runHeapprofdDevice(ctx, src, e.serial, f.api, log)
		return
	}
	d.runDDMDevice(ctx, src, e, f.api, f.reportCap, log)
}

func (d *Daemon) countDeviceError(serial, stage string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.devErrs[serial]
	if m == nil {
		m = map[string]uint64{}
		d.devErrs[serial] = m
	}
	m[stage]++
}

// bind returns the shared counters and stats of an app on a device.
func (d *Daemon) bind(serial, app string) (*alloctrack.Counters, *alloctrack.AppStats) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := appKey{serial, app}
	e := d.apps[k]
	if e == nil {
		e = &appEntry{counters: alloctrack.NewCounters(d.cfg.Aggregate), stats: alloctrack.NewAppStats(serial, 0), tests: newAppTests(d.cfg.Tests.Recent)}
		e.stats.Update(func(s *alloctrack.AppStatus) { s.Package, s.AppName = app, app })
		d.apps[k] = e
	}
	e.bound = time.Now()
	return e.counters, e.stats
}

// testsOf returns the tests kept for an app on a device (nil: the app is
// forgotten).
func (d *Daemon) testsOf(serial, app string) *appTests {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.apps[appKey{serial, app}]; e != nil {
		return e.tests
	}
	return nil
}

// Snapshot copies the daemon's state for the exporter; it does no I/O.
func (d *Daemon) Snapshot() alloctrack.Snapshot {
	d.mu.Lock()
	var s alloctrack.Snapshot
	for addr, e := range d.servers {
		s.Servers = append(s.Servers, alloctrack.ServerStatus{Addr: addr, Up: e.up, Errors: e.errors, LastError: e.lastErr})
	}
	for _, e := range d.devices {
		ds := alloctrack.DeviceStatus{Server: e.server, Serial: e.serial, State: e.state, Since: e.since, API: e.api, Model: e.model,
			Facts: e.facts, FactsError: e.factsErr, Errors: map[string]uint64{}, OrphanedTrackers: len(d.orphans[e.serial])}
		for k, v := range d.devErrs[e.serial] {
			ds.Errors[k] = v
		}
		s.Devices = append(s.Devices, ds)
	}
	apps := make([]*appEntry, 0, len(d.apps))
	for _, e := range d.apps {
		apps = append(apps, e)
	}
	d.mu.Unlock()
	for _, e := range apps {
		s.Apps = append(s.Apps, alloctrack.AppSnapshot{AppStatus: e.stats.Snapshot(), Counts: e.counters.Snapshot(), Tests: e.tests.snapshot()})
	}
	s.ReportBuffers.InUse, s.ReportBuffers.Free = d.buffers.Bytes()
	slices.SortFunc(s.Servers, func(a, b alloctrack.ServerStatus) int { return strings.Compare(a.Addr, b.Addr) })
	slices.SortFunc(s.Devices, func(a, b alloctrack.DeviceStatus) int {
		return strings.Compare(a.Server+"/"+a.Serial, b.Server+"/"+b.Serial)
	})
	slices.SortFunc(s.Apps, func(a, b alloctrack.AppSnapshot) int {
		return strings.Compare(a.Serial+"/"+a.Package, b.Serial+"/"+b.Package)
	})
	return s
}

// rateLog logs identical warnings at most once per interval per key,
// saying how many were suppressed.
type rateLog struct {
	every time.Duration
	mu    sync.Mutex
	seen  map[string]*rateEntry
}

type rateEntry struct {
	last       time.Time
	msg        string
	suppressed int
}

func newRateLog(every time.Duration) *rateLog {
	return &rateLog{every: every, seen: map[string]*rateEntry{}}
}

func (r *rateLog) warn(log *zap.Logger, key, msg string, err error) {
	text := msg + ": " + fmt.Sprint(err)
	now := time.Now()
	r.mu.Lock()
	e := r.seen[key]
	if e != nil && e.msg == text && now.Sub(e.last) < r.every {
		e.suppressed++
		r.mu.Unlock()
		return
	}
	n := 0
	if e != nil && e.msg == text {
		n = e.suppressed
	}
	r.seen[key] = &rateEntry{last: now, msg: text}
	r.mu.Unlock()
	fields := []zap.Field{zap.Error(err)}
	if n > 0 {
		fields = append(fields, zap.Int("repeated", n))
	}
	log.Warn(msg, fields...)
}

// prune drops entries older than the interval with nothing suppressed:
// keys that will not come again (a gone device's) are not kept.
func (r *rateLog) prune(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, e := range r.seen {
		if e.suppressed == 0 && now.Sub(e.last) >= r.every {
			delete(r.seen, k)
		}
	}
}

func (r *rateLog) forget(key string) {
	r.mu.Lock()
	delete(r.seen, key)
	r.mu.Unlock()
}

// Lists tells whether the daemon still lists an app (it has not
// forgotten it). It does no I/O.
func (d *Daemon) Lists(serial, app string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.apps[appKey{serial, app}] != nil
}

// Recent returns the counts of an app's last n windows (n <= 0: every
// remembered window); ok is false for an app the daemon does not know.
// It does no I/O.
func (d *Daemon) Recent(serial, app string, n int) (r alloctrack.Recent, ok bool) {
	d.mu.Lock()
	e := d.apps[appKey{serial, app}]
	d.mu.Unlock()
	if e == nil {
		return alloctrack.Recent{}, false
	}
	return e.counters.Recent(n), true
}
