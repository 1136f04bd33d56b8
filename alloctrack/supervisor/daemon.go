package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"

	"github.com/alloctrack/alloctrack/ddms/allocreport"

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
	if c.LogEvery <= 0 {
		c.LogEvery = time.Minute
	}
	if c.Session.HeldWait <= 0 {
		c.Session.HeldWait = c.HeldRetry
	}
	c.Session.Fill()
	c.Aggregate.Fill()
	c.Heapprofd.Fill(c.Session.Window)
}

type appKey struct{ serial, app string }

type appEntry struct {
	counters *alloctrack.Counters
	stats    *alloctrack.AppStats
}

type deviceEntry struct {
	server, serial, state string
	api                   int
	model                 string
	cancel                context.CancelCauseFunc // nil when not followed
	done                  chan struct{}
}

type serverEntry struct {
	up     bool
	errors uint64
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
		logs:    newRateLog(cfg.LogEvery),
		buffers: buffers,
		allocs:  ddm.NewAllocArrays(cfg.ReportBuffers, cfg.ReportBufferIdle),
		servers: map[string]*serverEntry{},
		devices: map[string]*deviceEntry{},
		apps:    map[appKey]*appEntry{},
		devErrs: map[string]map[string]uint64{},
		orphans: map[string]map[int]string{},
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
			d.servers[addr].up = true
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
		}
		e.state = ds.State
		follow := ds.State == "device" && d.cfg.Serials.Match(ds.Serial)
		switch {
		case follow && e.cancel == nil:
			dctx, cancel := context.WithCancelCause(ctx)
			prev, done := e.done, make(chan struct{})
			e.cancel, e.done = cancel, done
			go func() {
				defer close(done)
				if prev != nil {
					<-prev // the last follower of this device has let go of its apps
				}
				d.runDevice(dctx, src, e, log.With(zap.String("serial", e.serial)))
			}()
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
				log.Info("device gone", zap.String("serial", e.serial))
			}
			e.state = "gone"
		}
	}
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

// jdwpListMayBeCut tells whether a track-jdwp update may have been cut:
// adbd builds each update after the first in a 1,024-byte buffer, 4 bytes
// of it for the length, and leaves out every pid line that no longer fits
// (adb/jdwp_service.c in 4.4, daemon/jdwp_service.cpp in 10 and 11): a list
// within a line (at most 8 bytes) of 1,020 may miss pids.
func jdwpListMayBeCut(pids []int) bool {
	n := 0
	for _, p := range pids {
		n += len(strconv.Itoa(p)) + 1
	}
	return n > 1020-8
}

