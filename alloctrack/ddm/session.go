package ddm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"

	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/jdwp"
)

// RTTFloor is how many report round trips a window lasts at least: the
// round trip is time the tracker is blind (what the app allocates then is
// cleared with the window) and, while the VM builds the report, its
// allocating threads wait; 20 keeps that near 5 % of the app's time.
const RTTFloor = 20

// UnansweredProbeLimit is how many sessions in a row must find REAQ
// unanswered on Android 9 to 11 before the VM counts as one without the
// tracker (on Android 12+, or an API level not known, the first does).
const UnansweredProbeLimit = 3

// APIHangsHeld is the first API level (Android 9) whose ART leaves a
// second JDWP client's handshake unanswered while another client holds
// the app (adbconnection polls its control socket only while no client
// is connected); Android 14's ART accepts and closes it again.
const APIHangsHeld = 28

// Config holds the timings of a session.
type Config struct {
	Window    time.Duration // window length (default 10 s)
	MinWindow time.Duration // shortest window after overflows (default 3 s; never under RTTFloor round trips)
	// RTTFloor is how many report round trips a window lasts at least
	// (default the RTTFloor constant, 20).
	RTTFloor       int
	RequestTimeout time.Duration // handshake, HELO and the REAQ probe (default 5 s)
	ReportTimeout  time.Duration // REAL reply (default 30 s)
	NameTimeout    time.Duration // wait for APNM while "<pre-initialized>" (default 30 s)
	DisableTimeout time.Duration // REAE 0 and its confirmation on the way out (default 2 s)
	MaxPacketSize  int           // JDWP packet limit (default jdwp.DefaultMaxPacketSize)
	// HeldWait is how long a session whose VM is held (see
	// Session.OnHeld) waits on its connection (0: not at all).
	HeldWait time.Duration
}

// Fill sets every unset field to its default.
func (c *Config) Fill() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Window, 10*time.Second)
	def(&c.MinWindow, 3*time.Second)
	if c.RTTFloor <= 0 {
		c.RTTFloor = RTTFloor
	}
	if c.MinWindow > c.Window {
		c.MinWindow = c.Window
	}
	def(&c.RequestTimeout, 5*time.Second)
	def(&c.ReportTimeout, 30*time.Second)
	def(&c.NameTimeout, 30*time.Second)
	def(&c.DisableTimeout, 2*time.Second)
}

// Cycle is what a session knows of one finished tracking cycle: the
// report of one window and how it came.
type Cycle struct {
	Start, End time.Time
	RTT        time.Duration // REAL request to reply
	// Answer is REAL request to the first byte of its reply: the VM
	// builds the report in this time, holding its tracker lock, so the
	// app's allocating threads stall for up to this long.
	Answer   time.Duration
	Raw      []byte              // the REAL payload
	Report   *allocreport.Report // nil when the payload did not parse
	ParseErr error
	packet   []byte // the reply's packet data, Raw's buffer
}

