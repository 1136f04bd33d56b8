package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"go.uber.org/zap"
)

// runDDMDevice watches the debuggable processes of a device with DDM
// sessions, one per process, until ctx ends.
func (d *Daemon) runDDMDevice(ctx context.Context, src Source, e *deviceEntry, api, reportCap int, log *zap.Logger) {
	dev := &ddmDevice{d: d, ctx: ctx, src: src, e: e, api: api, reportCap: reportCap, log: log,
		slots: make(chan struct{}, d.cfg.ReportsPerDevice), runs: map[int]*pidRun{}, waiting: map[int]string{}, shown: map[int]*alloctrack.AppStats{},
		// On Android 12+ no process is connected to before track-app
		// has answered (with its list, or by not being there).
		appsKnown: api < alloctrack.APIHeapprofd}
	dev.tests = d.followTests(ctx, src, e.serial, api, followOpts{}, log)
	if dev.tests != nil {
		defer dev.tests.close()
	}
	var tracking sync.WaitGroup
	if api >= alloctrack.APIHeapprofd {
		tracking.Go(dev.followTrackApp)
	}
	defer tracking.Wait()
	dev.followJDWP()
	dev.stopRuns()
}

// ddmDevice is one DDM device as runDDMDevice watches it; mu guards the
// fields after it.
type ddmDevice struct {
	d              *Daemon
	ctx            context.Context
	src            Source
	e              *deviceEntry
	api, reportCap int
	log            *zap.Logger
	slots          chan struct{} // reports read at once on the device
	tests          *testFollower // nil: runs are not followed

	mu        sync.Mutex
	runs      map[int]*pidRun
	jdwpPIDs  []int
	waiting   map[int]string               // pid -> name: waiting for a debugger, by track-app (Android 15+)
	shown     map[int]*alloctrack.AppStats // pid -> stats shown waiting, until the pid ends
	appsKnown bool
}

// reconcileLocked starts a run for each process of the JDWP list that has
// none and is not waiting for a debugger, and ends the runs of processes
// that left.
func (dev *ddmDevice) reconcileLocked() {
	if !dev.appsKnown {
		return
	}
	alive := map[int]bool{}
	for _, pid := range dev.jdwpPIDs {
		alive[pid] = true
	}
	for pid := range alive {
		if name, ok := dev.waiting[pid]; ok {
			dev.leaveWaiting(pid, name)
		} else if dev.runs[pid] == nil {
			dev.startRun(pid)
		}
	}
	for pid, r := range dev.runs {
		if !alive[pid] {
			r.cancel(errPIDGone)
			delete(dev.runs, pid)
		}
	}
	for pid, st := range dev.shown {
		if !alive[pid] {
			// It died (waiting, or before its session named it):
			// exited, and so forgotten in time.
			st.SetStateIf(pid, alloctrack.StateExited)
			delete(dev.shown, pid)
		}
	}
}

// leaveWaiting leaves process pid free for the debugger it waits for,
// without a connection at all, and shows it waiting.
func (dev *ddmDevice) leaveWaiting(pid int, name string) {
	if r := dev.runs[pid]; r != nil {
		r.cancel(errWaiting)
		delete(dev.runs, pid)
	}
	if name != "" && dev.d.cfg.Packages.Match(name) {
		_, st := dev.d.bind(dev.e.serial, name)
		st.Update(func(s *alloctrack.AppStatus) { s.PID = pid })
		st.SetState(alloctrack.StateWaiting)
		dev.shown[pid] = st
	}
}

// startRun runs process pid's sessions until its run is cancelled.
func (dev *ddmDevice) startRun(pid int) {
	rctx, cancel := context.WithCancelCause(dev.ctx)
	r := &pidRun{cancel: cancel, done: make(chan struct{})}
	dev.runs[pid] = r
	go func() {
		defer close(r.done)
		dev.d.runPID(rctx, dev.src, dev.e.serial, dev.api, dev.reportCap, pid, dev.slots, dev.tests, dev.log.With(zap.Int("pid", pid)))
	}()
}

