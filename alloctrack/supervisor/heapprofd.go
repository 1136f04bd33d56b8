package supervisor

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"

	"go.uber.org/zap"
)

// cleanHeapprofd stops the perfetto sessions and removes the trace files
// an earlier run of the daemon left on a device (it was killed, or the
// device or the adb server went away while sessions ran), before any new
// session starts there.
func (d *Daemon) cleanHeapprofd(ctx context.Context, src Source, serial string, log *zap.Logger) {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.Heapprofd.StopTimeout)
	defer cancel()
	stopped, removed, left, err := heapprofd.Clean(cctx, d.execOn(src, serial), d.cfg.Heapprofd.Poll)
	switch {
	case err != nil:
		d.countDeviceError(serial, alloctrack.StageCleanup)
		log.Warn("could not clean up all perfetto sessions of an earlier run", zap.Int("sessions_stopped", stopped), zap.Int("files_removed", removed), zap.Int("files_left", left), zap.Error(err))
	case stopped > 0 || removed > 0:
		log.Info("stopped perfetto sessions and removed trace files an earlier run left", zap.Int("sessions", stopped), zap.Int("files", removed))
	}
}

func (d *Daemon) execOn(src Source, serial string) heapprofd.ExecFunc {
	return func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
		return src.Exec(ctx, serial, stdin, argv...)
	}
}

// hpWatch is what a heapprofd device's followers know: the debuggable
// pids (track-jdwp), the process list's names, and from them the process
// names to profile; and the running session's names, whose Restart it
// fires when a name to profile is not among them.
type hpWatch struct {
	mu   sync.Mutex
	jdwp map[int]bool
	// apps is track-app's last list (by pid) once appsKnown; noApps when
	// the device has no track-app, and the old way is used.
	apps      map[int]AppProcess
	appsKnown bool
	noApps    bool
	// unprofileable are names the --package filters ask for that the
	// device says are neither debuggable nor profileable.
	unprofileable map[string]bool
	procs         map[int]string // pid -> name, from the last process list
	// left are the processes the list before had and the last one does
	// not: a dump read after a process ended still names it.
	left    map[int]string
	listed  bool // procs holds a list
	wanted  map[string]bool
	running map[string]bool
	restart chan struct{}
	changed chan struct{} // a name to profile was added
	// fast: a followed run is open on the device (or was lately), and the
	// session dumps at Tests.DumpInterval; runFast: the running one does.
	fast, runFast bool
}

// setFast says whether sessions are to dump at the tests' interval,
// restarting the running one when it does not.
func (w *hpWatch) setFast(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fast = on
	if w.restart != nil && w.runFast != on {
		close(w.restart)
		w.restart = nil
	}
}

// fastNow tells whether the next session dumps at the tests' interval.
func (w *hpWatch) fastNow() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fast
}

// update recomputes the names to profile; it returns those that left.
// Until track-app has answered (with a list, or by not being there) it
// wants nothing.
func (w *hpWatch) update(d *Daemon) (gone []string) {
	wanted := map[string]bool{}
	unprofileable := map[string]bool{}
	for pid, name := range w.procs {
		if name == "" || name == alloctrack.PreInitialized || !d.cfg.Packages.Match(name) {
			continue
		}
		switch {
		case w.appsKnown:
			// The device's own answer: debuggable or profileable apps.
			// A process --package names that is neither is shown so.
			if a, ok := w.apps[pid]; ok && (a.Debuggable || a.Profileable) {
				wanted[name] = true
			} else if len(d.cfg.Packages.Include) > 0 {
				unprofileable[name] = true
			}
		case w.noApps:
			// Debuggable apps are in track-jdwp; apps only profileable
			// are not, and are candidates when --package names them.
			if w.jdwp[pid] || len(d.cfg.Packages.Include) > 0 {
				wanted[name] = true
			}
		}
	}
	for name := range wanted {
		delete(unprofileable, name) // another process of the name is
	}
	w.unprofileable = unprofileable
	for name := range w.wanted {
		if !wanted[name] {
			gone = append(gone, name)
		}
	}
	added := false
	for name := range wanted {
		if !w.wanted[name] {
			added = true
		}
	}
	w.wanted = wanted
	if added {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	if w.restart != nil {
		for name := range wanted {
			if !w.running[name] {
				close(w.restart)
				w.restart = nil
				break
			}
		}
	}
	return gone
}

// names returns the names to profile, sorted.
func (w *hpWatch) names() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.wanted))
}

