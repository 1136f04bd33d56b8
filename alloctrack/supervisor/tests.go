// Instrumentation runs in the daemon: each device's logcat is followed
// for the test runner's lines, and every tracked process that logs them
// (or, on DDM, whose report holds the runner's listener) gets a
// pertest.Attributor fed with its events and its windows' reports (DDM)
// or its heapprofd dumps (Android 12+). Each app keeps its last finished
// tests and the one running now (docs/test-runs.md, "In the daemon").

package supervisor

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"

	"go.uber.org/zap"
)

// LogcatSource is a Source that can follow the test runner's lines in a
// device's logcat (internal/source's ADB is one). Logcat starts `logcat`
// with the options the device's API level accepts, showing the tag
// TestRunner in the threadtime layout, from API 31 with stamps of
// REALTIME (-v epoch,nsec), from the entries strictly after since (a
// stamp as read: "MM-DD hh:mm:ss.mmm", or "sss.nnnnnnnnn" from API 31;
// "": from now on, or from the start of the buffer where logcat cannot
// start later), and returns its output until ctx ends or logcat exits.
// It never clears the log.
type LogcatSource interface {
	Logcat(ctx context.Context, serial string, api int, since string) (io.ReadCloser, error)
}

// TestsConfig says how the daemon follows instrumentation runs.
type TestsConfig struct {
	// Follow: read the runner's lines in each device's logcat and split
	// the reports (DDM) or dumps (heapprofd) of the processes that log
	// them among their tests (only with a Source that is a LogcatSource).
	Follow bool
	// Recent is how many finished tests each app keeps (default 50).
	Recent int
	// Top is how many classes each kept test lists (default 5).
	Top int
	// Grace is how long a process's run stays open after the process
	// left, for its last logcat lines to arrive (default 1 s).
	Grace time.Duration
	// Refresh is how often the tests of a run that was fed are updated
	// for the snapshot (default 1 s): a run's state is built from all
	// its tests, so it is not built again for every line and report.
	Refresh time.Duration
	// DumpInterval is heapprofd's dump interval on a device while a run
	// is followed there (default 250 ms): each test boundary's error. The
	// device's session is restarted with it when a run starts, and with
	// Heapprofd.DumpInterval again once no run has been open for
	// FastLinger (default 1 min, so that runs back to back keep it).
	DumpInterval time.Duration
	FastLinger   time.Duration
}

func (c *TestsConfig) fill() {
	if c.Recent <= 0 {
		c.Recent = 50
	}
	if c.Top <= 0 {
		c.Top = 5
	}
	if c.Grace <= 0 {
		c.Grace = time.Second
	}
	if c.Refresh <= 0 {
		c.Refresh = time.Second
	}
	if c.DumpInterval <= 0 {
		c.DumpInterval = 250 * time.Millisecond
	}
	c.DumpInterval = max(c.DumpInterval, 100*time.Millisecond) // heapprofd.Config's least
	if c.FastLinger <= 0 {
		c.FastLinger = time.Minute
	}
}

// Bounds of what is kept for processes no session has named (yet): the
// runner's lines of a process come before its session binds it, or come
// from a process nobody tracks.
const (
	maxPendingPIDs   = 64
	maxPendingEvents = 256
)

// maxHeldDumps bounds the heapprofd dumps kept of a named process that
// has logged no runner line: its dumps read before its first line reached
// the host (its start, say) are its run's once that line comes.
const maxHeldDumps = 8

type pendingEvent struct {
	at time.Time
	ev instrument.RunnerEvent
}

type heldDump struct {
	w        *alloctrack.Window
	from, to time.Time
}

// attributor is what the follower asks of a pertest.Attributor.
type attributor interface {
	Event(pid int, at time.Time, ev instrument.RunnerEvent)
	Report(pid int, r *allocreport.Report, overflowed bool) error
	Dump(pid int, w *alloctrack.Window, from, to time.Time) error
	Gone(pid int)
	Snapshot() *pertest.Run
	Finish() *pertest.Run
}

// taker is an attributor that can drop the tests the daemon has taken
// (pertest.Attributor.Taken).
type taker interface{ Taken(n int) }

// taken tells p's attributor how many leading tests its app has taken.
func (p *pidTests) taken(n int) {
	if t, ok := p.att.(taker); ok {
		t.Taken(n)
	}
}

var _ attributor = (*pertest.Attributor)(nil)

// newAttributor is Lean: the daemon keeps of each test only its summary
// (appTests), and a run lasts as long as its process, so it drops the
// tests the app has taken, holding about 2*Keep (--tests.recent).
func newAttributor(cfg pertest.Config) attributor {
	cfg.Lean = true
	return pertest.New(cfg)
}