// Session tracks allocations of one process until its context ends: it
// speaks only DDM, cycles the tracker in windows and counts each report.
type Session struct {
	Serial string
	PID    int
	// API is the device's API level (0: not known). It decides what a
	// handshake without echo means (held, from Android 9) and whether a
	// VM that does not answer REAQ is one without the tracker (Android
	// 12) or merely slow (below, or not known: unsupported only after
	// UnansweredProbeLimit sessions in a row).
	API int
	// ReportCap is how many entries a full report of this VM holds
	// (0: MaxEntries, 65,535): ART 7 to 9 honour dalvik.vm.allocTrackerMax
	// and dalvik.vm.recentAllocMax, so a report can be full with fewer.
	ReportCap int
	// CheckFiltered: an app Accept turns away is still asked once whether
	// its tracker is on (REAQ; not on Android 12+, where nothing answers):
	// no VM turns tracking off when its client leaves, so an earlier, wider
	// run may have left it on. TurnOffOrphan then turns it off.
	CheckFiltered, TurnOffOrphan bool
	// OnHeld, if set, is called when the VM leaves the handshake
	// unanswered (another debugger holds it, Android 9+); the session then
	// waits on the same connection for up to Config.HeldWait, since the VM
	// takes it once the holder leaves.
	OnHeld func()
	// UnansweredProbes is how many sessions of this process in a row met
	// an unanswered REAQ before this one: on Android 9 to 11, the
	// UnansweredProbeLimit-th in a row counts as a VM without the tracker.
	UnansweredProbes int
	// Open opens the process's JDWP stream (jdwp:<pid> through adb).
	Open func(ctx context.Context) (io.ReadWriteCloser, error)
	// Accept decides from the app name whether to track it (nil: all).
	Accept func(app string) bool
	// Bind is called once the app is named; it returns the counters and
	// stats to update (shared by every process of the same app).
	Bind   func(app string) (*alloctrack.Counters, *alloctrack.AppStats)
	Config Config
	// Slots limits concurrent REAL transfers on the device (nil: none).
	Slots chan struct{}
	// OnWindow, if set, sees every cycle and, when its report parsed,
	// its window (capture uses it).
	OnWindow func(c *Cycle, w *alloctrack.Window)
	// Buffers, if set, lends the buffers reports are read into (and
	// bounds how many are read at once); each window's payload goes back
	// once the window is counted, so OnWindow must not keep the Cycle,
	// its Raw or its Report, or the Window.
	Buffers *jdwp.Buffers
	// Allocs, if set (with Buffers), lends and takes back the arrays
	// reports' allocations are parsed into.
	Allocs *AllocArrays
	// Stop, when closed, ends the session gracefully: one last report is
	// fetched for the window under way, then tracking is turned off and
	// Run returns nil. Cancelling Run's context instead drops that window,
	// unless its report was already asked for: that one is still awaited
	// (for at most DisableTimeout) and counted.
	Stop <-chan struct{}
	// CycleNow, when it receives, ends the window under way at once, as
	// its timer does (test mode cycles when the runner logs a finished
	// test, so that the cycle falls between tests).
	CycleNow <-chan struct{}
	// EnableEarly: a VM that is not named yet ("<pre-initialized>") gets
	// its tracker turned on right after HELO, before its name comes;
	// Accept and Bind run once it does, and an app Accept turns away has
	// tracking turned off again. A test run's fresh process is tracked so
	// before its first test (docs/test-runs.md).
	EnableEarly bool
	Log         *zap.Logger
	now         func() time.Time
}