type pidRun struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func (d *Daemon) runDevice(ctx context.Context, src Source, e *deviceEntry, log *zap.Logger) {
	pctx, cancel := context.WithTimeout(ctx, d.cfg.Session.RequestTimeout)
	if v, err := src.Prop(pctx, e.serial, "ro.build.version.sdk"); err == nil {
		if api, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			d.mu.Lock()
			e.api = api
			d.mu.Unlock()
		}
	}
	if v, err := src.Prop(pctx, e.serial, "ro.product.model"); err == nil {
		d.mu.Lock()
		e.model = strings.TrimSpace(v)
		d.mu.Unlock()
	}
	d.mu.Lock()
	api0 := e.api
	d.mu.Unlock()
	reportCap := 0
	if api0 >= 24 && api0 <= 28 {
		reportCap = d.reportCap(pctx, src, e.serial)
	}
	cancel()

	d.mu.Lock()
	api := e.api
	d.mu.Unlock()
	if d.cfg.backendFor(api) == alloctrack.BackendHeapprofd {
		d.runHeapprofdDevice(ctx, src, e.serial, api, log)
		return
	}
	slots := make(chan struct{}, d.cfg.ReportsPerDevice)
	runs := map[int]*pidRun{}
	var mu sync.Mutex
	var jdwpPIDs []int
	waiting := map[int]string{} // pid -> name: waiting for a debugger, by track-app (Android 15+)
	// On Android 12+ no process is connected to before track-app has
	// answered (with its list, or by not being there).
	appsKnown := api < alloctrack.APIHeapprofd
	reconcile := func() {
		if !appsKnown {
			return
		}
		alive := map[int]bool{}
		for _, pid := range jdwpPIDs {
			alive[pid] = true
		}
		for pid := range alive {
			if name, ok := waiting[pid]; ok {
				// Left free for the debugger it waits for, without a
				// connection at all.
				if r := runs[pid]; r != nil {
					r.cancel(errWaiting)
					delete(runs, pid)
				}
				if name != "" && d.cfg.Packages.Match(name) {
					_, st := d.bind(e.serial, name)
					st.Update(func(s *alloctrack.AppStatus) { s.PID = pid })
					st.SetState(alloctrack.StateWaiting)
				}
				continue
			}
			if runs[pid] == nil {
				rctx, cancel := context.WithCancelCause(ctx)
				r := &pidRun{cancel: cancel, done: make(chan struct{})}
				runs[pid] = r
				go func() {
					defer close(r.done)
					d.runPID(rctx, src, e.serial, api, reportCap, pid, slots, log.With(zap.Int("pid", pid)))
				}()
			}
		}
		for pid, r := range runs {
			if !alive[pid] {
				r.cancel(errPIDGone)
				delete(runs, pid)
			}
		}
	}
	var tracking sync.WaitGroup
	if api >= alloctrack.APIHeapprofd {
		// Android 15's adbd says in track-app which processes wait for a
		// debugger (and names them); older ones list no such flag.
		tracking.Add(1)
		go func() {
			defer tracking.Done()
			err := src.TrackApp(ctx, e.serial, func(list []AppProcess) {
				mu.Lock()
				defer mu.Unlock()
				if ctx.Err() != nil {
					return // the device's runs are being stopped
				}
				appsKnown = true
				clear(waiting)
				for _, a := range list {
					if a.WaitingForDebugger {
						waiting[a.PID] = a.Name
					}
				}
				reconcile()
			})
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, alloctrack.ErrTrackAppUnsupported) {
				log.Debug("track-app ended; apps waiting for a debugger are found by their WAIT", zap.Error(err))
			}
			mu.Lock()
			defer mu.Unlock()
			appsKnown = true
			reconcile()
		}()
	}
	defer tracking.Wait()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		tctx, tcancel := context.WithCancel(ctx)
		first, reopen := true, false
		err := src.TrackJDWP(tctx, e.serial, func(pids []int) {
			attempt = 0
			if reopen {
				return
			}
			if !first && jdwpListMayBeCut(pids) {
				// adbd cuts later lists at 1,024 bytes; the first list of
				// a new stream is whole.
				reopen = true
				tcancel()
				return
			}
			first = false
			mu.Lock()
			defer mu.Unlock()
			jdwpPIDs = pids
			reconcile()
		})
		tcancel()
		if ctx.Err() != nil {
			break
		}
		if reopen {
			log.Debug("track-jdwp update may be cut at 1,024 bytes; reopening it for a whole list", zap.Int("device_pids", len(jdwpPIDs)))
			attempt = -1
			continue
		}
		d.countDeviceError(e.serial, "track-jdwp")
		d.logs.warn(log, "track-jdwp/"+e.server+"/"+e.serial, "track-jdwp ended; retrying", err)
		if !sleepCtx(ctx, d.backoff(attempt)) {
			break
		}
	}
	mu.Lock()
	var dones []chan struct{}
	for pid, r := range runs {
		r.cancel(context.Cause(ctx))
		dones = append(dones, r.done)
		delete(runs, pid)
	}
	mu.Unlock()
	for _, ch := range dones {
		<-ch
	}
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
		e = &appEntry{counters: alloctrack.NewCounters(d.cfg.Aggregate), stats: alloctrack.NewAppStats(serial, 0)}
		e.stats.Update(func(s *alloctrack.AppStatus) { s.Package, s.AppName = app, app })
		d.apps[k] = e
	}
	return e.counters, e.stats
}