// pidTests is one process of a device, as the test follower knows it.
type pidTests struct {
	app     string
	tests   *appTests // nil until a session named the process
	att     attributor
	pending []pendingEvent
	held    []heldDump
	gone    bool
	open    bool        // its last runner line started a test
	goneAt  time.Time   // when its run is finished (gone)
	timer   *time.Timer // finishes it then
	dirty   bool        // fed since the app's tests were last updated
}

// followOpts say how a device's runs are measured.
type followOpts struct {
	backend string // alloctrack.BackendDDM (the zero value) or BackendHeapprofd
	// active, if set, is told (f.mu held) when the device's first run
	// opens (true), and once no run has been open for FastLinger (false).
	active func(bool)
}

// testFollower follows one device's instrumentation runs.
type testFollower struct {
	d      *Daemon
	serial string
	api    int
	log    *zap.Logger
	opts   followOpts

	done chan struct{} // follow and refreshing returned

	mu     sync.Mutex
	pids   map[int]*pidTests
	cycle  map[int]chan struct{} // per tracked process: ask its session for a new window
	closed bool
	runs   int         // processes with an attributor
	idle   *time.Timer // tells active(false) once no run was open for FastLinger
}

// followTests starts following the instrumentation runs of a device
// until ctx ends, if the daemon is to and src can read logcat; nil if
// not. The caller closes it once the device's sessions have ended.
func (d *Daemon) followTests(ctx context.Context, src Source, serial string, api int, opts followOpts, log *zap.Logger) *testFollower {
	ls, ok := src.(LogcatSource)
	if !d.cfg.Tests.Follow || !ok {
		return nil
	}
	if opts.backend == "" {
		opts.backend = alloctrack.BackendDDM
	}
	f := &testFollower{d: d, serial: serial, api: api, log: log, opts: opts, pids: map[int]*pidTests{}, cycle: map[int]chan struct{}{}, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		var wg sync.WaitGroup
		wg.Go(func() { f.follow(ctx, ls) })
		wg.Go(func() { f.refreshing(ctx) })
		wg.Wait()
	}()
	return f
}

// refreshing updates the tests of the runs fed since the last tick until
// ctx ends.
func (f *testFollower) refreshing(ctx context.Context) {
	t := time.NewTicker(f.d.cfg.Tests.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.refresh()
	}
}

// refresh updates the tests of the runs fed since it last did.
func (f *testFollower) refresh() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for pid, p := range f.pids {
		if p.dirty && p.att != nil {
			p.dirty = false
			p.taken(p.tests.update(pid, p.att.Snapshot(), false))
		}
	}
}

// entry returns pid's entry, making one; d.mu is not needed, f.mu is held.
func (f *testFollower) entry(pid int) *pidTests {
	p := f.pids[pid]
	if p != nil {
		return p
	}
	unnamed := 0
	for q, e := range f.pids {
		if e.tests == nil {
			unnamed++
			if unnamed >= maxPendingPIDs {
				delete(f.pids, q) // a process nobody tracks
			}
		}
	}
	p = &pidTests{}
	f.pids[pid] = p
	return p
}

// start gives process pid (p) its attributor, fed the dumps held.
func (f *testFollower) start(pid int, p *pidTests) {
	if p.att != nil {
		return
	}
	cfg := pertest.Config{Serial: f.serial, Package: p.app, API: f.api, Backend: f.opts.backend, Top: f.d.cfg.Tests.Top,
		Keep: f.d.cfg.Tests.Recent}
	if cfg.Backend == alloctrack.BackendHeapprofd {
		cfg.DumpInterval = f.d.cfg.Tests.DumpInterval
	}
	p.att = f.d.newAttributor(cfg)
	f.log.Info("following an instrumentation run", zap.String("package", p.app), zap.String("backend", cfg.Backend))
	for _, h := range p.held {
		f.feedDump(pid, p, h.w, h.from, h.to)
	}
	p.held = nil
	f.runs++
	if f.idle != nil {
		f.idle.Stop()
		f.idle = nil
	}
	if f.runs == 1 && f.opts.active != nil {
		f.opts.active(true)
	}
}

// ran says a run ended: once none has been open for FastLinger, active
// is told.
func (f *testFollower) ran() {
	f.runs--
	if f.runs > 0 || f.opts.active == nil || f.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(f.d.cfg.Tests.FastLinger, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.idle == t && f.runs == 0 && !f.closed {
			f.idle = nil
			f.opts.active(false)
		}
	})
	f.idle = t
}

