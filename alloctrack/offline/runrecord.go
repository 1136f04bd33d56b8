package offline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
)

// RunRecorder records one instrumentation run of an app: it follows the
// runner's logcat lines, tracks every fresh process of the app as it
// appears (DDM, the tracker on before the app names itself), runs `am
// instrument` when Instrument is set, and feeds all of it into one
// pertest.Attributor. It knows nothing of adb: the functions below reach
// the device (see docs/test-runs.md, "Running a suite").
type RunRecorder struct {
	Serial  string
	API     int
	Package string // the app under test (the instrumentation's target)

	// Logcat starts following the runner's lines (tag TestRunner) from
	// now on; the stream ends when ctx does.
	Logcat func(ctx context.Context) (io.ReadCloser, error)
	// Instrument starts `am instrument -w -r ...` and returns its output
	// as it comes; nil when someone else runs the suite (capture --tests).
	Instrument func(ctx context.Context) (io.ReadCloser, error)
	// TrackJDWP follows the device's list of debuggable pids.
	TrackJDWP func(ctx context.Context, fn func([]int)) error
	// Open opens pid's JDWP stream.
	Open func(ctx context.Context, pid int) (io.ReadWriteCloser, error)
	// Abort, if set, ends a run cut short (stop, or the run's context),
	// once tracking is off: `am force-stop` of the app.
	Abort func(ctx context.Context) error

	// TrackExisting: processes of the app already running when Record
	// starts are tracked too (a run under way: its first tests are
	// partial). Without it only processes that appear later are.
	TrackExisting bool
	// Location is the device's time zone (persist.sys.timezone), for
	// logcat times printed without a zone (nil: UTC).
	Location *time.Location
	// Config is the DDM sessions'; its Window is the long timer of test
	// mode (the tracker also cycles on every finished test).
	Config ddm.Config
	// Heapprofd, if set, profiles the app's fresh processes with
	// heapprofd (Android 12+) instead of DDM: one perfetto session for the
	// device, by the app's process name, from before am starts the run
	// until its end; each dump goes to Attribution.Dump with its device
	// times. Logcat's stamps must then be REALTIME (-v epoch).
	Heapprofd *RunHeapprofd
	// Settle is how long the end of a run waits for the processes' last
	// reports and lines (default 5 s); capture --tests also ends when no
	// process of the app has been alive for this long after a run finished.
	Settle time.Duration

	Attributor Attribution
	Writer     *CaptureWriter // the usual capture files (nil: none)
	// LogcatOut and InstrumentOut, if set, get the raw text read.
	LogcatOut, InstrumentOut io.Writer
	Log                      *zap.Logger
}

// Attribution is what a RunRecorder feeds, in the order things happened on
// the device: *pertest.Attributor (its methods say what each call means).
type Attribution interface {
	Event(pid int, at time.Time, ev instrument.RunnerEvent)
	Status(ev instrument.Event)
	Result(r instrument.Result)
	Report(pid int, r *allocreport.Report, overflowed bool) error
	Dump(pid int, w *alloctrack.Window, from, to time.Time) error
	Gone(pid int)
	Finish() *pertest.Run
}

var _ Attribution = (*pertest.Attributor)(nil)

// RunRecord is how a recorded run ended.
type RunRecord struct {
	Run *pertest.Run
	// Am is am's result (Values, Code) when it ran; AmErr is why its
	// output ended without INSTRUMENTATION_CODE (nil when it had one): a
	// *instrument.FailedError (the run could not start), an error
	// wrapping instrument.ErrIncomplete, or a read error.
	Am    instrument.Result
	AmErr error
	// Tracked are the pids tracked as the app's, in the order they came.
	Tracked []int
	// Gone: the device went away (its JDWP list broke) during the run.
	Gone error
	// Stopped: the run was cut short by stop (a timeout, Ctrl-C).
	Stopped bool
	// Notes say what went wrong on the way (a session that failed, a
	// logcat read error), each in a sentence.
	Notes []string
}