// run records the running session's names, its restart channel and
// whether it dumps at the tests' interval.
func (w *hpWatch) run(names []string, restart chan struct{}, fast bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = map[string]bool{}
	for _, n := range names {
		w.running[n] = true
	}
	w.restart, w.runFast = restart, fast
	if restart != nil && fast != w.fast {
		close(restart) // changed while the session started
		w.restart = nil
	}
}

func (w *hpWatch) nameOf(pid int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if name, ok := w.procs[pid]; ok {
		return name
	}
	return w.left[pid]
}

// runHeapprofdDevice samples the apps of an Android 12+ device through
// one heapprofd session at a time, until ctx ends (the device left or
// the daemon stops). The session profiles every process name to profile;
// it is restarted when a new name appears, when heapprofd ends a
// profile, and every Heapprofd.Rotate. A process that restarts under the
// same name needs no new session: heapprofd profiles it from its start.
func (d *Daemon) runHeapprofdDevice(ctx context.Context, src Source, serial string, api int, log *zap.Logger) {
	d.cleanHeapprofd(ctx, src, serial, log)
	t := &hpTarget{d: d, src: src, serial: serial, api: api, log: log,
		key:     src.Addr() + "/" + serial + "/heapprofd",
		w:       &hpWatch{jdwp: map[int]bool{}, procs: map[int]string{}, changed: make(chan struct{}, 1)},
		targets: map[string]*heapprofd.Target{},
		shown:   map[string]bool{},
	}
	t.tests = d.followTests(ctx, src, serial, api, followOpts{backend: alloctrack.BackendHeapprofd, active: t.w.setFast}, log)
	if t.tests != nil {
		defer t.tests.close()
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); t.followTrackApp(ctx) }()
	go func() { defer wg.Done(); t.followTrackJDWP(ctx) }()
	go func() { defer wg.Done(); d.followProcessList(ctx, src, serial, api, log, t.onProcesses) }()
	defer wg.Wait()
	defer d.logs.forget(t.key)
	d.keep(ctx, t)
}

// hpTarget is an Android 12+ device's apps, watched by one heapprofd
// session at a time.
type hpTarget struct {
	d      *Daemon
	src    Source
	serial string
	api    int
	log    *zap.Logger
	key    string
	w      *hpWatch
	ts     []*heapprofd.Target // the last session's
	tests  *testFollower       // nil: runs are not followed

	tmu     sync.Mutex
	targets map[string]*heapprofd.Target // by name: every app of the device seen
	shown   map[string]bool              // names shown unprofileable (under w.mu)
}

// target returns the target of an app, binding its counters the first
// time, and again once the daemon forgot the app (it exited and stayed
// away for the retention); targets of other forgotten apps go then.
func (t *hpTarget) target(name string) *heapprofd.Target {
	t.tmu.Lock()
	defer t.tmu.Unlock()
	tg := t.targets[name]
	if tg == nil || !t.d.bound(t.serial, name, tg.Stats) {
		for n, o := range t.targets {
			if !t.d.bound(t.serial, n, o.Stats) {
				delete(t.targets, n)
			}
		}
		counters, stats := t.d.bind(t.serial, name)
		stats.Update(func(s *alloctrack.AppStatus) {
			s.Backend = alloctrack.BackendHeapprofd
			s.Window = t.d.cfg.Session.Window
		})
		tg = &heapprofd.Target{Counters: counters, Stats: stats}
		t.targets[name] = tg
	}
	return tg
}