// runPID runs sessions for one process until ctx ends (the pid is gone,
// the device left, or the daemon stops).
//
// A process whose handshake is refused because another debugger holds it
// cannot say its name, so the device's process list names it instead: it
// is then shown as held, under that name, and tracked once the debugger
// lets go.
func (d *Daemon) runPID(ctx context.Context, src Source, serial string, api, reportCap, pid int, slots chan struct{}, log *zap.Logger) {
	var stats *alloctrack.AppStats
	var heldStats *alloctrack.AppStats // stats of the name the process list gave
	unanswered := 0                    // sessions in a row whose REAQ went unanswered
	key := fmt.Sprintf("%s/%s/%d", src.Addr(), serial, pid)
	// markHeld shows the process held: named from the process list if
	// no session named it yet. It reports whether that name is excluded.
	markHeld := func() (excluded bool) {
		if stats == nil {
			name, nerr := d.nameHeld(ctx, src, serial, api, pid)
			switch {
			case nerr != nil:
				d.countDeviceError(serial, alloctrack.StageHello)
				d.logs.warn(log, key, "another debugger holds the app, and the device's process list does not name it; retrying", nerr)
			case !d.cfg.Packages.Match(name):
				log.Debug("app held by another debugger excluded by the package filter", zap.String("package", name))
				return true
			default:
				_, st := d.bind(serial, name)
				st.Update(func(s *alloctrack.AppStatus) { s.PID = pid })
				stats, heldStats = st, st
				log.Info("another debugger holds the app; named from the device's process list", zap.String("package", name))
			}
		}
		if stats != nil {
			stats.SetState(alloctrack.StateHeld)
		}
		return false
	}
	defer d.logs.forget(key)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		s := &ddm.Session{
			Serial: serial, PID: pid, API: api, UnansweredProbes: unanswered, ReportCap: reportCap,
			OnHeld: func() {
				markHeld()
				log.Debug("the VM leaves our handshake unread: another debugger holds it; waiting on the connection", zap.Duration("for", d.cfg.HeldRetry))
			},
			CheckFiltered: true, TurnOffOrphan: d.cfg.TurnOffOrphans,
			Open: func(ctx context.Context) (io.ReadWriteCloser, error) {
				return src.OpenJDWP(ctx, serial, pid)
			},
			Accept: d.cfg.Packages.Match,
			Bind: func(app string) (*alloctrack.Counters, *alloctrack.AppStats) {
				c, st := d.bind(serial, app)
				if heldStats != nil && heldStats != st {
					// The VM calls itself otherwise than the process
					// list did: that name no longer runs here.
					heldStats.SetStateIf(pid, alloctrack.StateExited)
				}
				heldStats = nil
				stats = st
				return c, st
			},
			Config:  d.cfg.Session,
			Slots:   slots,
			Buffers: d.buffers,
			Allocs:  d.allocs,
			Log:     log,
		}
		began := time.Now()
		err := s.Run(ctx)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, alloctrack.ErrProbeUnanswered) {
			unanswered++
		} else if stats != nil && stats.Snapshot().Windows > 0 {
			unanswered = 0
		}
		if time.Since(began) > 2*d.cfg.BackoffMax {
			attempt = 0 // it ran well for a while
		}
		wait := d.backoff(attempt)
		switch {
		case errors.Is(err, alloctrack.ErrFiltered):
			var fe *ddm.FilteredError
			switch {
			case errors.As(err, &fe) && fe.Stopped:
				log.Info("an app the package filters exclude had its allocation tracker left on (by an earlier, wider run?); turned it off", zap.String("package", fe.App))
			case errors.As(err, &fe) && fe.TrackingOn:
				log.Warn("an app the package filters exclude has its allocation tracker left on (by an earlier, wider run?), slowing it; --orphans.turn-off would turn it off", zap.String("package", fe.App))
				d.setOrphan(serial, pid, fe.App)
				defer d.setOrphan(serial, pid, "")
			default:
				log.Debug("app excluded by the package filter")
			}
			<-ctx.Done()
			return
		case errors.Is(err, alloctrack.ErrUnsupported):
			log.Info("allocation tracking not supported (no REAQ reply; Android 12+); re-probing later", zap.Duration("reprobe", d.cfg.Reprobe))
			wait = d.cfg.Reprobe
		case errors.Is(err, alloctrack.ErrWaiting):
			// Left free for the debugger it waits for; named from the
			// process list if the session had no name yet.
			if stats == nil {
				if name, nerr := d.nameHeld(ctx, src, serial, api, pid); nerr == nil && d.cfg.Packages.Match(name) {
					_, st := d.bind(serial, name)
					st.Update(func(s *alloctrack.AppStatus) { s.PID = pid })
					stats, heldStats = st, st
				}
			}
			if stats != nil {
				stats.SetState(alloctrack.StateWaiting)
			}
			log.Info("the app waits for a debugger; leaving it free", zap.Duration("retry", d.cfg.WaitingRetry))
			wait = d.cfg.WaitingRetry
		case errors.Is(err, alloctrack.ErrHeld):
			if markHeld() {
				<-ctx.Done()
				return
			}
			if stats != nil {
				d.logs.warn(log, key, "another debugger holds the app; retrying", err)
			}
		case errors.Is(err, alloctrack.ErrStreamEnded):
			log.Debug("JDWP stream ended; reconnecting unless the process is gone", zap.Error(err))
		case errors.Is(err, alloctrack.ErrRefused):
			// The process died, is not debuggable, or is frozen; track-jdwp
			// will tell if it is gone.
			d.countDeviceError(serial, alloctrack.StageConnect)
			d.logs.warn(log, key, "jdwp stream refused by the device; retrying", err)
		default:
			if stats == nil {
				stage := alloctrack.ErrorStage(err)
				if stage != alloctrack.StageConnect && stage != alloctrack.StageHello {
					stage = alloctrack.StageHello
				}
				d.countDeviceError(serial, stage)
			}
			d.logs.warn(log, key, "session ended; retrying", err)
		}
		if stats != nil && !errors.Is(err, alloctrack.ErrUnsupported) && !errors.Is(err, alloctrack.ErrHeld) && !errors.Is(err, alloctrack.ErrWaiting) {
			stats.SetState(alloctrack.StateBackoff)
		}
		if !sleepCtx(ctx, wait) {
			break
		}
		if errors.Is(err, alloctrack.ErrStreamEnded) && stats != nil {
			// The process outlived its stream: that was an error.
			stats.CountError(alloctrack.StageReport)
			d.logs.warn(log, key, "JDWP stream ended while the app lives on; reconnecting", err)
		}
	}
	if stats != nil {
		switch context.Cause(ctx) {
		case errPIDGone:
			stats.SetStateIf(pid, alloctrack.StateExited)
		case errDeviceGone:
			stats.SetStateIf(pid, alloctrack.StateDisconnected)
		}
	}
}

