package alloctrack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/perfetto"
)

// Where perfetto may write traces on a device, and the prefix of every
// trace file and session name of ours: a daemon that starts finds what an
// earlier run left behind by it, and touches nothing else.
const (
	PerfettoTraceDir = "/data/misc/perfetto-traces"
	HeapprofdPrefix  = "alloctrack-"
)

// States and error stages of heapprofd sessions.
const (
	StateStarting      = "starting"      // session started, no dump yet
	StateUnprofileable = "unprofileable" // no dump came: not debuggable nor profileable, or ART sampling off
	StateRejected      = "rejected"      // another profiler holds the process

	StagePerfettoStart = "perfetto-start"
	StagePerfettoRead  = "perfetto-read"
	StageRejected      = "rejected-concurrent"
	StageOverran       = "buffer-overran"
	StageDisconnected  = "disconnected"
	StageGuardrail     = "guardrail"
	StageUnprofileable = "unprofileable"
)

// Errors a heapprofd session ends with.
var (
	// ErrRejected: another session (not ours) profiles the process, so
	// heapprofd gives ours nothing.
	ErrRejected = errors.New("alloctrack: another profiler holds the process (heapprofd rejected_concurrent)")
	// ErrUnprofileable: no dump came within the start-up grace: the app is
	// neither debuggable nor profileable, or ART's heap sampling is off.
	ErrUnprofileable = errors.New("alloctrack: heapprofd gave no dump of the process (not debuggable or profileable?)")
	// ErrProfileEnded: heapprofd stopped profiling the process (buffer
	// overrun, a guardrail, or the process disconnected); a new session
	// may go on.
	ErrProfileEnded = errors.New("alloctrack: heapprofd ended the process's profile")
)

// ExecFunc runs a command on one device (shell protocol v2): stdin is the
// command's input, code its exit status.
type ExecFunc func(ctx context.Context, stdin []byte, argv ...string) (stdout, stderr []byte, code int, err error)

// HeapprofdConfig tunes heapprofd sessions.
type HeapprofdConfig struct {
	// SamplingInterval is the mean bytes between samples (default 4096);
	// 1 samples every allocation.
	SamplingInterval uint64
	// Grace is how long a session waits for its first dump before the
	// process counts as unprofileable (default 3 windows, at least 10 s).
	Grace time.Duration
	// StopTimeout bounds stopping a session: perfetto's last dump, the
	// final read and the file's removal (default 10 s).
	StopTimeout time.Duration
	// Poll is how often a stopping perfetto is checked (default 150 ms).
	Poll time.Duration
}

func (c *HeapprofdConfig) fill(window time.Duration) {
	if c.SamplingInterval == 0 {
		c.SamplingInterval = 4096
	}
	if c.Grace <= 0 {
		c.Grace = max(3*window, 10*time.Second)
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.Poll <= 0 {
		c.Poll = 150 * time.Millisecond
	}
}

// HeapprofdSession samples one process's Java heap through one perfetto
// session on its device, as long as its context lives: it starts perfetto
// in the background with a trace file of its own, reads what the file
// gained every window, counts each dump, and on the way out stops perfetto
// (its last dump is read and counted too) and removes the file.
type HeapprofdSession struct {
	Serial  string
	PID     int
	Process string // the process name, for the file and session names
	Exec    ExecFunc
	Window  time.Duration
	Config  HeapprofdConfig

	Counters *Counters
	Stats    *AppStats
	// Raw, if set, gets every trace byte read, in order (a capture's
	// trace file); Dump, if set, every dump counted.
	Raw  io.Writer
	Dump func(*perfetto.Dump)
	Log  *zap.Logger

	path    string
	bg      int // perfetto's pid
	offset  int64
	feed    bytes.Buffer
	dec     *perfetto.Decoder
	last    time.Time
	dumps   int
	started time.Time

	warnedBroken bool
}

// SessionName is the unique_session_name of a process's session: perfetto
// refuses a second session of that name, so two of ours never profile one
// process.
func SessionName(process string, pid int) string {
	return HeapprofdPrefix + sanitize(process) + "-" + strconv.Itoa(pid)
}

// sanitize keeps a process name to the characters a file name may safely
// hold on a device.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 100 {
		b = b[:100]
	}
	return string(b)
}