// Run opens the session and runs windows until ctx ends (nil is returned)
// or something fails. On the way out it disables tracking, bounded by
// DisableTimeout, whatever the reason.
func (s *Session) Run(ctx context.Context) (err error) {
	cfg := s.Config
	cfg.Fill()
	log := s.Log
	if log == nil {
		log = zap.NewNop()
	}
	if s.now == nil {
		s.now = time.Now
	}

	openCtx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	rwc, err := s.Open(openCtx)
	cancel()
	if err != nil {
		return alloctrack.StageErrorf(alloctrack.StageConnect, "opening jdwp:%d: %w", s.PID, err)
	}
	names := make(chan string, 4)
	var waiting atomic.Bool // the VM sent WAIT
	conn, err := s.handshake(ctx, rwc, cfg, names, &waiting)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := ddms.NewClient(conn)

	app, err := s.hello(ctx, client, cfg, names, &waiting)
	if err != nil {
		return err
	}
	early := app == "" // EnableEarly and not named yet
	if early {
		if err := s.enable(ctx, client, cfg, alloctrack.NewAppStats(s.Serial, s.PID), log); err != nil {
			return enableErr(ctx, err)
		}
		if app, err = s.awaitName(ctx, cfg, names, alloctrack.PreInitialized); err != nil {
			s.disable(ctx, client, cfg)
			return err
		}
	}
	if s.Accept != nil && !s.Accept(app) {
		if early {
			return s.turnAway(ctx, client, cfg, app)
		}
		return s.checkFiltered(ctx, client, cfg, app)
	}
	counters, stats := s.Bind(app)
	stats.Update(func(st *alloctrack.AppStatus) { st.PID, st.AppName, st.Package = s.PID, app, app })
	log = log.With(zap.String("package", app))
	if !early {
		if err := s.enable(ctx, client, cfg, stats, log); err != nil {
			return enableErr(ctx, err)
		}
	}
	defer func() {
		derr := s.disable(ctx, client, cfg)
		switch {
		case derr == nil:
			log.Debug("tracking disabled")
		case conn.Err() != nil || closedByPeer(derr) || errors.Is(derr, jdwp.ErrClosed):
			// The process or its stream is gone: nothing is left tracking.
			log.Debug("app gone before tracking could be disabled", zap.Error(derr))
		default:
			stats.CountError(alloctrack.StageDisable)
			log.Warn("could not confirm tracking is off", zap.Error(derr))
		}
	}()
	stats.SetState(alloctrack.StateTracking)
	log.Info("tracking allocations", zap.Duration("window", cfg.Window))

	window := cfg.Window
	start := s.now()
	timer := time.NewTimer(window)
	defer timer.Stop()
	for {
		stats.Update(func(st *alloctrack.AppStatus) { st.Window = window })
		last := false
		select {
		case <-ctx.Done():
			return nil
		case <-conn.Done():
			return alloctrack.StageErrorf(alloctrack.StageReport, "%w: %w", alloctrack.ErrStreamEnded, conn.Err())
		case <-s.Stop:
			last = true
		case <-timer.C:
		case <-s.CycleNow:
		}
		if s.Slots != nil {
			select {
			case s.Slots <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
		}
		w, err := s.cycle(ctx, client, cfg, !last)
		if s.Slots != nil {
			<-s.Slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if conn.Err() != nil {
				return alloctrack.StageErrorf(alloctrack.StageReport, "%w: %w", alloctrack.ErrStreamEnded, err)
			}
			stats.CountError(alloctrack.StageReport)
			return alloctrack.StageErrorf(alloctrack.StageReport, "%w", err)
		}
		w.Start = start
		start = w.End
		var win *alloctrack.Window
		if w.ParseErr != nil {
			stats.CountError(alloctrack.StageParse)
			log.Warn("report did not parse; window lost", zap.Error(w.ParseErr), zap.Int("bytes", len(w.Raw)))
		} else {
			win = WindowOfReport(w.Report, w.Start, w.End)
			counters.Add(win)
			n := len(w.Report.Allocations)
			reportCap := allocreport.MaxEntries
			if s.ReportCap > 0 && s.ReportCap < allocreport.MaxEntries {
				reportCap = s.ReportCap
			}
			over := n >= reportCap
			log.Debug("report counted", zap.Int("allocations", n), zap.Bool("overflowed", over), zap.Duration("rtt", w.RTT))
			stats.Update(func(st *alloctrack.AppStatus) {
				st.Windows++
				if over {
					st.Overflowed++
				}
				st.LastReportEntries = n
				st.RTT.Observe(w.RTT.Seconds())
				st.Answer.Observe(w.Answer.Seconds())
			})
			switch {
			case over:
				window = max(window/2, cfg.MinWindow)
				log.Debug("report overflowed; shorter window", zap.Duration("window", window))
			case n < reportCap/4 && window < cfg.Window:
				window = min(window*3/2, cfg.Window)
			}
			// Every window costs the app its report's round trip, blind
			// and partly stalled (docs/ddm-devices.md): a window is at
			// least RTTFloor round trips, so that this stays a small share.
			window = min(max(window, time.Duration(cfg.RTTFloor)*w.RTT), cfg.Window)
		}
		stats.Update(func(st *alloctrack.AppStatus) { st.ReportBytes += uint64(len(w.Raw)) })
		if s.OnWindow != nil {
			s.OnWindow(w, win)
		}
		if win != nil {
			win.Release()
		}
		if s.Buffers != nil {
			// Nothing refers to the payload any more: Add keeps no part
			// of a report.
			s.Buffers.Put(w.packet)
			if w.Report != nil {
				s.Allocs.put(w.Report.Allocations)
			}
			w.Raw, w.Report = nil, nil
		}
		if last {
			return nil
		}
		timer.Reset(window)
	}
}

// enable probes the tracker (a VM that never answers REAQ cannot track,
// Android 12+) and turns it on, restarting one left on by an earlier
// client. A nil error with ctx ended means the session is over.
func (s *Session) enable(ctx context.Context, client *ddms.Client, cfg Config, stats *alloctrack.AppStats, log *zap.Logger) error {
	pctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	on, err := client.AllocTracking(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ddms.ErrEmptyReply) {
			// Android 12+ VMs answer REAQ with nothing (or, with libjdwp
			// loaded, an empty reply). Below that the tracker exists: a
			// slow answer is retried, unless it keeps happening.
			// An API level not known is no evidence: it is retried as
			// a slow VM is.
			if s.API >= alloctrack.APIHeapprofd || s.UnansweredProbes+1 >= UnansweredProbeLimit {
				stats.SetState(alloctrack.StateUnsupported)
				return alloctrack.ErrUnsupported
			}
			stats.CountError(alloctrack.StageProbe)
			return alloctrack.StageErrorf(alloctrack.StageProbe, "%w (%d in a row): %w", alloctrack.ErrProbeUnanswered, s.UnansweredProbes+1, err)
		}
		stats.CountError(alloctrack.StageProbe)
		return alloctrack.StageErrorf(alloctrack.StageProbe, "%w", err)
	}
	if on {
		// Left on by an earlier client: its records are not ours.
		log.Info("allocation tracking was already on; restarting it")
		if err := client.SetAllocTracking(false); err != nil {
			return alloctrack.StageErrorf(alloctrack.StageProbe, "%w", err)
		}
	}
	if err := client.SetAllocTracking(true); err != nil {
		return alloctrack.StageErrorf(alloctrack.StageProbe, "%w", err)
	}
	return nil
}