// reportCap reads how many entries a full report holds on an ART 7–9
// device: dalvik.vm.allocTrackerMax caps the records kept and
// dalvik.vm.recentAllocMax (at most that) those reported, as ART's
// AllocRecordObjectMap::SetProperties reads them (runtime/gc/
// allocation_record.cc); 0 when neither is set (65,535).
func (d *Daemon) reportCap(ctx context.Context, src Source, serial string) int {
	prop := func(name string) int {
		v, err := src.Prop(ctx, serial, name)
		if err != nil {
			return 0
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n <= 0 {
			return 0
		}
		return n
	}
	allocMax, recent := prop("dalvik.vm.allocTrackerMax"), prop("dalvik.vm.recentAllocMax")
	c := 0
	if allocMax > 0 {
		c = allocMax
	}
	if recent > 0 && (allocMax == 0 || recent <= allocMax) {
		c = recent
	}
	if c >= allocreport.MaxEntries {
		return 0
	}
	return c
}

// setOrphan records (app != "") or forgets a filtered process whose
// tracker was left on.
func (d *Daemon) setOrphan(serial string, pid int, app string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.orphans[serial]
	if app == "" {
		delete(m, pid)
		return
	}
	if m == nil {
		m = map[int]string{}
		d.orphans[serial] = m
	}
	m[pid] = app
}

// nameHeld names a process from the device's process list. A process
// that has not been named yet ("<pre-initialized>") has no name.
func (d *Daemon) nameHeld(ctx context.Context, src Source, serial string, api, pid int) (string, error) {
	nctx, cancel := context.WithTimeout(ctx, d.cfg.Session.RequestTimeout)
	defer cancel()
	name, err := src.ProcessName(nctx, serial, pid, api)
	if err != nil {
		return "", err
	}
	if name == "" || name == alloctrack.PreInitialized {
		return "", fmt.Errorf("pid %d is %q in the process list: not named yet", pid, name)
	}
	return name, nil
}

// Snapshot copies the daemon's state for the exporter; it does no I/O.
func (d *Daemon) Snapshot() alloctrack.Snapshot {
	d.mu.Lock()
	var s alloctrack.Snapshot
	for addr, e := range d.servers {
		s.Servers = append(s.Servers, alloctrack.ServerStatus{Addr: addr, Up: e.up, Errors: e.errors})
	}
	for _, e := range d.devices {
		ds := alloctrack.DeviceStatus{Server: e.server, Serial: e.serial, State: e.state, API: e.api, Model: e.model, Errors: map[string]uint64{}, OrphanedTrackers: len(d.orphans[e.serial])}
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
		s.Apps = append(s.Apps, alloctrack.AppSnapshot{AppStatus: e.stats.Snapshot(), Counts: e.counters.Snapshot()})
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

func (r *rateLog) forget(key string) {
	r.mu.Lock()
	delete(r.seen, key)
	r.mu.Unlock()
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