// event takes one runner line of process pid.
func (f *testFollower) event(pid int, at time.Time, ev instrument.RunnerEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	p := f.entry(pid)
	if p.tests == nil {
		if len(p.pending) < maxPendingEvents {
			p.pending = append(p.pending, pendingEvent{at, ev})
		}
		return
	}
	f.start(pid, p)
	p.feedEvent(pid, at, ev)
	if ev.Kind == instrument.TestFinished {
		select { // a new window, unless one is asked already
		case f.cycle[pid] <- struct{}{}:
		default:
		}
	}
}

// feedEvent gives one runner line to p's attributor.
func (p *pidTests) feedEvent(pid int, at time.Time, ev instrument.RunnerEvent) {
	p.att.Event(pid, at, ev)
	switch ev.Kind {
	case instrument.TestStarted:
		p.open = true
	case instrument.TestFinished, instrument.RunFinished:
		p.open = false
	}
	p.dirty = true
}

// cycles returns the channel on which process pid's session is asked to
// end its window when a test of the process finishes: with the runner's
// -e delay_msec, the cycle falls in the pause and no test crosses it.
func (f *testFollower) cycles(pid int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cycle[pid] == nil {
		f.cycle[pid] = make(chan struct{}, 1)
	}
	return f.cycle[pid]
}

// bound says a session named process pid app: its runner lines read so
// far go to a new attributor.
func (f *testFollower) bound(pid int, app string, t *appTests) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	p := f.entry(pid)
	if p.tests != nil {
		return // a later session of the same process
	}
	p.app, p.tests = app, t
	if len(p.pending) == 0 {
		return
	}
	f.start(pid, p)
	for _, e := range p.pending {
		p.feedEvent(pid, e.at, e.ev)
	}
	p.pending = nil
	p.dirty = true
}

// report takes one window's report of process pid; it keeps nothing of
// r. A process that has logged no runner line yet is followed from the
// first report that holds the runner's listener.
func (f *testFollower) report(pid int, r *allocreport.Report, overflowed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pids[pid]
	if f.closed || p == nil || p.tests == nil || p.att == nil && !holdsListener(r) {
		return
	}
	f.start(pid, p)
	if err := p.att.Report(pid, r, overflowed); err != nil {
		f.d.logs.warn(f.log, "tests/"+f.serial, "a report could not be split among tests", err)
	}
	p.dirty = true
}

// listenerSuffix ends the class names of AndroidX Test's (and the support
// library's) LogRunListener, whose allocations mark test boundaries.
const listenerSuffix = ".test.internal.runner.listener.LogRunListener"

// holdsListener tells whether a report names the runner's listener.
func holdsListener(r *allocreport.Report) bool {
	for _, c := range r.Classes {
		if strings.HasSuffix(c, listenerSuffix) {
			return true
		}
	}
	return false
}

// dump takes one heapprofd dump of process pid, with the device time
// (REALTIME) it covers; it keeps nothing of w. The last dumps of a named
// process that has logged no runner line are held (copied) for the run
// its first line starts.
func (f *testFollower) dump(pid int, w *alloctrack.Window, from, to time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pids[pid]
	switch {
	case f.closed || p == nil || p.tests == nil:
	case p.att == nil:
		if len(p.held) == maxHeldDumps {
			p.held = append(p.held[:0], p.held[1:]...)
		}
		p.held = append(p.held, heldDump{pertest.CopyWindow(w), from, to})
	default:
		f.feedDump(pid, p, w, from, to)
	}
}

func (f *testFollower) feedDump(pid int, p *pidTests, w *alloctrack.Window, from, to time.Time) {
	if err := p.att.Dump(pid, w, from, to); err != nil {
		f.d.logs.warn(f.log, "tests/"+f.serial, "a heapprofd dump could not be split among tests", err)
	}
	p.dirty = true
}

// gone says process pid's sessions ended: its run is finished once its
// last logcat lines had Grace to arrive.
func (f *testFollower) gone(pid int) { f.goneAfter(pid, f.d.cfg.Tests.Grace) }

// goneAfter says process pid ended: its run is finished after wait (for
// its last lines and dumps to arrive), or sooner if told so again.
func (f *testFollower) goneAfter(pid int, wait time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.cycle, pid)
	p := f.pids[pid]
	if p == nil {
		return
	}
	if p.att == nil {
		delete(f.pids, pid)
		return
	}
	at := time.Now().Add(wait)
	if p.gone && !at.Before(p.goneAt) {
		return
	}
	p.gone, p.goneAt = true, at
	if p.timer != nil {
		p.timer.Reset(wait)
		return
	}
	p.timer = time.AfterFunc(wait, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.pids[pid] == p {
			f.finishLocked(pid, p)
		}
	})
}

