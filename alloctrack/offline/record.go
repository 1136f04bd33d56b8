package offline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
)

// A Recorder records one app into a capture with one backend. Record runs
// until ctx ends, or until stop is closed, after which it ends cleanly (the
// window under way is read, and what it turned on in the app is turned
// off). Each window goes into w; so do the raw bytes the backend read.
type Recorder interface {
	Record(ctx context.Context, stop <-chan struct{}, w *CaptureWriter) error
}

// DDMRecorder records one process with a DDM session on its JDWP stream
// (Android 4.4–11).
type DDMRecorder struct {
	Serial   string
	PID, API int
	// Package, if set, is the app the process must call itself; else
	// the capture takes the name the VM gives.
	Package string
	Open    func(ctx context.Context) (io.ReadWriteCloser, error)
	Config  ddm.Config
	Log     *zap.Logger
	// Progress, if set, is called after each window.
	Progress func(w *CaptureWriter)

	// Named is the name the process gives itself (HELO, APNM), once
	// Record has run.
	Named string
}

// Record implements Recorder. A VM notices that a debugger left only
// after a moment, and the pid may have just been asked its name: a
// connection refused as held is tried again for up to a second before
// alloctrack.ErrHeld is returned.
func (r *DDMRecorder) Record(ctx context.Context, stop <-chan struct{}, w *CaptureWriter) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var writeErr error
	s := &ddm.Session{
		Serial: r.Serial, PID: r.PID, API: r.API,
		Open: r.Open,
		Accept: func(app string) bool {
			r.Named = app
			return r.Package == "" || app == r.Package
		},
		Bind: func(app string) (*alloctrack.Counters, *alloctrack.AppStats) {
			w.SetPackage(app)
			return alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 1, TopSites: 1}), alloctrack.NewAppStats(r.Serial, r.PID)
		},
		Config: r.Config,
		Stop:   stop,
		Log:    r.Log,
		OnWindow: func(cy *ddm.Cycle, win *alloctrack.Window) {
			err := w.Report(cy.Raw, cy.Report)
			if err == nil && win != nil {
				err = w.Add(win)
			}
			if err != nil && writeErr == nil {
				writeErr = err
				cancel()
			}
			if cy.ParseErr != nil {
				r.Log.Warn("window report did not parse; kept as written", zap.Int("window", w.Windows()), zap.Error(cy.ParseErr))
			}
			if r.Progress != nil {
				r.Progress(w)
			}
		},
	}
	runErr := s.Run(ctx)
	for grace := time.Now().Add(time.Second); errors.Is(runErr, alloctrack.ErrHeld) && time.Now().Before(grace); {
		select {
		case <-ctx.Done():
		case <-stop:
		case <-time.After(100 * time.Millisecond):
			runErr = s.Run(ctx)
			continue
		}
		break
	}
	if writeErr != nil {
		return writeErr
	}
	return runErr
}

// HeapprofdRecorder records one process with perfetto's heapprofd
// (Android 12+): one session after another (heapprofd ending the profile,
// or a rotation, takes a new one) until the capture ends.
type HeapprofdRecorder struct {
	Serial   string
	PID, API int
	Window   time.Duration
	Exec     heapprofd.ExecFunc
	Config   heapprofd.Config
	Log      *zap.Logger
	// Progress, if set, is called after each dump with the app's stats.
	Progress func(st *alloctrack.AppStats)
	// OnDump, if set, gets each of the process's dumps with the device
	// time it covers, in REALTIME (heapprofd.Session.OnDump), after the
	// capture took its window. Config.DumpInterval sets how often
	// heapprofd dumps.
	OnDump func(pid int, w *alloctrack.Window, from, to time.Time)

	// Stats are the app's, once Record has run; Rejected tells that
	// another profiler held the process for a whole session.
	Stats    *alloctrack.AppStats
	Rejected bool
}

// Record implements Recorder; the app's name must be set in w already.
func (r *HeapprofdRecorder) Record(ctx context.Context, stop <-chan struct{}, w *CaptureWriter) error {
	outer := ctx // not ended by stop: the app is looked at after
	raw, err := w.Trace()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	var writeErr error
	r.Stats = alloctrack.NewAppStats(r.Serial, r.PID)
	target := &heapprofd.Target{
		Counters: alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 1, TopSites: 1}),
		Stats:    r.Stats,
		Window: func(win *alloctrack.Window) {
			if err := w.Add(win); err != nil && writeErr == nil {
				writeErr = err
				cancel()
			}
			if r.Progress != nil {
				r.Progress(r.Stats)
			}
		},
	}
	var runErr error
	for ctx.Err() == nil {
		s := &heapprofd.Session{
			Serial: r.Serial, API: r.API, PIDs: []int{r.PID}, Window: r.Window,
			Exec: r.Exec, Config: r.Config,
			Targets: []*heapprofd.Target{target},
			Resolve: func(_ context.Context, p int) *heapprofd.Target {
				if p == r.PID {
					return target
				}
				return nil
			},
			OnDump: r.OnDump,
			Raw:    raw, Log: r.Log,
		}
		if runErr = s.Run(ctx); runErr != nil {
			break
		}
		r.Rejected = r.Rejected || target.Rejected()
	}
	if writeErr != nil {
		return writeErr
	}
	if runErr == nil && processGone(outer, r.Exec, r.PID) {
		// heapprofd goes on with a dead process as with an idle one.
		return fmt.Errorf("%w: pid %d on %s is gone: the capture holds what it allocated before, less than asked", ErrAppGone, r.PID, r.Serial)
	}
	return runErr
}

// ErrAppGone is a capture whose app's process ended before the capture.
var ErrAppGone = errors.New("the app's process ended during the capture")

// processGone tells whether the device says process pid no longer exists
// (its /proc entry is gone); false when it cannot tell.
func processGone(ctx context.Context, exec heapprofd.ExecFunc, pid int) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, errOut, code, err := exec(ctx, nil, "cat", "/proc/"+strconv.Itoa(pid)+"/cmdline")
	return err == nil && code != 0 && strings.Contains(string(errOut), "No such file")
}