// Run runs the session until ctx ends or heapprofd ends the profile, and
// always stops what it started. It returns ErrRejected, ErrUnprofileable,
// ErrProfileEnded (wrapped with the reason) or the error that stopped it;
// nil when ctx ended.
func (s *HeapprofdSession) Run(ctx context.Context) (err error) {
	s.Config.fill(s.Window)
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
	if err := s.start(ctx); err != nil {
		s.Stats.CountError(StagePerfettoStart)
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
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := s.read(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if s.dumps == 0 && time.Since(s.started) > s.Config.Grace {
			s.Stats.CountError(StageUnprofileable)
			s.Stats.SetState(StateUnprofileable)
			return ErrUnprofileable
		}
	}
}

func (s *HeapprofdSession) start(ctx context.Context) error {
	var nonce [4]byte
	rand.Read(nonce[:])
	s.path = fmt.Sprintf("%s/%s%s-%d-%s.pftrace", PerfettoTraceDir, HeapprofdPrefix, sanitize(s.Process), s.PID, hex.EncodeToString(nonce[:]))
	windowMS := uint32(max(s.Window.Milliseconds(), 100))
	cfg := perfetto.HeapprofdSession{
		BufferKB: 65536, WriteIntoFile: true, FileWritePeriodMS: max(100, windowMS/4), FlushTimeoutMS: 30000,
		UniqueSessionName: SessionName(s.Process, s.PID), OutputPath: s.path,
		SamplingInterval: s.Config.SamplingInterval, PIDs: []uint64{uint64(s.PID)}, Heaps: []string{perfetto.ArtHeap},
		DumpPhaseMS: windowMS, DumpIntervalMS: windowMS, ShmemSize: 8 << 20, BlockClient: true,
	}
	out, errOut, code, err := s.Exec(ctx, cfg.Marshal(), "perfetto", "--background", "-c", "-", "-o", s.path)
	if err != nil {
		return fmt.Errorf("%s: starting perfetto: %w", StagePerfettoStart, err)
	}
	if code != 0 {
		return fmt.Errorf("%s: perfetto exited %d: %s", StagePerfettoStart, code, firstLine(errOut, out))
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
	if perr != nil || pid <= 0 {
		return fmt.Errorf("%s: perfetto --background printed %q, not its pid", StagePerfettoStart, truncateBytes(out, 80))
	}
	s.bg = pid
	s.started, s.last = time.Now(), time.Now()
	s.dec = perfetto.NewDecoder(&s.feed, &perfetto.Options{Follow: true})
	s.Stats.update(func(st *AppStatus) {
		st.Backend = BackendHeapprofd
		st.Heapprofd.Sessions++
	})
	s.Stats.SetState(StateStarting)
	s.Log.Info("heapprofd session started", zap.String("file", s.path), zap.Int("perfetto_pid", pid), zap.Uint64("sampling_interval", s.Config.SamplingInterval))
	return nil
}

// read takes what the trace file gained and counts the dumps it ends.
func (s *HeapprofdSession) read(ctx context.Context) error {
	out, errOut, code, err := s.Exec(ctx, nil, "tail", "-c", "+"+strconv.FormatInt(s.offset+1, 10), s.path)
	if err == nil && code != 0 {
		err = fmt.Errorf("tail exited %d: %s", code, firstLine(errOut, out))
	}
	if err != nil {
		s.Stats.CountError(StagePerfettoRead)
		return fmt.Errorf("%s: reading %s: %w", StagePerfettoRead, s.path, err)
	}
	s.offset += int64(len(out))
	if s.Raw != nil && len(out) > 0 {
		if _, err := s.Raw.Write(out); err != nil {
			return fmt.Errorf("writing the trace copy: %w", err)
		}
	}
	s.feed.Write(out)
	unattributed := len(out) // the read's bytes go with its first dump
	for {
		d, err := s.dec.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			s.Stats.CountError(StagePerfettoRead)
			return fmt.Errorf("%s: %s: %w", StagePerfettoRead, s.path, err)
		}
		if d.PID != uint64(s.PID) {
			continue
		}
		n := unattributed
		unattributed = 0
		if err := s.count(d, n); err != nil {
			return err
		}
	}
	if unattributed > 0 {
		s.Stats.AddDumpStats(nil, unattributed)
	}
	return nil
}

// count counts one dump and acts on its status flags.
func (s *HeapprofdSession) count(d *perfetto.Dump, traceBytes int) error {
	now := time.Now()
	switch {
	case d.RejectedConcurrent:
		s.Stats.CountError(StageRejected)
		s.Stats.SetState(StateRejected)
		s.Stats.AddDumpStats(nil, traceBytes)
		return ErrRejected
	}
	if JavaHeapDump(d) {
		s.Counters.AddDump(d, s.last, now)
		s.last = now
	}
	s.Stats.AddDumpStats(d, traceBytes)
	if s.Dump != nil {
		s.Dump(d)
	}
	if s.dumps == 0 {
		s.Stats.SetState(StateTracking)
	}
	if d.Broken.Count > 0 && !s.warnedBroken {
		// Once a session: the bug lasts as long as the device's ART module.
		s.warnedBroken = true
		s.Log.Warn("heapprofd could not unwind the Java frames of some samples (the Android 12/13 ART unwinding bug, fixed in the ART module of Android 13 QPR1): they count under one site with no frames and in alloctrack_heapprofd_broken_stack_samples_total",
			zap.Uint64("samples", d.Broken.Count), zap.Int("stacks", d.BrokenStacks), zap.Uint64("dump_samples", d.Delta.Count))
	}
	s.dumps++
	switch {
	case d.BufferOverran || d.BufferCorrupted:
		s.Stats.CountError(StageOverran)
		return fmt.Errorf("%w: its shared-memory buffer overran", ErrProfileEnded)
	case d.HitGuardrail:
		s.Stats.CountError(StageGuardrail)
		return fmt.Errorf("%w: it hit a heapprofd guardrail", ErrProfileEnded)
	case d.Disconnected:
		return fmt.Errorf("%w: the process disconnected from heapprofd", ErrProfileEnded)
	}
	return nil
}

// stop ends perfetto with SIGTERM (heapprofd writes a last dump), waits
// until it is gone, reads and counts the rest of the file and removes it.
func (s *HeapprofdSession) stop(ctx context.Context) error {
	if s.bg == 0 {
		return nil
	}
	pid := strconv.Itoa(s.bg)
	if _, _, _, err := s.Exec(ctx, nil, "kill", "-TERM", pid); err != nil {
		return fmt.Errorf("kill -TERM %s: %w", pid, err)
	}
	for {
		_, _, code, err := s.Exec(ctx, nil, "kill", "-0", pid)
		if err != nil {
			return fmt.Errorf("waiting for perfetto %s to end: %w", pid, err)
		}
		if code != 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("perfetto %s still running after %v: %w", pid, s.Config.StopTimeout, ctx.Err())
		case <-time.After(s.Config.Poll):
		}
	}
	s.bg = 0
	var rerr error
	if err := s.read(ctx); err != nil && !errors.Is(err, ErrRejected) && !errors.Is(err, ErrProfileEnded) {
		rerr = err
	}
	if _, errOut, code, err := s.Exec(ctx, nil, "rm", "-f", s.path); err != nil || code != 0 {
		return errors.Join(rerr, fmt.Errorf("rm %s: exit %d %s %v", s.path, code, firstLine(errOut, nil), err))
	}
	s.Log.Info("heapprofd session stopped", zap.String("file", s.path), zap.Int("dumps", s.dumps))
	return rerr
}