// enableErr is what Run returns when enable failed: nil once ctx has
// ended (the session was stopped, not broken).
func enableErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// turnAway ends the session of an app tracked before it was named
// (EnableEarly) that Accept turned away: its tracker is turned off.
func (s *Session) turnAway(ctx context.Context, client *ddms.Client, cfg Config, app string) error {
	fe := &FilteredError{App: app, TrackingOn: true}
	fe.Stopped = s.disable(ctx, client, cfg) == nil
	return fe
}

// handshake opens JDWP on the stream. A VM that closes the stream during
// the handshake is held by another debugger.
func (s *Session) handshake(ctx context.Context, rwc io.ReadWriteCloser, cfg Config, names chan<- string, waiting *atomic.Bool) (*jdwp.Conn, error) {
	opts := jdwp.Options{
		MaxPacketSize: cfg.MaxPacketSize,
		Buffers:       s.Buffers,
		OnCommand: func(p jdwp.Packet) {
			if !ddms.IsDDM(p.CommandSet, p.Command) {
				return
			}
			ch, err := ddms.DecodeChunk(p.Data)
			if err != nil {
				return
			}
			switch ch.Type {
			case ddms.WAIT:
				waiting.Store(true)
			case ddms.APNM:
				if name := appName(ch.Data); name != "" {
					select {
					case names <- name:
					default:
					}
				}
			}
		},
	}
	maxPacket := cfg.MaxPacketSize
	if maxPacket <= 0 {
		maxPacket = jdwp.DefaultMaxPacketSize
	}
	hctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	err := jdwp.ClientHandshakeEarly(hctx, rwc, maxPacket, opts.OnCommand)
	cancel()
	hangs := s.API >= APIHangsHeld || s.API == 0
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && hangs && s.OnHeld != nil && cfg.HeldWait > 0 {
		// adb said OKAY and our handshake was written; a VM that leaves
		// it unread is held (Android 9+). Our connection waits in its
		// queue, and is taken when the holder leaves: wait on it rather
		// than open another, which would queue one more.
		s.OnHeld()
		wctx, wcancel := context.WithTimeout(ctx, cfg.HeldWait)
		err = jdwp.AwaitHandshakeEcho(wctx, rwc, maxPacket, opts.OnCommand)
		wcancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			rwc.Close()
			return nil, alloctrack.StageErrorf(alloctrack.StageHello, "%w (no handshake echo within %v)", alloctrack.ErrHeld, cfg.RequestTimeout+cfg.HeldWait)
		}
	}
	if err != nil {
		rwc.Close()
		switch {
		case closedByPeer(err):
			return nil, alloctrack.StageErrorf(alloctrack.StageHello, "%w (%v)", alloctrack.ErrHeld, err)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && hangs:
			return nil, alloctrack.StageErrorf(alloctrack.StageHello, "%w (no handshake echo within %v)", alloctrack.ErrHeld, cfg.RequestTimeout)
		}
		return nil, alloctrack.StageErrorf(alloctrack.StageHello, "JDWP handshake: %w", err)
	}
	return jdwp.NewConn(rwc, opts), nil
}

