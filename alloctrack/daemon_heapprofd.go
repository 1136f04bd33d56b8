package alloctrack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// StageCleanup counts a device where the clean-up of an earlier run's
// perfetto sessions failed.
const StageCleanup = "perfetto-cleanup"

// cleanHeapprofd stops the perfetto sessions and removes the trace files
// an earlier run of the daemon left on a device (it was killed, or the
// device or the adb server went away while sessions ran), before any new
// session starts there.
func (d *Daemon) cleanHeapprofd(ctx context.Context, src Source, serial string, log *zap.Logger) {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.Heapprofd.StopTimeout)
	defer cancel()
	stopped, removed, err := CleanHeapprofd(cctx, func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
		return src.Exec(ctx, serial, stdin, argv...)
	})
	switch {
	case err != nil:
		d.countDeviceError(serial, StageCleanup)
		log.Warn("could not clean up perfetto sessions of an earlier run", zap.Error(err))
	case stopped > 0 || removed > 0:
		log.Info("stopped perfetto sessions and removed trace files an earlier run left", zap.Int("sessions", stopped), zap.Int("files", removed))
	}
}

// runHeapprofdPID samples one process through heapprofd sessions until
// ctx ends (the pid is gone, the device left, or the daemon stops). The
// process is named from the device's process list; a session that ends
// is followed by another after a pause that fits why it ended.
func (d *Daemon) runHeapprofdPID(ctx context.Context, src Source, serial string, api, pid int, log *zap.Logger) {
	key := fmt.Sprintf("%s/%s/%d", src.Addr(), serial, pid)
	defer d.logs.forget(key)
	var name string
	for attempt := 0; ctx.Err() == nil; attempt++ {
		n, err := d.nameHeld(ctx, src, serial, api, pid)
		if err == nil {
			name = n
			break
		}
		d.countDeviceError(serial, StageHello)
		d.logs.warn(log, key, "the device's process list does not name the process; retrying", err)
		if !sleepCtx(ctx, d.backoff(attempt)) {
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	if !d.cfg.Packages.Match(name) {
		log.Debug("app excluded by the package filter", zap.String("package", name))
		<-ctx.Done()
		return
	}
	counters, stats := d.bind(serial, name)
	stats.update(func(s *AppStatus) {
		s.PID = pid
		s.Backend = BackendHeapprofd
		s.Window = d.cfg.Session.Window
	})
	log = log.With(zap.String("package", name))
	exec := func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
		return src.Exec(ctx, serial, stdin, argv...)
	}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		s := &HeapprofdSession{
			Serial: serial, PID: pid, Process: name, Exec: exec,
			Window: d.cfg.Session.Window, Config: d.cfg.Heapprofd,
			Counters: counters, Stats: stats, Log: log,
		}
		began := time.Now()
		err := s.Run(ctx)
		if ctx.Err() != nil {
			break
		}
		if time.Since(began) > 2*d.cfg.BackoffMax {
			attempt = 0
		}
		wait := d.backoff(attempt)
		switch {
		case errors.Is(err, ErrRejected):
			d.logs.warn(log, key, "another profiler holds the app; heapprofd rejected our session; retrying later", err)
			wait = d.cfg.BackoffMax
		case errors.Is(err, ErrUnprofileable):
			log.Info("heapprofd gave no dump of the app: it is neither debuggable nor profileable, or ART's heap sampling is off; re-probing later", zap.Duration("reprobe", d.cfg.Reprobe))
			wait = d.cfg.Reprobe
		case errors.Is(err, ErrProfileEnded):
			d.logs.warn(log, key, "heapprofd ended the app's profile; starting a new session", err)
			stats.SetState(StateBackoff)
		default:
			d.logs.warn(log, key, "heapprofd session ended; retrying", err)
			stats.SetState(StateBackoff)
		}
		if !sleepCtx(ctx, wait) {
			break
		}
	}
	switch context.Cause(ctx) {
	case errPIDGone:
		stats.SetStateIf(pid, StateExited)
	case errDeviceGone:
		stats.SetStateIf(pid, StateDisconnected)
	}
}

// followProcessList reads a device's process list every window and calls
// fn with the pids whose name passes the package filter: on the heapprofd
// path these are candidates as much as the debuggable ones, since an app
// that is only profileable is not in track-jdwp. It returns when ctx ends.
func (d *Daemon) followProcessList(ctx context.Context, src Source, serial string, api int, log *zap.Logger, fn func([]int)) {
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
			d.countDeviceError(serial, StageProcessList)
			d.logs.warn(log, key, "reading the device's process list failed; retrying", err)
		default:
			var pids []int
			for _, p := range procs {
				if p.Name != "" && p.Name != PreInitialized && d.cfg.Packages.Match(p.Name) {
					pids = append(pids, p.PID)
				}
			}
			fn(pids)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// StageProcessList counts failed reads of a device's process list.
const StageProcessList = "process-list"