// followTrackApp takes Android 15's adbd's word on which processes wait
// for a debugger (and their names); older ones list no such flag.
func (dev *ddmDevice) followTrackApp() {
	ctx := dev.ctx
	err := dev.src.TrackApp(ctx, dev.e.serial, func(list []AppProcess) {
		dev.mu.Lock()
		defer dev.mu.Unlock()
		if ctx.Err() != nil {
			return // the device's runs are being stopped
		}
		dev.appsKnown = true
		clear(dev.waiting)
		for _, a := range list {
			if a.WaitingForDebugger {
				dev.waiting[a.PID] = a.Name
			}
		}
		dev.reconcileLocked()
	})
	if ctx.Err() != nil {
		return
	}
	if !errors.Is(err, alloctrack.ErrTrackAppUnsupported) {
		dev.log.Debug("track-app ended; apps waiting for a debugger are found by their WAIT", zap.Error(err))
	}
	dev.mu.Lock()
	defer dev.mu.Unlock()
	dev.appsKnown = true
	dev.reconcileLocked()
}

// followJDWP follows the device's JDWP list until ctx ends, reopening it
// with backoff when it ends.
func (dev *ddmDevice) followJDWP() {
	ctx, d, e := dev.ctx, dev.d, dev.e
	for attempt := 0; ctx.Err() == nil; attempt++ {
		tctx, tcancel := context.WithCancel(ctx)
		first, reopen := true, false
		err := dev.src.TrackJDWP(tctx, e.serial, func(pids []int) {
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
			dev.mu.Lock()
			defer dev.mu.Unlock()
			dev.jdwpPIDs = pids
			dev.reconcileLocked()
		})
		tcancel()
		if ctx.Err() != nil {
			return
		}
		if reopen {
			dev.log.Debug("track-jdwp update may be cut at 1,024 bytes; reopening it for a whole list", zap.Int("device_pids", dev.pidCount()))
			attempt = -1
			continue
		}
		d.countDeviceError(e.serial, "track-jdwp")
		d.logs.warn(dev.log, "track-jdwp/"+e.server+"/"+e.serial, "track-jdwp ended; retrying", err)
		if !sleepCtx(ctx, d.backoff(attempt)) {
			return
		}
	}
}

func (dev *ddmDevice) pidCount() int {
	dev.mu.Lock()
	defer dev.mu.Unlock()
	return len(dev.jdwpPIDs)
}

// stopRuns ends every process's run and waits for them.
func (dev *ddmDevice) stopRuns() {
	dev.mu.Lock()
	var dones []chan struct{}
	for pid, r := range dev.runs {
		r.cancel(context.Cause(dev.ctx))
		dones = append(dones, r.done)
		delete(dev.runs, pid)
	}
	dev.mu.Unlock()
	for _, ch := range dones {
		<-ch
	}
}

// runPID runs sessions for one process until ctx ends (the pid is gone,
// the device left, or the daemon stops).
func (d *Daemon) runPID(ctx context.Context, src Source, serial string, api, reportCap, pid int, slots chan struct{}, tests *testFollower, log *zap.Logger) {
	t := &ddmTarget{d: d, src: src, serial: serial, api: api, reportCap: reportCap, pid: pid, slots: slots, tests: tests, log: log,
		key: fmt.Sprintf("%s/%s/%d", src.Addr(), serial, pid)}
	defer d.logs.forget(t.key)
	d.keep(ctx, t)
}

// ddmTarget is one debuggable process, watched by DDM sessions.
type ddmTarget struct {
	d                   *Daemon
	src                 Source
	serial              string
	api, reportCap, pid int
	slots               chan struct{}
	log                 *zap.Logger
	key                 string
	stats               *alloctrack.AppStats
	heldStats           *alloctrack.AppStats // stats of the name the process list gave
	unanswered          int                  // sessions in a row whose REAQ went unanswered
	lastErr             error
	orphan              bool
	tests               *testFollower // nil: runs are not followed
}