// updated recomputes the names to profile after a change (w.mu held, and
// released here), shows the apps that left exited and the newly
// unprofileable ones so.
func (t *hpTarget) updated() {
	gone := t.w.update(t.d)
	var unprof []string
	for name := range t.w.unprofileable {
		if !t.shown[name] {
			t.shown[name] = true
			unprof = append(unprof, name)
		}
	}
	for name := range t.shown {
		if !t.w.unprofileable[name] {
			delete(t.shown, name)
			if !t.w.wanted[name] {
				gone = append(gone, name) // its process ended: exited, forgotten in time
			}
		}
	}
	t.w.mu.Unlock()
	for _, name := range gone {
		t.tmu.Lock()
		tg := t.targets[name]
		t.tmu.Unlock()
		if tg != nil {
			tg.Stats.SetState(alloctrack.StateExited)
		}
	}
	for _, name := range unprof {
		tg := t.target(name)
		tg.Stats.CountError(alloctrack.StageUnprofileable)
		tg.Stats.SetState(alloctrack.StateUnprofileable)
		t.log.Info("the device says this app is neither debuggable nor profileable (track-app): heapprofd cannot sample it", zap.String("package", name))
	}
}

// followTrackApp follows the device's track-app until ctx ends, or until
// it turns out the device has none.
func (t *hpTarget) followTrackApp(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := t.src.TrackApp(ctx, t.serial, func(list []AppProcess) {
			attempt = 0
			t.w.mu.Lock()
			t.w.apps = map[int]AppProcess{}
			for _, a := range list {
				t.w.apps[a.PID] = a
			}
			t.w.appsKnown = true
			t.updated()
		})
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, alloctrack.ErrTrackAppUnsupported) {
			t.log.Debug("the device has no track-app: apps are found from track-jdwp and, with --package, the process list")
			t.w.mu.Lock()
			t.w.noApps = true
			t.updated()
			return
		}
		t.d.countDeviceError(t.serial, "track-app")
		t.d.logs.warn(t.log, "track-app/"+t.src.Addr()+"/"+t.serial, "track-app ended; retrying", err)
		if !sleepCtx(ctx, t.d.backoff(attempt)) {
			return
		}
	}
}

// followTrackJDWP follows the device's debuggable processes until ctx
// ends.
func (t *hpTarget) followTrackJDWP(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := t.src.TrackJDWP(ctx, t.serial, func(pids []int) {
			attempt = 0
			t.w.mu.Lock()
			clear(t.w.jdwp)
			for _, p := range pids {
				t.w.jdwp[p] = true
			}
			t.updated()
		})
		if ctx.Err() != nil {
			return
		}
		t.d.countDeviceError(t.serial, "track-jdwp")
		t.d.logs.warn(t.log, "track-jdwp/"+t.src.Addr()+"/"+t.serial, "track-jdwp ended; retrying", err)
		if !sleepCtx(ctx, t.d.backoff(attempt)) {
			return
		}
	}
}

// onProcesses takes a new process list of the device.
func (t *hpTarget) onProcesses(procs []Process) {
	t.w.mu.Lock()
	left := t.w.procs
	t.w.procs = make(map[int]string, len(procs))
	for _, p := range procs {
		t.w.procs[p.PID] = p.Name
		delete(left, p.PID)
	}
	t.w.left = left
	t.w.listed = true
	t.updated()
	if t.tests != nil {
		// A process that left: heapprofd's last dump of it (disconnected)
		// comes at its next dump round, is committed within a flush period
		// (at most half a window) and read within a window; without it
		// (it ended between sessions, say) its run ends after that time.
		wait := t.d.cfg.Tests.Grace + t.d.cfg.Heapprofd.DumpInterval + 2*t.d.cfg.Session.Window
		for pid := range left {
			t.tests.goneAfter(pid, wait)
		}
	}
}