func (f *testFollower) finishLocked(pid int, p *pidTests) {
	delete(f.pids, pid)
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.att == nil {
		return
	}
	if f.opts.backend != alloctrack.BackendHeapprofd || p.open {
		// On heapprofd only a test left open is cut short: a dump ends at
		// its newest sample, so that a finished test's end after the
		// process's last dump misses nothing.
		p.att.Gone(pid)
	}
	p.tests.update(pid, p.att.Finish(), true)
	p.dirty = false
	f.ran()
}

// close waits for the logcat reader (ctx has ended) and finishes every
// run at once: the device's follower ends.
func (f *testFollower) close() {
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	for pid, p := range f.pids {
		f.finishLocked(pid, p)
	}
	f.closed = true
	if f.idle != nil {
		f.idle.Stop()
	}
}

// follow reads the device's logcat until ctx ends, starting it again with
// backoff whenever it ends, from after the last entry read.
func (f *testFollower) follow(ctx context.Context, src LogcatSource) {
	var pos logPos
	key := "logcat/" + f.serial
	defer f.d.logs.forget(key)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		n, err := f.read(ctx, src, &pos)
		if ctx.Err() != nil {
			return
		}
		if n > 0 {
			attempt = 0
		}
		if err == nil {
			err = errors.New("logcat exited")
		}
		f.d.countDeviceError(f.serial, alloctrack.StageLogcat)
		f.d.logs.warn(f.log, key, "logcat of the test runner ended; starting it again", err)
		if !sleepCtx(ctx, f.d.backoff(attempt)) {
			return
		}
	}
}

// read runs logcat once, from after pos; it returns how many entries it
// read.
func (f *testFollower) read(ctx context.Context, src LogcatSource, pos *logPos) (int, error) {
	rc, err := src.Logcat(ctx, f.serial, f.api, pos.last.Text)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	lr := instrument.NewLogReader(rc)
	n := 0
	seen := pos.resume()
	var other string // the first line that is no entry (logcat's own complaint)
	for {
		rec, err := lr.Next()
		if errors.Is(err, io.EOF) {
			if n == 0 && other != "" {
				return 0, errors.New("logcat printed " + other)
			}
			return n, nil
		}
		var syn *instrument.SyntaxError
		if err != nil && !errors.As(err, &syn) {
			return n, err
		}
		switch {
		case rec.Kind == instrument.NotLogcat && other == "":
			other = strings.TrimSpace(rec.Text)
		case rec.Kind == instrument.LogEntry:
			if !seen.fresh(rec.Entry.Stamp) {
				continue // read before logcat was started again
			}
			pos.advance(rec.Entry.Stamp)
			n++
			if rec.Runner.Kind != instrument.NotRunner && rec.Runner.Kind != instrument.InException {
				f.event(rec.Entry.PID, deviceTime(rec.Entry.Stamp, time.Now()), rec.Runner)
			}
		}
	}
}

// logPos is where the follower stands in the device's log: the stamp of
// the last entry read and how many entries read carry that stamp. Stamps
// are to the millisecond, and the runner logs a failed test's lines, its
// exception and its finished: line in the same one: an entry is never
// dropped for sharing its stamp with the one before (that lost the
// finished: line of a failed test, and the cycle it asks for).
type logPos struct {
	last instrument.Stamp
	same int
}

func (p *logPos) advance(s instrument.Stamp) {
	if s.Text == p.last.Text {
		p.same++
		return
	}
	p.last, p.same = s, 1
}

// resume starts reading a new logcat stream from p.
func (p *logPos) resume() *replay { return &replay{last: p.last, skip: p.same} }

// replay drops, at the start of a logcat stream, the entries read
// already from an earlier one: those before the last stamp read, and as
// many at that stamp as were read (4.4 prints its whole buffer again; a
// logcat whose -T printed entries at the stamp too would print those).
// From the first entry not read before on, every entry is new, even one
// whose clock went back.
type replay struct {
	last   instrument.Stamp
	skip   int
	passed bool
}

// fresh tells whether an entry stamped s has not been read before.
func (r *replay) fresh(s instrument.Stamp) bool {
	if r.passed {
		return true
	}
	now := time.Now()
	t, l := deviceTime(s, now), deviceTime(r.last, now)
	switch {
	case !t.IsZero() && !l.IsZero() && t.Before(l):
		return false
	case !t.IsZero() && t.Equal(l) && r.skip > 0:
		r.skip--
		return false
	}
	r.passed = true
	return true
}

// deviceTime reads a threadtime stamp: the device's local time, taken as
// UTC (durations are right; the device's zone is not read), in the year
// that puts it nearest now; zero when it names no time.
func deviceTime(s instrument.Stamp, now time.Time) time.Time {
	if s.Text == "" {
		return time.Time{}
	}
	t, err := pertest.StampNear(s, now.UTC())
	if err != nil {
		return time.Time{}
	}
	return t
}