// FilteredError is the error of a session whose app Accept turned away:
// it matches ErrFiltered, and says whether the app's tracker was found on
// (an orphan: nobody reads it) and whether it was turned off.
type FilteredError struct {
	App                 string
	TrackingOn, Stopped bool
}

func (e *FilteredError) Error() string {
	switch {
	case e.Stopped:
		return fmt.Sprintf("alloctrack: %s is excluded by the package filter; its allocation tracker was left on and is now off", e.App)
	case e.TrackingOn:
		return fmt.Sprintf("alloctrack: %s is excluded by the package filter, and its allocation tracker was left on", e.App)
	}
	return fmt.Sprintf("alloctrack: %s is excluded by the package filter", e.App)
}

func (e *FilteredError) Is(target error) bool { return target == alloctrack.ErrFiltered }

// checkFiltered ends the session of an app the filter turns away, asking
// first whether its tracker was left on (see CheckFiltered).
func (s *Session) checkFiltered(ctx context.Context, c *ddms.Client, cfg Config, app string) error {
	fe := &FilteredError{App: app}
	if !s.CheckFiltered || s.API == 0 || s.API >= alloctrack.APIHeapprofd {
		return fe
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	on, err := c.AllocTracking(pctx)
	cancel()
	if err != nil || !on {
		return fe
	}
	fe.TrackingOn = true
	if s.TurnOffOrphan {
		if err := s.disable(ctx, c, cfg); err == nil {
			fe.Stopped = true
		}
	}
	return fe
}

// appName is the name an APNM gives, "" when it names no app yet: a VM
// says "" before ActivityThread.attach and "<pre-initialized>" from then
// until the app is bound (as the process name and, from Android 10, as
// the package name too).
func appName(b []byte) string {
	a, err := ddms.DecodeAppName(b)
	if err != nil {
		return ""
	}
	for _, n := range []string{a.Name, a.PackageName} {
		if n != "" && n != alloctrack.PreInitialized {
			return n
		}
	}
	return ""
}

func (s *Session) hello(ctx context.Context, c *ddms.Client, cfg Config, names <-chan string, waiting *atomic.Bool) (string, error) {
	hctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	h, err := c.Hello(hctx)
	cancel()
	if waiting.Load() {
		// The VM sends WAIT while it handles HELO, before the reply.
		return "", alloctrack.ErrWaiting
	}
	if err != nil {
		return "", alloctrack.StageErrorf(alloctrack.StageHello, "%w", err)
	}
	app := h.AppName
	if app == alloctrack.PreInitialized {
		app = ""
	}
	if app == "" && !s.EnableEarly {
		return s.awaitName(ctx, cfg, names, h.AppName)
	}
	return app, nil
}

// awaitName waits for the VM's APNM naming its app (was: what HELO said).
func (s *Session) awaitName(ctx context.Context, cfg Config, names <-chan string, was string) (string, error) {
	select {
	case app := <-names:
		return app, nil
	case <-time.After(cfg.NameTimeout):
		return "", alloctrack.StageErrorf(alloctrack.StageHello, "app not named within %v (still %q)", cfg.NameTimeout, was)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// cycle runs the end of one window: REAL, REAE 0 and REAE 1 written in one
// burst (the VM handles them in order, so the next window starts as soon as
// the report is built), then the REAL reply awaited and parsed. The last
// window of a session leaves REAE 1 out.
func (s *Session) cycle(ctx context.Context, c *ddms.Client, cfg Config, again bool) (*Cycle, error) {
	t0 := s.now()
	wait, err := c.StartAllocationsOwned()
	if err != nil {
		return nil, err
	}
	if err := c.SetAllocTracking(false); err != nil {
		return nil, err
	}
	if again {
		if err := c.SetAllocTracking(true); err != nil {
			return nil, err
		}
	}
	// The VM builds and sends the report whatever happens here next, so
	// it is awaited even when ctx ends meanwhile (the pid left the
	// device's list, the device left, the daemon is stopping): dropping
	// it would lose records the VM no longer has. Once ctx has ended, the
	// wait is cut to DisableTimeout, as turning tracking off is.
	var first time.Time
	rctx, cancel := context.WithTimeout(jdwp.WithFirstByte(context.WithoutCancel(ctx), &first), cfg.ReportTimeout)
	defer cancel()
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(cfg.DisableTimeout, cancel) })
	defer stopGrace()
	raw, packet, err := wait(rctx)
	if err != nil {
		s.Buffers.Put(packet)
		return nil, err
	}
	w := &Cycle{End: t0, RTT: s.now().Sub(t0), Raw: raw, packet: packet}
	if !first.IsZero() {
		w.Answer = first.Sub(t0)
	}
	w.Report, w.ParseErr = allocreport.ParseReusing(raw, s.Allocs.get())
	return w, nil
}

// disable turns tracking off and confirms it, within DisableTimeout even
// when ctx has ended.
func (s *Session) disable(ctx context.Context, c *ddms.Client, cfg Config) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.DisableTimeout)
	defer cancel()
	if err := c.SetAllocTracking(false); err != nil {
		return err
	}
	on, err := c.AllocTracking(dctx)
	if err != nil {
		return err
	}
	if on {
		return errors.New("tracking still on after REAE 0")
	}
	return nil
}

