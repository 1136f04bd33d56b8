package heapprofd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/perfetto"
)

// Where perfetto may write traces on a device, and the prefix of every
// trace file and session name of ours: a daemon that starts finds what an
// earlier run left behind by it, and touches nothing else.
const (
	TraceDir = "/data/misc/perfetto-traces"
	Prefix   = "alloctrack-"
)

// ExecFunc runs a command on one device (shell protocol v2): stdin is the
// command's input, code its exit status.
type ExecFunc func(ctx context.Context, stdin []byte, argv ...string) (stdout, stderr []byte, code int, err error)

// Config tunes heapprofd sessions. The zero value gives the
// defaults; docs/heapprofd-devices.md says why each is what it is.
type Config struct {
	// SamplingInterval is the mean bytes between samples (default 4096);
	// 1 samples every allocation.
	SamplingInterval uint64
	// StopTimeout bounds stopping a session: perfetto's last dump, the
	// final read and the file's removal (default 10 s).
	StopTimeout time.Duration
	// Poll is how often a stopping perfetto is looked for (default 150 ms).
	Poll time.Duration
	// Rotate ends a session after this long and starts the next once the
	// old one is gone, so that neither the trace file nor heapprofd's own
	// state grows without bound (default 30 min).
	Rotate time.Duration
	// BufferKB is the tracing service's buffer for the session (default
	// 16 MiB): resident in traced once written through.
	BufferKB uint32
	// MaxFileBytes is the trace file's bound on the device (default
	// 256 MiB): the service ends the session there, and the daemon starts
	// the next.
	MaxFileBytes uint64
	// BlockClientTimeout bounds how long an app's allocating thread waits
	// for room in heapprofd's shared memory (default 500 ms); then
	// heapprofd ends the process's profile and the session is restarted.
	BlockClientTimeout time.Duration
	// StartCheck is how long after `perfetto --background` (Android 12)
	// the session's process is looked for: a session the tracing service
	// refused is gone by then (default 1 s).
	StartCheck time.Duration
	// StallWindows is how many windows a live perfetto's file may go
	// without growing, once heapprofd has written to it, before the
	// session counts as stalled (default 4; heapprofd writes ProfilePackets
	// every dump for each connected process, even an idle one).
	StallWindows int
	// ReadLimit bounds what one command reads of the trace file (default
	// TraceReadLimit): a window's growth is read in pieces of this size.
	ReadLimit int
	// DumpInterval is how often heapprofd dumps (default: the session's
	// Window; at least 100 ms). A test run dumps often (250 ms, say) to
	// place allocations in time, and may read less often (Window).
	DumpInterval time.Duration
	// Silence, if set, ends a session early once it has run this long and
	// some target has sent no sample in it (and its check is due): only a
	// stop makes heapprofd say whether another session holds a process
	// (rejected_concurrent), and the stop tells a held app from an idle
	// one. A target's next check waits Silence, then twice as long after
	// each check that found it silent again, up to Rotate. Zero (the
	// default, and captures') never ends a session for that.
	Silence time.Duration
}