// Record runs until the run ends (am's output ends; without Instrument:
// a run finished and no process of the app is left), stop is closed or
// ctx ends; then it reads what is left, turns tracking off and returns
// the run. An error is returned only when nothing could be started.
func (r *RunRecorder) Record(ctx context.Context, stop <-chan struct{}) (*RunRecord, error) {
	if r.Settle <= 0 {
		r.Settle = 5 * time.Second
	}
	if r.Log == nil {
		r.Log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := newRunState(r, ctx)
	lc, err := r.Logcat(ctx)
	if err != nil {
		return nil, fmt.Errorf("following logcat on %s: %w", r.Serial, err)
	}
	logDone := make(chan struct{})
	go func() { defer close(logDone); st.readLogcat(lc) }()
	defer func() { st.closeLog(lc); <-logDone }()

	first := make(chan struct{})
	jdwpDone := make(chan error, 1)
	jctx, jcancel := context.WithCancel(ctx)
	defer jcancel()
	go func() { jdwpDone <- r.TrackJDWP(jctx, func(pids []int) { st.pids(pids, first) }) }()
	select {
	case <-first:
		st.startHeapprofd()
	case err := <-jdwpDone:
		return nil, fmt.Errorf("listing debuggable processes on %s: %w", r.Serial, err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := &RunRecord{}
	amDone := make(chan struct{})
	if r.Instrument != nil {
		out, err := r.Instrument(ctx)
		if err != nil {
			st.stopSessions()
			return nil, fmt.Errorf("starting am instrument on %s: %w", r.Serial, err)
		}
		go func() { defer close(amDone); st.readAm(out, res) }()
		defer func() {
			out.Close()
			<-amDone
			if res.Stopped && res.AmErr != nil && !res.Am.HasCode {
				res.AmErr = fmt.Errorf("am instrument's output was cut when the run was stopped: %w", instrument.ErrIncomplete)
			}
		}()
	}
	res.Gone, res.Stopped = st.await(stop, amDone, jdwpDone)
	if res.Gone == nil && !res.Stopped && r.Instrument != nil && cutShort(res) {
		// am's output broke off: the device may have gone with it.
		res.Gone, res.Stopped = st.deviceGone(stop, jdwpDone)
	}
	st.finish(res, stop)
	st.closeLog(lc)
	<-logDone
	if st.logEnd != "" {
		res.Notes = append(res.Notes, st.logEnd)
	}
	return res, nil
}

// await waits for the run's end and says whether the device went away or
// the run was stopped.
func (s *runState) await(stop <-chan struct{}, amDone <-chan struct{}, jdwpDone <-chan error) (gone error, stopped bool) {
	if s.r.Instrument == nil {
		amDone = nil
	}
	for {
		select {
		case <-amDone:
			return nil, false
		case err := <-jdwpDone:
			if s.ctx.Err() != nil {
				return nil, true
			}
			return fmt.Errorf("the device's list of debuggable processes ended: %w", err), false
		case <-stop:
			return nil, true
		case <-s.ctx.Done():
			return nil, true
		case <-s.changed:
			if s.r.Instrument == nil && s.idleAfterRun() {
				return nil, false
			}
		}
	}
}

// cutShort tells whether am's output, read to its end, ended without the
// run's result, and not because am could not start the run.
func cutShort(res *RunRecord) bool {
	_, failed := errors.AsType[*instrument.FailedError](res.AmErr)
	return !res.Am.HasCode && !failed
}

// deviceGone waits (for at most Settle) for the JDWP list to break, after
// am's output ended without its result.
func (s *runState) deviceGone(stop <-chan struct{}, jdwpDone <-chan error) (gone error, stopped bool) {
	select {
	case err := <-jdwpDone:
		if s.ctx.Err() == nil {
			return fmt.Errorf("the device's list of debuggable processes ended: %w", err), false
		}
	case <-time.After(s.r.Settle):
	case <-stop:
		return nil, true
	}
	return nil, false
}

// idleAfterRun waits, while a run has finished and no process of the app
// is tracked, for Settle; it reports whether that time passed unchanged.
func (s *runState) idleAfterRun() bool {
	for s.runOver() {
		select {
		case <-time.After(s.r.Settle):
			return s.runOver()
		case <-s.changed:
		case <-s.ctx.Done():
			return false
		}
	}
	return false
}

// finish ends the run: it waits (for at most Settle) for the app's
// processes to end and logcat to give their last lines, then stops what
// is left, gracefully, aborts a run that was cut short, and finishes the
// attribution.
func (s *runState) finish(res *RunRecord, stop <-chan struct{}) {
	if !res.Stopped && res.Gone == nil {
		deadline := time.After(s.r.Settle)
	wait:
		for !s.settled() {
			select {
			case <-s.changed:
			case <-deadline:
				break wait
			case <-stop:
				res.Stopped = true
				break wait
			}
		}
	}
	s.stopSessions()
	if res.Stopped && s.r.Abort != nil && s.r.Instrument != nil {
		s.mu.Lock()
		s.aborted = true // what am says of the end we make is not the run's
		s.mu.Unlock()
		actx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.r.Settle)
		if err := s.r.Abort(actx); err != nil {
			s.note("ending the run on the device: %v", err)
		}
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.goneUntold()
	s.finished = true
	res.Run = s.r.Attributor.Finish()
	res.Tracked = append(res.Tracked, s.tracked...)
	res.Notes = append(res.Notes, s.notes...)
	if n := s.dropped(); n != "" {
		res.Run.Problems = append(res.Run.Problems, n)
	}
}

// note records a sentence for the result.
func (s *runState) note(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.notes) < maxNotes {
		s.notes = append(s.notes, fmt.Sprintf(format, args...))
	}
}

const maxNotes = 100

// readAm reads am's output into the attributor.
func (s *runState) readAm(out io.Reader, res *RunRecord) {
	if s.r.InstrumentOut != nil {
		out = io.TeeReader(out, s.r.InstrumentOut)
	}
	a := instrument.NewAmReader(out)
	for {
		ev, err := a.Next()
		if err != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			res.Am = a.Result()
			if errors.Is(err, io.EOF) && !s.aborted {
				s.r.Attributor.Result(res.Am)
			} else if err != io.EOF {
				res.AmErr = err
			}
			return
		}
		s.mu.Lock()
		if !s.aborted {
			s.r.Attributor.Status(ev)
		}
		if ev.Kind == instrument.Ended && ev.Outcome != instrument.Ignored && !s.ended[ev.Method+"("+ev.Class+")"] {
			// The status printer reports a test's end right after the
			// runner's finished: line: when logcat lost that line (a
			// full buffer), am's status still cycles the tracker.
			s.cycleAppLocked()
		}
		s.mu.Unlock()
	}
}

// cycleAppLocked asks every tracked process of the app for a new window
// (am's statuses name no process; one with nothing new only sends a
// short report).
func (s *runState) cycleAppLocked() {
	for _, p := range s.procs {
		if p.state != ofApp || p.cycle == nil {
			continue
		}
		select {
		case p.cycle <- struct{}{}:
		default:
		}
	}
}

// readLogcat reads the runner's lines into the attributor, until the
// stream ends.
func (s *runState) readLogcat(lc io.Reader) {
	src := lc
	if s.r.LogcatOut != nil {
		lc = io.TeeReader(lc, s.r.LogcatOut)
	}
	lr := instrument.NewLogReader(lc)
	for {
		rec, err := lr.Next()
		if _, ok := errors.AsType[*instrument.SyntaxError](err); ok {
			s.note("logcat: %v", err)
		} else if err != nil {
			s.logcatEnded(src, err)
			return
		}
		if rec.Kind != instrument.LogEntry {
			continue
		}
		switch rec.Runner.Kind {
		case instrument.NotRunner, instrument.InException:
			continue
		}
		s.event(rec.Entry.PID, StampTime(rec.Entry.Stamp, s.r.Location, time.Now()), rec.Runner)
	}
}

// closeLog ends the logcat stream; its end is no news then.
func (s *runState) closeLog(lc io.Closer) {
	s.mu.Lock()
	s.logClosed = true
	s.mu.Unlock()
	lc.Close()
}

// logcatEnded says (in logEnd) that the logcat stream ended before the run
// did (an option the device refused, logcat killed), with what it wrote on
// standard error when the stream keeps it. A clean end of stream is the
// command's own; Record's close gives an error.
func (s *runState) logcatEnded(src io.Reader, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logClosed && !errors.Is(err, io.EOF) {
		return // our own close
	}
	msg := "logcat stopped before the run ended: the tests after have no runner lines"
	if e, ok := src.(interface{ Stderr() []byte }); ok && len(bytes.TrimSpace(e.Stderr())) > 0 {
		msg += "; it said: " + string(bytes.TrimSpace(e.Stderr()))
	}
	if !errors.Is(err, io.EOF) {
		msg += fmt.Sprintf(" (%v)", err)
	}
	s.logEnd = msg
}

// StampTime is the time a logcat stamp names: seconds (-v epoch) as Unix
// time; a date and time in the zone it carries (-v zone), else in loc
// (nil: UTC), in the year it carries (-v year), else in the year that
// puts it nearest before now (a log from late December read in January).
// A zero stamp (brief) gives the zero time.
func StampTime(st instrument.Stamp, loc *time.Location, now time.Time) time.Time {
	if st.Text == "" {
		return time.Time{}
	}
	if st.Seconds {
		return time.Unix(st.Sec, int64(st.Nanos))
	}
	if loc == nil {
		loc = time.UTC
	}
	if z, ok := parseZone(st.Zone); ok {
		loc = z
	}
	year := st.Year
	if year == 0 {
		year = now.In(loc).Year()
	}
	t := time.Date(year, time.Month(st.Month), st.Day, st.Hour, st.Min, int(st.Sec), st.Nanos, loc)
	if st.Year == 0 && t.After(now.Add(24*time.Hour)) {
		t = t.AddDate(-1, 0, 0)
	}
	return t
}

// parseZone reads a "+hhmm" zone.
func parseZone(z string) (*time.Location, bool) {
	if len(z) != 5 || (z[0] != '+' && z[0] != '-') {
		return nil, false
	}
	h, err1 := strconv.Atoi(z[1:3])
	m, err2 := strconv.Atoi(z[3:5])
	if err1 != nil || err2 != nil {
		return nil, false
	}
	off := h*3600 + m*60
	if z[0] == '-' {
		off = -off
	}
	return time.FixedZone(z, off), true
}