// closedByPeer tells whether err means the other end closed the stream.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrClosedPipe) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// AllocArrays keeps the allocation arrays of counted reports, at most keep
// of them, for the next reports' parses, and drops one no parse has taken
// for idle (0: never). A nil *AllocArrays keeps none.
type AllocArrays struct {
	mu   sync.Mutex
	free []freeAllocs
	keep int
	idle time.Duration
	now  func() time.Time
}

type freeAllocs struct {
	a     []allocreport.Allocation
	since time.Time // when it was given back
}

// NewAllocArrays returns a pool that keeps at most keep arrays, each for
// at most idle unused.
func NewAllocArrays(keep int, idle time.Duration) *AllocArrays {
	return &AllocArrays{keep: keep, idle: idle, now: time.Now}
}

// trimLocked drops the arrays free for idle or longer.
func (p *AllocArrays) trimLocked() {
	if p.idle <= 0 {
		return
	}
	now := p.now()
	kept := p.free[:0]
	for _, f := range p.free {
		if now.Sub(f.since) < p.idle {
			kept = append(kept, f)
		}
	}
	clear(p.free[len(kept):])
	p.free = kept
}

// get returns a free array (nil if there is none); its contents are stale.
func (p *AllocArrays) get() []allocreport.Allocation {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trimLocked()
	n := len(p.free)
	if n == 0 {
		return nil
	}
	a := p.free[n-1].a
	p.free[n-1] = freeAllocs{}
	p.free = p.free[:n-1]
	return a
}

// put takes back an array nothing refers to any more. Arrays too small to
// be worth keeping are dropped, and so are any beyond keep.
func (p *AllocArrays) put(a []allocreport.Allocation) {
	if p == nil || cap(a) < 1024 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trimLocked()
	if len(p.free) < p.keep {
		p.free = append(p.free, freeAllocs{a[:0], p.now()})
	}
}