// markHeld shows the process held: named from the process list if no
// session named it yet. It reports whether that name is excluded.
func (t *ddmTarget) markHeld(ctx context.Context) (excluded bool) {
	d := t.d
	if t.stats == nil {
		name, nerr := d.nameHeld(ctx, t.src, t.serial, t.api, t.pid)
		switch {
		case nerr != nil:
			d.countDeviceError(t.serial, alloctrack.StageHello)
			d.logs.warn(t.log, t.key, "another debugger holds the app, and the device's process list does not name it; retrying", nerr)
		case !d.cfg.Packages.Match(name):
			t.log.Debug("app held by another debugger excluded by the package filter", zap.String("package", name))
			return true
		default:
			_, st := d.bind(t.serial, name)
			st.Update(func(s *alloctrack.AppStatus) { s.PID = t.pid })
			t.stats, t.heldStats = st, st
			t.log.Info("another debugger holds the app; named from the device's process list", zap.String("package", name))
		}
	}
	if t.stats != nil {
		t.stats.SetState(alloctrack.StateHeld)
	}
	return false
}

func (t *ddmTarget) session(ctx context.Context) error {
	d := t.d
	if errors.Is(t.lastErr, alloctrack.ErrStreamEnded) && t.stats != nil {
		// The process outlived its stream: that was an error.
		t.stats.CountError(alloctrack.StageReport)
		d.logs.warn(t.log, t.key, "JDWP stream ended while the app lives on; reconnecting", t.lastErr)
	}
	s := &ddm.Session{
		Serial: t.serial, PID: t.pid, API: t.api, UnansweredProbes: t.unanswered, ReportCap: t.reportCap,
		OnHeld: func() {
			t.markHeld(ctx)
			t.log.Debug("the VM leaves our handshake unread: another debugger holds it; waiting on the connection", zap.Duration("for", d.cfg.HeldRetry))
		},
		CheckFiltered: true, TurnOffOrphan: d.cfg.TurnOffOrphans,
		Open: func(ctx context.Context) (io.ReadWriteCloser, error) {
			return t.src.OpenJDWP(ctx, t.serial, t.pid)
		},
		Accept: d.cfg.Packages.Match,
		Bind: func(app string) (*alloctrack.Counters, *alloctrack.AppStats) {
			c, st := d.bind(t.serial, app)
			if t.heldStats != nil && t.heldStats != st {
				// The VM calls itself otherwise than the process
				// list did: that name no longer runs here.
				t.heldStats.SetStateIf(t.pid, alloctrack.StateExited)
			}
			t.heldStats = nil
			t.stats = st
			if t.tests != nil {
				if at := d.testsOf(t.serial, app); at != nil {
					t.tests.bound(t.pid, app, at)
				}
			}
			return c, st
		},
		OnWindow: t.onWindow(),
		CycleNow: t.cycles(),
		Config:   d.cfg.Session,
		Slots:    t.slots,
		Buffers:  d.buffers,
		Allocs:   d.allocs,
		Log:      t.log,
	}
	err := s.Run(ctx)
	t.lastErr = err
	return err
}