// Fill sets every unset field to its default.
func (c *Config) Fill(window time.Duration) {
	if c.SamplingInterval == 0 {
		c.SamplingInterval = 4096
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.Poll <= 0 {
		c.Poll = 150 * time.Millisecond
	}
	if c.Rotate <= 0 {
		c.Rotate = 30 * time.Minute
	}
	if c.BufferKB == 0 {
		c.BufferKB = 16 << 10
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = 256 << 20
	}
	if c.BlockClientTimeout <= 0 {
		c.BlockClientTimeout = 500 * time.Millisecond
	}
	if c.StartCheck <= 0 {
		c.StartCheck = time.Second
	}
	if c.StallWindows <= 0 {
		c.StallWindows = 4
	}
	if c.ReadLimit <= 0 {
		c.ReadLimit = TraceReadLimit
	}
	if c.DumpInterval <= 0 {
		c.DumpInterval = window
	}
	c.DumpInterval = max(c.DumpInterval, 100*time.Millisecond)
}

// Target is one app a session samples: where its dumps are
// counted.
type Target struct {
	Counters *alloctrack.Counters
	Stats    *alloctrack.AppStats
	// Window, if set, gets the window of every Java heap dump of the
	// app, once counted.
	Window func(*alloctrack.Window)

	last        time.Time // end of the last dump counted
	dumps       int
	rejected    bool // this session's stop said another session held it
	wasRejected bool // the last session's did
	warned      bool
	// checkAt is when a session may next end to learn why the target is
	// silent; checkWait the wait after the next check (Config.Silence).
	checkAt   time.Time
	checkWait time.Duration
}

// Session samples the Java heap of some processes of one device
// through one perfetto session with one android.heapprofd data source, as
// long as its context lives. One session per device keeps within the
// tracing service's limit of 5 sessions per uid, which every adb shell user
// of the device (Android Studio, a person's own perfetto) shares.
//
// It starts perfetto in the background with a trace file of its own,
// reads what the file gained every window and counts each dump for the
// app it belongs to. It returns when ctx ends, when Restart fires, when it
// has run Config.Rotate, or when heapprofd ended some process's profile
// (which only a new session resumes); on the way out it stops perfetto,
// waits until the process is gone, counts the last dump and removes the
// file.
type Session struct {
	Serial string
	API    int // the device's API level: picks --background-wait (33+)
	Exec   ExecFunc
	Window time.Duration
	Config Config

	// Processes are the process names to profile (process_cmdline: each
	// must equal a process's name; com.example.app does not cover
	// com.example.app:remote), PIDs the pids. heapprofd profiles a named
	// process that starts during the session from its start.
	Processes []string
	PIDs      []int
	// Targets are the apps the session is for: their states and error
	// counts follow the session's (starting, refused, tracking once
	// heapprofd writes for the session).
	Targets []*Target
	// Resolve returns the target a dump of pid is counted for, nil to
	// leave it out. It is called once per pid.
	Resolve func(ctx context.Context, pid int) *Target
	// Restart, if set, ends the session when it fires (the set of
	// processes to profile changed).
	Restart <-chan struct{}

	// OnDump, if set, gets each Java heap dump of a process that Resolve
	// gave a target, once counted: its sampled window and the device time
	// it covers, (from, to], in the device's REALTIME (the clock of
	// logcat's stamps; see DumpTimes). w is the window the target's
	// counters took: read it during the call, change nothing in it.
	OnDump func(pid int, w *alloctrack.Window, from, to time.Time)
	// OnGone, if set, is told the pid of a process heapprofd says
	// disconnected (it ended), after its last dump went to OnDump. Not
	// every end is told: a last dump with no sample is not in the trace.
	OnGone func(pid int)

	// Raw, if set, gets every trace byte read, in order (a capture's
	// trace file).
	Raw io.Writer
	Log *zap.Logger

	path     string
	name     string
	bg       int // perfetto's pid
	offset   int64
	feed     bytes.Buffer
	dec      *perfetto.Decoder
	targets  map[uint64]*Target
	all      []*Target
	boot     time.Time            // the device's boot, in local time (zero: unknown)
	lastTo   map[uint64]time.Time // per pid: the end of its last dump (REALTIME)
	noReal   bool                 // warned of a trace without REALTIME
	idleRead int                  // windows without file growth
	ended    bool                 // a profile ended: a new session is due
	began    time.Time            // perfetto started
}

// Rejected tells whether heapprofd said, when the session stopped, that
// another session held the target's process all along.
func (t *Target) Rejected() bool { return t.rejected }

// silent names the targets whose check is due at now: the session has
// run Config.Silence and they sent no sample in it. Their state can be
// learnt only from the session's stop (docs/heapprofd-devices.md fact 14).
func (s *Session) silent(now time.Time) (names []string) {
	if s.Config.Silence <= 0 || now.Sub(s.began) < s.Config.Silence {
		return nil
	}
	for _, t := range s.all {
		if t.dumps == 0 && !now.Before(t.checkAt) {
			names = append(names, t.Stats.Snapshot().Package)
		}
	}
	return names
}

// checked takes what a finished stop said of t: a target silent through
// the session waits longer before its next check (Silence, doubling, at
// most Rotate), held or idle alike. One that sent samples may be checked
// in the next session it is silent through, and its wait does not start
// over: an app that allocates now and then ends few sessions.
func (s *Session) checked(t *Target, now time.Time) {
	if s.Config.Silence <= 0 {
		return
	}
	if t.dumps > 0 {
		t.checkAt = time.Time{}
		return
	}
	wait := max(t.checkWait, s.Config.Silence)
	t.checkAt = now.Add(wait)
	t.checkWait = min(2*wait, max(s.Config.Rotate, s.Config.Silence))
}

// Run runs the session and always stops what it started. It returns nil
// when ctx ended, Restart fired, the session rotated or a profile ended,
// and a *SessionError otherwise.
func (s *Session) Run(ctx context.Context) (err error) {
	s.begin()
	if err := s.start(ctx); err != nil {
		s.failedStart(err)
		return err
	}
	defer func() {
		// The daemon may be on its way out: stopping gets a time of its
		// own, whatever ctx says.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.Config.StopTimeout)
		defer cancel()
		if serr := s.stop(sctx); serr != nil {
			s.Log.Warn("stopping the perfetto session", zap.String("file", s.path), zap.Error(serr))
			if err == nil {
				err = serr
			}
		}
	}()
	t := time.NewTicker(s.Window)
	defer t.Stop()
	rotate := time.NewTimer(s.Config.Rotate)
	defer rotate.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.Restart:
			return nil
		case <-rotate.C:
			s.Log.Debug("rotating the heapprofd session", zap.Duration("after", s.Config.Rotate))
			return nil
		case <-t.C:
		}
		if done, err := s.window(ctx); done || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// begin readies a session's state and its targets' status.
func (s *Session) begin() {
	s.Config.Fill(s.Window)
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
	s.targets = map[uint64]*Target{}
	s.lastTo = map[uint64]time.Time{}
	s.all = slices.Clone(s.Targets)
	for _, t := range s.all {
		// A rejection is told only when a session stops: until this one
		// stops, or a dump comes, the last one's holds.
		t.dumps, t.wasRejected, t.rejected = 0, t.rejected, false
		t.Stats.Update(func(st *alloctrack.AppStatus) {
			st.Backend = alloctrack.BackendHeapprofd
			st.Heapprofd.Sessions++
			if st.State != alloctrack.StateTracking && st.State != alloctrack.StateHeld {
				st.State, st.Since, st.Tracking = alloctrack.StateStarting, time.Now(), false
			}
		})
	}
}

// failedStart counts a start that failed on every target.
func (s *Session) failedStart(err error) {
	stage, state := alloctrack.ErrorStage(err), alloctrack.StateBackoff
	if stage == alloctrack.StagePerfettoRefused {
		state = alloctrack.StateRefused
	}
	for _, t := range s.all {
		t.Stats.CountError(stage)
		t.Stats.SetState(state)
	}
}

// window reads what the session wrote since the last window and checks
// that it is still alive and writing; done says the session is over (err:
// why, nil when it ended as it should).
func (s *Session) window(ctx context.Context) (done bool, err error) {
	grew, err := s.read(ctx)
	if err != nil {
		return true, err
	}
	if s.ended {
		return true, nil
	}
	if silent := s.silent(time.Now()); len(silent) > 0 {
		s.Log.Info("ending the heapprofd session early: some apps sent no sample in it, and only its stop says whether another heapprofd session holds them", zap.Strings("packages", silent), zap.Duration("silence", s.Config.Silence))
		return true, nil
	}
	alive, err := s.alive(ctx)
	switch {
	case ctx.Err() != nil:
		return true, nil
	case err != nil:
		return true, alloctrack.StageErrorf(alloctrack.StagePerfettoRead, "looking for perfetto %d: %w", s.bg, err)
	case !alive:
		// What it wrote between the read and its end.
		if _, err := s.read(ctx); err != nil {
			s.Log.Warn("reading the ended session's file", zap.Error(err))
		}
		s.bg = 0
		s.countAll(alloctrack.StagePerfettoEnded)
		return true, &alloctrack.SessionError{Stage: alloctrack.StagePerfettoEnded, Err: fmt.Errorf("%w (pid gone; the file has %d bytes)", alloctrack.ErrPerfettoEnded, s.offset)}
	}
	// A session whose processes never connected (frozen, say) writes
	// nothing at all: only one that wrote and then stopped is stalled.
	if grew || s.dec.Stats().ProfilePackets == 0 {
		s.idleRead = 0
	} else if s.idleRead++; s.idleRead >= s.Config.StallWindows {
		s.countAll(alloctrack.StagePerfettoStalled)
		return true, &alloctrack.SessionError{Stage: alloctrack.StagePerfettoStalled, Err: fmt.Errorf("%w: %d windows without a byte", alloctrack.ErrPerfettoStalled, s.idleRead)}
	}
	return false, nil
}

// traceConfig is the session's TraceConfig.
func (s *Session) traceConfig() *perfetto.HeapprofdSession {
	window := uint32(max(s.Window.Milliseconds(), 100))
	dump := uint32(s.Config.DumpInterval.Milliseconds())
	cfg := &perfetto.HeapprofdSession{
		BufferKB:      s.Config.BufferKB,
		WriteIntoFile: true,
		// Copies committed chunks into the file; a flush commits the
		// tail of a dump, which heapprofd does not flush itself (before
		// perfetto v53 the service did not flush before a write).
		FileWritePeriodMS: max(100, min(window/4, 2500)),
		FlushPeriodMS:     max(100, min(window/2, 5000)),
		FlushTimeoutMS:    uint32(min(5*time.Second, s.Config.StopTimeout/2).Milliseconds()),
		MaxFileSizeBytes:  s.Config.MaxFileBytes,
		UniqueSessionName: s.name,
		// No OutputPath: perfetto refuses it together with -o, and with
		// -o the file is the shell's own, to read and remove.
		SamplingInterval:     s.Config.SamplingInterval,
		ProcessCmdlines:      s.Processes,
		Heaps:                []string{perfetto.ArtHeap},
		DumpPhaseMS:          min(1000, dump),
		DumpIntervalMS:       dump,
		ShmemSize:            8 << 20,
		BlockClient:          true,
		BlockClientTimeoutUS: uint32(min(s.Config.BlockClientTimeout, time.Duration(math.MaxUint32)*time.Microsecond).Microseconds()),
	}
	for _, p := range s.PIDs {
		cfg.PIDs = append(cfg.PIDs, uint64(p))
	}
	return cfg
}

func (s *Session) start(ctx context.Context) error {
	var nonce [4]byte
	rand.Read(nonce[:])
	s.name = Prefix + sanitize(s.Serial) + "-" + hex.EncodeToString(nonce[:])
	s.path = TraceDir + "/" + s.name + ".pftrace"
	cfg := s.traceConfig().Marshal()
	s.boot = s.deviceBoot(ctx)
	flag := "--background"
	if s.API >= alloctrack.APIBackgroundWait {
		flag = "--background-wait"
	}
	out, errOut, code, err := s.Exec(ctx, cfg, "perfetto", flag, "-c", "-", "-o", s.path)
	if err == nil && code != 0 && flag != "--background" && strings.Contains(string(errOut), "option") {
		// A perfetto older than v22 on a device that says API 33.
		flag = "--background"
		out, errOut, code, err = s.Exec(ctx, cfg, "perfetto", flag, "-c", "-", "-o", s.path)
	}
	if err != nil {
		return alloctrack.StageErrorf(alloctrack.StagePerfettoStart, "starting perfetto: %w", err)
	}
	if code != 0 {
		msg := firstLine(errOut, out)
		// 127 and 126: the shell found no perfetto to run. Otherwise, with
		// --background-wait, a failure after the config was taken is the
		// service's (our config and options are perfetto's to refuse
		// before that, with messages of their own).
		if flag == "--background-wait" && code != 127 && code != 126 && !strings.Contains(msg, "Can't pass") && !strings.Contains(msg, "config is invalid") {
			// The service refused it (too many sessions, the name in use)
			// or could not start it.
			s.rmFile(ctx)
			return &alloctrack.SessionError{Stage: alloctrack.StagePerfettoRefused, Err: fmt.Errorf("%w: perfetto %s exited %d: %s", alloctrack.ErrPerfettoRefused, flag, code, msg)}
		}
		return alloctrack.StageErrorf(alloctrack.StagePerfettoStart, "perfetto exited %d: %s", code, msg)
	}
	if pid, perr := strconv.Atoi(strings.TrimSpace(string(out))); perr == nil && pid > 0 {
		s.bg = pid
	} else if s.bg, err = s.findOurs(ctx); err != nil || s.bg == 0 {
		return alloctrack.StageErrorf(alloctrack.StagePerfettoStart, "perfetto %s printed %q, not its pid, and the process list has no perfetto writing %s (%v)", flag, truncateBytes(out, 80), s.path, err)
	}
	if flag == "--background" {
		// The service answers the forked child only: a refusal ends it
		// at once, and reaches only logcat.
		select {
		case <-ctx.Done():
		case <-time.After(s.Config.StartCheck):
		}
		alive, err := s.alive(ctx)
		if err == nil && !alive && !s.wroteAny(ctx) {
			// Gone with nothing written: the service never started it. (A
			// session that started and already ended, at max_file_size_bytes
			// say, left data; the first read counts it, and the session
			// ends as perfetto-ended.)
			s.bg = 0
			s.rmFile(ctx)
			return &alloctrack.SessionError{Stage: alloctrack.StagePerfettoRefused, Err: fmt.Errorf("%w: perfetto %s printed a pid, and the process was gone within %v", alloctrack.ErrPerfettoRefused, flag, s.Config.StartCheck)}
		}
	}
	s.dec = perfetto.NewDecoder(&s.feed, &perfetto.Options{Follow: true})
	s.began = time.Now()
	s.Log.Info("heapprofd session started", s.startFields()...)
	return nil
}

// startFields describe a started session: its file, perfetto's pid, the
// processes it profiles by name and by pid (only the ways it uses: a
// daemon's session names processes, a capture's gives a pid).
func (s *Session) startFields() []zap.Field {
	f := []zap.Field{zap.String("file", s.path), zap.Int("perfetto_pid", s.bg)}
	if len(s.Processes) > 0 {
		f = append(f, zap.Strings("processes", s.Processes))
	}
	if len(s.PIDs) > 0 {
		f = append(f, zap.Ints("pids", s.PIDs))
	}
	return append(f, zap.Uint64("sampling_interval", s.Config.SamplingInterval))
}

// deviceBoot reads the device's uptime (CLOCK_BOOTTIME, the trace's clock)
// to place dumps at their own time. Zero when it cannot.
func (s *Session) deviceBoot(ctx context.Context) time.Time {
	before := time.Now()
	out, _, code, err := s.Exec(ctx, nil, "cat", "/proc/uptime")
	if err != nil || code != 0 {
		return time.Time{}
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return time.Time{}
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil || up <= 0 {
		return time.Time{}
	}
	// The uptime was read at some point of the round trip: its middle.
	mid := before.Add(time.Since(before) / 2)
	return mid.Add(-time.Duration(up * float64(time.Second)))
}

// alive tells whether the session's perfetto still runs: its /proc entry
// is there and its command line names our file (the pid was not reused).
// The shell may not send perfetto signal 0 (SELinux), but may read every
// process's /proc entries.
func (s *Session) alive(ctx context.Context) (bool, error) {
	return perfettoAlive(ctx, s.Exec, s.bg, s.path)
}

func perfettoAlive(ctx context.Context, exec ExecFunc, pid int, path string) (bool, error) {
	if pid <= 0 {
		return false, nil
	}
	out, errOut, code, err := exec(ctx, nil, "cat", "/proc/"+strconv.Itoa(pid)+"/cmdline")
	if err != nil {
		return false, err
	}
	if code != 0 {
		if strings.Contains(string(errOut), "No such file") {
			return false, nil
		}
		return false, fmt.Errorf("cat /proc/%d/cmdline exited %d: %s", pid, code, firstLine(errOut, out))
	}
	return bytes.Contains(out, []byte(path)), nil
}

// wroteAny tells whether the trace file holds at least one byte.
func (s *Session) wroteAny(ctx context.Context) bool {
	out, _, code, err := s.Exec(ctx, nil, "tail", "-c", "1", s.path)
	return err == nil && code == 0 && len(out) > 0
}

// findOurs finds the pid of the perfetto writing our file.
func (s *Session) findOurs(ctx context.Context) (int, error) {
	ps, err := listPerfettos(ctx, s.Exec)
	if err != nil {
		return 0, err
	}
	for _, p := range ps {
		if p.path == s.path {
			return p.pid, nil
		}
	}
	return 0, nil
}

// TraceReadLimit is the default Config.ReadLimit: what one command
// reads of the trace file. A window's growth is read in pieces of at
// most this size, each from where the last stopped, so that no output
// comes near adb.MaxExecOutput (16 MiB), and each is small enough for
// adb's client to read without waiting for its turn at large outputs
// (1 MiB).
const TraceReadLimit = 1 << 20

// read takes what the trace file gained, in pieces of at most
// Config.ReadLimit, and counts the dumps it ends. It reads no more than
// the file may hold (MaxFileBytes), so that a device that answers every
// read in full cannot keep it for ever.
func (s *Session) read(ctx context.Context) (grew bool, err error) {
	before := s.dec.Stats().ProfilePackets
	unattributed := 0 // the read's bytes go with its first dump
	for total := uint64(0); total < max(s.Config.MaxFileBytes, 1); {
		out, err := s.readPiece(ctx)
		if err != nil {
			return grew, err
		}
		grew, total = grew || len(out) > 0, total+uint64(len(out))
		if unattributed, err = s.decode(ctx, out, unattributed+len(out)); err != nil {
			return grew, err
		}
		if len(out) < s.Config.ReadLimit {
			break
		}
	}
	if s.dec.Stats().ProfilePackets > before {
		// heapprofd writes for this session: every target whose process
		// gave no sample yet is connected and idle, or not yet started.
		for _, t := range s.all {
			if t.dumps == 0 && !t.rejected && !t.wasRejected {
				t.Stats.SetState(alloctrack.StateTracking)
			}
		}
	}
	if unattributed > 0 && len(s.all) > 0 {
		CountDump(s.all[0].Stats, nil, unattributed)
	}
	return grew, nil
}

// readPiece reads at most Config.ReadLimit bytes of the trace file from
// s.offset (toybox tail -c +N and head -c; docs/heapprofd-devices.md),
// and copies them to s.Raw. s.path holds only characters the shell takes
// literally (see sanitize).
func (s *Session) readPiece(ctx context.Context) ([]byte, error) {
	from := "+" + strconv.FormatInt(s.offset+1, 10)
	line := "tail -c " + from + " " + s.path + " | head -c " + strconv.Itoa(s.Config.ReadLimit)
	out, errOut, code, err := s.Exec(ctx, nil, "sh", "-c", line)
	if err == nil && (code != 0 || len(errOut) > 0) {
		// A pipeline's status is head's: tail's complaints are on stderr.
		err = fmt.Errorf("tail | head exited %d: %s", code, firstLine(errOut, out))
	}
	if err != nil {
		s.countAll(alloctrack.StagePerfettoRead)
		return nil, alloctrack.StageErrorf(alloctrack.StagePerfettoRead, "reading %s: %w", s.path, err)
	}
	s.offset += int64(len(out))
	if s.Raw != nil && len(out) > 0 {
		if _, err := s.Raw.Write(out); err != nil {
			return nil, fmt.Errorf("writing the trace copy: %w", err)
		}
	}
	return out, nil
}

// decode feeds out to the decoder and counts the dumps it ends; the
// first takes unattributed bytes, and what no dump took is returned.
func (s *Session) decode(ctx context.Context, out []byte, unattributed int) (int, error) {
	s.feed.Write(out)
	for {
		d, err := s.dec.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			s.countAll(alloctrack.StagePerfettoRead)
			return 0, alloctrack.StageErrorf(alloctrack.StagePerfettoRead, "%s: %w", s.path, err)
		}
		t := s.target(ctx, d.PID)
		if t == nil {
			continue
		}
		n := unattributed
		unattributed = 0
		s.count(t, d, n)
	}
	return unattributed, nil
}

// target returns the target of pid's dumps, resolving it the first time.
func (s *Session) target(ctx context.Context, pid uint64) *Target {
	t, ok := s.targets[pid]
	if ok {
		return t
	}
	if s.Resolve != nil {
		t = s.Resolve(ctx, int(pid))
	}
	s.targets[pid] = t
	if t != nil {
		if !slices.Contains(s.all, t) {
			s.all = append(s.all, t)
			t.Stats.Update(func(st *alloctrack.AppStatus) { st.Heapprofd.Sessions++ })
		}
		t.Stats.Update(func(st *alloctrack.AppStatus) {
			st.Backend = alloctrack.BackendHeapprofd
			st.PID = int(pid)
		})
	}
	return t
}

// countAll counts an error stage for every target.
func (s *Session) countAll(stage string) {
	for _, t := range s.all {
		t.Stats.CountError(stage)
	}
}

// count counts one dump for its target and acts on its status flags.
func (s *Session) count(t *Target, d *perfetto.Dump, traceBytes int) {
	if d.RejectedConcurrent {
		t.rejected = true
		CountDump(t.Stats, nil, traceBytes)
		return
	}
	t.rejected, t.wasRejected = false, false
	now := time.Now()
	at := s.dumpTime(d, t.last, now)
	if JavaHeapDump(d) {
		start := t.last
		if start.IsZero() {
			start = at // the first dump of a process: no span to rate over
		}
		w := WindowOfDump(d, start, at)
		t.Counters.Add(w)
		t.last = at
		if t.Window != nil {
			t.Window(w)
		}
		if s.OnDump != nil {
			s.dumped(d, w)
		}
	}
	CountDump(t.Stats, d, traceBytes)
	if t.dumps == 0 {
		t.Stats.SetState(alloctrack.StateTracking)
	}
	t.dumps++
	if d.Broken.Count > 0 && !t.warned {
		// Once a session: the bug lasts as long as the device's ART module.
		t.warned = true
		s.Log.Warn("heapprofd could not unwind the Java frames of some samples (the Android 12/13 ART unwinding bug, fixed in the ART module of Android 13 QPR1): they count under one site with no frames and in alloctrack_heapprofd_broken_stack_samples_total",
			zap.Uint64("pid", d.PID), zap.Uint64("samples", d.Broken.Count), zap.Int("stacks", d.BrokenStacks), zap.Uint64("dump_samples", d.Delta.Count))
	}
	switch {
	case d.BufferOverran || d.BufferCorrupted:
		t.Stats.CountError(alloctrack.StageOverran)
		s.Log.Warn("heapprofd ended a process's profile: its shared-memory buffer overran; starting a new session", zap.Uint64("pid", d.PID))
		s.ended = true
	case d.HitGuardrail:
		t.Stats.CountError(alloctrack.StageGuardrail)
		s.Log.Warn("heapprofd ended a process's profile: it hit a guardrail; starting a new session", zap.Uint64("pid", d.PID))
		s.ended = true
	case d.Disconnected:
		// The process ended; a process of the same name that starts is
		// profiled from its start.
		s.Log.Debug("a profiled process disconnected from heapprofd", zap.Uint64("pid", d.PID))
		if s.OnGone != nil {
			s.OnGone(int(d.PID))
		}
	}
}

// dumpTime places a dump at its own time: its packet's BOOTTIME stamp
// from the device's boot, kept within (last, now]. now when unknown.
func (s *Session) dumpTime(d *perfetto.Dump, last, now time.Time) time.Time {
	if s.boot.IsZero() || d.PacketTimestamp == 0 {
		return now
	}
	at := s.boot.Add(time.Duration(d.PacketTimestamp))
	if at.After(now) {
		at = now
	}
	if !last.IsZero() && !at.After(last) {
		at = last.Add(time.Millisecond)
	}
	return at
}

// dumped gives a dump to OnDump with its device times.
func (s *Session) dumped(d *perfetto.Dump, w *alloctrack.Window) {
	from, to, ok := DumpTimes(d, s.lastTo[d.PID], s.Config.DumpInterval)
	if !ok {
		// No REALTIME in the trace (clock snapshots turned off): the
		// host's estimate, off by the host's and device's clocks'
		// difference.
		if !s.noReal {
			s.noReal = true
			s.Log.Warn("the trace has no REALTIME clock snapshot: dumps are placed in time by the host's clock, off by the difference between the host's and the device's clocks", zap.Uint64("pid", d.PID))
		}
		from, to = w.Start, w.End
	}
	s.lastTo[d.PID] = to
	s.OnDump(int(d.PID), w, from, to)
}

// DumpTimes is the device time a dump of a process covers, (from, to], in
// REALTIME: its samples were taken in it. heapprofd ends a dump's window at
// its newest sample's time and starts it where the process's last dump
// ended (heapprofd_producer.cc DumpProcessState), in
// CLOCK_MONOTONIC_COARSE; the trace's clock snapshots give it in REALTIME
// (perfetto.Dump.RealTimestamp). prev is to of the process's last dump in
// the same session (zero for its first): producers older than perfetto
// v58 do not write the window's start. A process's first dump then holds
// the samples committed since the dump round before it, one interval (and
// that round's own length) before this dump was written: from is the
// dump's packet time less interval.
// ok is false when the trace relates no snapshot to REALTIME.
func DumpTimes(d *perfetto.Dump, prev time.Time, interval time.Duration) (from, to time.Time, ok bool) {
	if !d.HasRealTime {
		return time.Time{}, time.Time{}, false
	}
	to = time.Unix(0, int64(d.RealTimestamp))
	switch {
	case d.StartTimestamp != 0:
		from = time.Unix(0, int64(d.RealStartTimestamp))
	case !prev.IsZero():
		from = prev
	default:
		from = time.Unix(0, int64(d.RealPacketTimestamp)).Add(-interval)
	}
	if from.After(to) {
		from = to
	}
	return from, to, true
}

// stop ends perfetto with SIGTERM (heapprofd writes a last dump), waits
// until its process is gone, then reads and counts the rest of the file
// and removes it. A perfetto still there after the stop timeout keeps its
// file: the service may still write to it; the clean-up at the device's
// next arrival removes it.
func (s *Session) stop(ctx context.Context) error {
	if s.bg != 0 {
		if err := stopPerfetto(ctx, s.Exec, s.bg, s.path, s.Config.Poll); err != nil {
			s.countAll(alloctrack.StagePerfettoStop)
			return alloctrack.StageErrorf(alloctrack.StagePerfettoStop, "%w; %s left on the device", err, s.path)
		}
		s.bg = 0
	}
	var rerr error
	if _, err := s.read(ctx); err != nil {
		rerr = err
	}
	now := time.Now()
	for _, t := range s.all {
		switch {
		case t.rejected:
			t.Stats.CountError(alloctrack.StageRejected)
			t.Stats.SetState(alloctrack.StateHeld)
		case t.wasRejected && t.dumps == 0 && s.dec.Stats().ProfilePackets > 0:
			// The other profiler let go; the app was idle since.
			t.wasRejected = false
			t.Stats.SetState(alloctrack.StateTracking)
		}
		s.checked(t, now)
	}
	if err := s.rmFile(ctx); err != nil {
		return errors.Join(rerr, err)
	}
	s.Log.Info("heapprofd session stopped", zap.String("file", s.path), zap.Int64("bytes", s.offset))
	return rerr
}

func (s *Session) rmFile(ctx context.Context) error {
	if _, errOut, code, err := s.Exec(ctx, nil, "rm", "-f", s.path); err != nil || code != 0 {
		return fmt.Errorf("rm %s: exit %d %s %v", s.path, code, firstLine(errOut, nil), err)
	}
	return nil
}

// stopPerfetto sends perfetto SIGTERM (which shell may send it) and waits
// until its process is gone, looking at /proc every poll.
func stopPerfetto(ctx context.Context, exec ExecFunc, pid int, path string, poll time.Duration) error {
	p := strconv.Itoa(pid)
	if _, errOut, code, err := exec(ctx, nil, "kill", "-TERM", p); err != nil {
		return fmt.Errorf("kill -TERM %s: %w", p, err)
	} else if code != 0 && !strings.Contains(string(errOut), "No such process") {
		return fmt.Errorf("kill -TERM %s: exit %d: %s", p, code, firstLine(errOut, nil))
	}
	for {
		alive, err := perfettoAlive(ctx, exec, pid, path)
		if err != nil {
			return fmt.Errorf("waiting for perfetto %s to end: %w", p, err)
		}
		if !alive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("perfetto %s still running: %w", p, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// sanitize keeps a name to the characters a file name may safely hold on
// a device.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

type perfettoProcess struct {
	pid  int
	path string // the trace file it writes (-o)
}

// listPerfettos lists the device's perfetto processes that write one of
// our trace files, from `ps -A -o PID,ARGS` (whole command lines).
func listPerfettos(ctx context.Context, exec ExecFunc) ([]perfettoProcess, error) {
	out, errOut, code, err := exec(ctx, nil, "ps", "-A", "-o", "PID,ARGS")
	if err != nil || code != 0 {
		return nil, fmt.Errorf("listing processes: exit %d %s %v", code, firstLine(errOut, out), err)
	}
	var ps []perfettoProcess
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "perfetto" && !strings.HasSuffix(f[1], "/perfetto") {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		for i, a := range f[:len(f)-1] {
			if (a == "-o" || a == "--out") && strings.HasPrefix(f[i+1], TraceDir+"/"+Prefix) {
				ps = append(ps, perfettoProcess{pid: pid, path: f[i+1]})
			}
		}
	}
	return ps, nil
}

// Clean stops every perfetto of ours on a device and removes our
// trace files: what an earlier run of the daemon left behind when it was
// killed, or when the device or the adb server went away. Ours are the
// perfetto processes writing to, and the files named, Prefix in
// TraceDir; nothing else is touched. A file whose perfetto did not
// end within ctx is kept (left counts them): the service may still write
// to it.
func Clean(ctx context.Context, exec ExecFunc, poll time.Duration) (stopped, removed, left int, err error) {
	ps, err := listPerfettos(ctx, exec)
	if err != nil {
		return 0, 0, 0, err
	}
	busy := map[string]bool{}
	var errs []error
	for _, p := range ps {
		if err := stopPerfetto(ctx, exec, p.pid, p.path, poll); err != nil {
			busy[p.path] = true
			errs = append(errs, err)
			continue
		}
		stopped++
	}
	out, errOut, code, err := exec(ctx, nil, "ls", TraceDir)
	if err != nil || code != 0 {
		return stopped, 0, len(busy), errors.Join(append(errs, fmt.Errorf("listing %s: exit %d %s %v", TraceDir, code, firstLine(errOut, out), err))...)
	}
	var files []string
	for _, name := range strings.Fields(string(out)) {
		path := TraceDir + "/" + name
		if strings.HasPrefix(name, Prefix) && !strings.Contains(name, "/") && !busy[path] {
			files = append(files, path)
		}
	}
	if len(files) > 0 {
		if _, errOut, code, err := exec(ctx, nil, append([]string{"rm", "-f"}, files...)...); err != nil || code != 0 {
			return stopped, 0, len(busy), errors.Join(append(errs, fmt.Errorf("removing %d trace files: exit %d %s %v", len(files), code, firstLine(errOut, nil), err))...)
		}
	}
	return stopped, len(files), len(busy), errors.Join(errs...)
}

// firstLine is the first non-empty line of a or else b, for messages: of
// at most 200 bytes, looked for in the first 64 KiB of each, and nothing
// else of them copied (an output may be megabytes).
func firstLine(a, b []byte) string {
	for _, s := range [][]byte{a, b} {
		s = s[:min(len(s), 64<<10)]
		for len(s) > 0 {
			line, rest, _ := bytes.Cut(s, []byte("\n"))
			if line = bytes.TrimSpace(line); len(line) > 0 {
				return truncateBytes(line, 200)
			}
			s = rest
		}
	}
	return "(no message)"
}

func truncateBytes(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