// resolve returns the target of a profiled process, naming it from the
// device when the last process list did not have it.
func (t *hpTarget) resolve(ctx context.Context, pid int) *heapprofd.Target {
	name := t.w.nameOf(pid)
	if name == "" {
		// A process started since the last list: ask the device.
		nctx, cancel := context.WithTimeout(ctx, t.d.cfg.Session.RequestTimeout)
		n, err := t.src.ProcessName(nctx, t.serial, pid, t.api)
		cancel()
		if err != nil {
			t.log.Debug("naming a profiled process", zap.Int("pid", pid), zap.Error(err))
			return nil
		}
		name = n
	}
	if name == "" || name == alloctrack.PreInitialized || !t.d.cfg.Packages.Match(name) {
		return nil
	}
	tg := t.target(name)
	if t.tests != nil {
		if at := t.d.testsOf(t.serial, name); at != nil {
			t.tests.bound(pid, name, at)
		}
	}
	return tg
}

// session runs one heapprofd session for the names to profile; with none,
// it waits until there is one.
func (t *hpTarget) session(ctx context.Context) error {
	d := t.d
	names := t.w.names()
	if len(names) == 0 {
		select {
		case <-ctx.Done():
		case <-t.w.changed:
		}
		return nil
	}
	t.ts = t.ts[:0]
	for _, n := range names {
		t.ts = append(t.ts, t.target(n))
	}
	restart := make(chan struct{})
	cfg, fast := d.cfg.Heapprofd, t.w.fastNow()
	if fast {
		cfg.DumpInterval = d.cfg.Tests.DumpInterval
	}
	t.w.run(names, restart, fast)
	defer t.w.run(nil, nil, false)
	s := &heapprofd.Session{
		Serial: t.serial, API: t.api, Exec: d.execOn(t.src, t.serial),
		Window: d.cfg.Session.Window, Config: cfg,
		Processes: names, Targets: t.ts, Resolve: t.resolve, Restart: restart,
		Log: t.log,
	}
	if t.tests != nil {
		s.OnDump = t.tests.dump
		s.OnGone = t.tests.gone // heapprofd's last dump of it was read
	}
	began := time.Now()
	err := s.Run(ctx)
	if err == nil && ctx.Err() == nil {
		// Rotated, restarted for a new app, or a profile ended: the next
		// session starts at once; the gap is the stop and start.
		t.log.Debug("heapprofd session ended; starting the next", zap.Duration("ran", time.Since(began)))
	}
	return err
}

func (t *hpTarget) failed(_ context.Context, err error, wait time.Duration) (time.Duration, bool) {
	switch alloctrack.ErrorStage(err) {
	case alloctrack.StagePerfettoRefused:
		t.d.logs.warn(t.log, t.key, "the device's tracing service refused the heapprofd session (it allows 5 sessions of adb shell's uid at once, Android Studio's and other people's included); retrying", err)
	default:
		t.d.logs.warn(t.log, t.key, "heapprofd session ended; retrying", err)
	}
	for _, tg := range t.ts {
		if st := tg.Stats.Snapshot().State; st != alloctrack.StateRefused && st != alloctrack.StateExited {
			tg.Stats.SetState(alloctrack.StateBackoff)
		}
	}
	return wait, false
}

func (t *hpTarget) ended(cause error) {
	if cause != errDeviceGone {
		return
	}
	t.tmu.Lock()
	defer t.tmu.Unlock()
	for _, tg := range t.targets {
		tg.Stats.SetState(alloctrack.StateDisconnected)
	}
}

// followProcessList reads a device's process list every window and calls
// fn with it. It returns when ctx ends.
func (d *Daemon) followProcessList(ctx context.Context, src Source, serial string, api int, log *zap.Logger, fn func([]Process)) {
	key := src.Addr() + "/" + serial + "/ps"
	defer d.logs.forget(key)
	t := time.NewTicker(d.cfg.Session.Window)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, d.cfg.Session.RequestTimeout)
		procs, err := src.Processes(pctx, serial, api)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			d.countDeviceError(serial, alloctrack.StageProcessList)
			d.logs.warn(log, key, "reading the device's process list failed; retrying", err)
		default:
			fn(procs)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