func (t *ddmTarget) failed(ctx context.Context, err error, wait time.Duration) (time.Duration, bool) {
	d, log := t.d, t.log
	if errors.Is(err, alloctrack.ErrProbeUnanswered) {
		t.unanswered++
	} else if t.stats != nil && t.stats.Snapshot().Windows > 0 {
		t.unanswered = 0
	}
	switch {
	case errors.Is(err, alloctrack.ErrFiltered):
		var fe *ddm.FilteredError
		switch {
		case errors.As(err, &fe) && fe.Stopped:
			log.Info("an app the package filters exclude had its allocation tracker left on (by an earlier, wider run?); turned it off", zap.String("package", fe.App))
		case errors.As(err, &fe) && fe.TrackingOn:
			log.Warn("an app the package filters exclude has its allocation tracker left on (by an earlier, wider run?), slowing it; --orphans.turn-off would turn it off", zap.String("package", fe.App))
			d.setOrphan(t.serial, t.pid, fe.App)
			t.orphan = true
		default:
			log.Debug("app excluded by the package filter")
		}
		return 0, true
	case errors.Is(err, alloctrack.ErrUnsupported):
		log.Info("allocation tracking not supported (no REAQ reply; Android 12+); re-probing later", zap.Duration("reprobe", d.cfg.Reprobe))
		wait = d.cfg.Reprobe
	case errors.Is(err, alloctrack.ErrWaiting):
		// Left free for the debugger it waits for; named from the
		// process list if the session had no name yet.
		if t.stats == nil {
			if name, nerr := d.nameHeld(ctx, t.src, t.serial, t.api, t.pid); nerr == nil && d.cfg.Packages.Match(name) {
				_, st := d.bind(t.serial, name)
				st.Update(func(s *alloctrack.AppStatus) { s.PID = t.pid })
				t.stats, t.heldStats = st, st
			}
		}
		if t.stats != nil {
			t.stats.SetState(alloctrack.StateWaiting)
		}
		log.Info("the app waits for a debugger; leaving it free", zap.Duration("retry", d.cfg.WaitingRetry))
		wait = d.cfg.WaitingRetry
	case errors.Is(err, alloctrack.ErrHeld):
		if t.markHeld(ctx) {
			return 0, true
		}
		if t.stats != nil {
			d.logs.warn(log, t.key, "another debugger holds the app; retrying", err)
		}
	case errors.Is(err, alloctrack.ErrStreamEnded):
		log.Debug("JDWP stream ended; reconnecting unless the process is gone", zap.Error(err))
	case errors.Is(err, alloctrack.ErrRefused):
		// The process died, is not debuggable, or is frozen; track-jdwp
		// will tell if it is gone.
		d.countDeviceError(t.serial, alloctrack.StageConnect)
		d.logs.warn(log, t.key, "jdwp stream refused by the device; retrying", err)
	default:
		if t.stats == nil {
			stage := alloctrack.ErrorStage(err)
			if stage != alloctrack.StageConnect && stage != alloctrack.StageHello {
				stage = alloctrack.StageHello
			}
			d.countDeviceError(t.serial, stage)
		}
		d.logs.warn(log, t.key, "session ended; retrying", err)
	}
	if t.stats != nil && !errors.Is(err, alloctrack.ErrUnsupported) && !errors.Is(err, alloctrack.ErrHeld) && !errors.Is(err, alloctrack.ErrWaiting) {
		t.stats.SetState(alloctrack.StateBackoff)
	}
	return wait, false
}

// cycles is the channel on which the test follower asks the session for
// a new window (nil: runs are not followed).
func (t *ddmTarget) cycles() <-chan struct{} {
	if t.tests == nil {
		return nil
	}
	return t.tests.cycles(t.pid)
}

// onWindow gives each window's report to the test follower, if any.
func (t *ddmTarget) onWindow() func(*ddm.Cycle, *alloctrack.Window) {
	if t.tests == nil {
		return nil
	}
	reportCap := allocreport.MaxEntries
	if t.reportCap > 0 && t.reportCap < reportCap {
		reportCap = t.reportCap
	}
	return func(c *ddm.Cycle, _ *alloctrack.Window) {
		if c.Report != nil {
			t.tests.report(t.pid, c.Report, len(c.Report.Allocations) >= reportCap)
		}
	}
}

func (t *ddmTarget) ended(cause error) {
	if t.tests != nil {
		t.tests.gone(t.pid)
	}
	if t.orphan {
		t.d.setOrphan(t.serial, t.pid, "")
	}
	if t.stats == nil {
		return
	}
	switch cause {
	case errPIDGone:
		t.stats.SetStateIf(t.pid, alloctrack.StateExited)
	case errDeviceGone:
		t.stats.SetStateIf(t.pid, alloctrack.StateDisconnected)
	}
}

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