// CleanHeapprofd stops every perfetto of ours on a device and removes our
// trace files: what an earlier run of the daemon left behind when it was
// killed, or when the device or the adb server went away. Ours are the
// perfetto processes writing to, and the files named, HeapprofdPrefix in
// PerfettoTraceDir; nothing else is touched.
func CleanHeapprofd(ctx context.Context, exec ExecFunc) (stopped, removed int, err error) {
	out, errOut, code, err := exec(ctx, nil, "ps", "-A", "-o", "PID,ARGS")
	if err != nil || code != 0 {
		return 0, 0, fmt.Errorf("listing processes: exit %d %s %v", code, firstLine(errOut, out), err)
	}
	var pids []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "perfetto" && !strings.HasSuffix(f[1], "/perfetto") {
			continue
		}
		if _, err := strconv.Atoi(f[0]); err == nil && strings.Contains(line, " "+PerfettoTraceDir+"/"+HeapprofdPrefix) {
			pids = append(pids, f[0])
		}
	}
	if len(pids) > 0 {
		if _, errOut, code, err := exec(ctx, nil, append([]string{"kill", "-TERM"}, pids...)...); err != nil || code != 0 {
			return 0, 0, fmt.Errorf("stopping perfetto %v: exit %d %s %v", pids, code, firstLine(errOut, nil), err)
		}
		stopped = len(pids)
		// Each leaves once its last dump is written; wait a little so the
		// files are complete before they go.
		for _, p := range pids {
			for i := 0; i < 50; i++ {
				if _, _, code, err := exec(ctx, nil, "kill", "-0", p); err != nil || code != 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	out, errOut, code, err = exec(ctx, nil, "ls", PerfettoTraceDir)
	if err != nil || code != 0 {
		return stopped, 0, fmt.Errorf("listing %s: exit %d %s %v", PerfettoTraceDir, code, firstLine(errOut, out), err)
	}
	var files []string
	for _, name := range strings.Fields(string(out)) {
		if strings.HasPrefix(name, HeapprofdPrefix) && !strings.Contains(name, "/") {
			files = append(files, PerfettoTraceDir+"/"+name)
		}
	}
	if len(files) > 0 {
		if _, errOut, code, err := exec(ctx, nil, append([]string{"rm", "-f"}, files...)...); err != nil || code != 0 {
			return stopped, 0, fmt.Errorf("removing %d trace files: exit %d %s %v", len(files), code, firstLine(errOut, nil), err)
		}
	}
	return stopped, len(files), nil
}

// firstLine is the first non-empty line of a or else b, for messages.
func firstLine(a, b []byte) string {
	for _, s := range [][]byte{a, b} {
		for _, line := range strings.Split(string(s), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				return truncateBytes([]byte(line), 200)
			}
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
