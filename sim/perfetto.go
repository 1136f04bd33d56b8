package sim

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alloctrack/alloctrack/perfetto"
)

// A simulated device's perfetto: the command line a shell user runs to
// record heapprofd sessions, the background processes those sessions are,
// and the one directory they may write their traces to. Only what a
// heapprofd session needs is simulated: the android.heapprofd data
// source, sampling the Java heap (com.android.art) of Android 12+ VMs.

// PerfettoTraceDir is the directory perfetto writes traces to; the shell
// user may create, read, list and remove files there.
const PerfettoTraceDir = "/data/misc/perfetto-traces"

// apiPerfetto is the first API level with a perfetto binary (Android 9);
// heapprofd and thus every session here needs Android 10.
const apiPerfetto = 28

// apiBackgroundWait is the first API level whose perfetto has
// --background-wait (-D): perfetto v22, Android 13.
const apiBackgroundWait = 33

// The tracing service's limits on concurrent sessions
// (kMaxConcurrentTracingSessionsPerUid and kMaxConcurrentTracingSessions in
// perfetto's src/tracing/service/tracing_service_impl.cc): every session
// started from adb shell is uid 2000's.
const (
	MaxSessionsPerUID = 5
	MaxSessions       = 15
)

// chunkSize is the size of the shared-memory chunks heapprofd writes its
// packets into: the tracing service copies a chunk into the file only once
// it is committed (full, or flushed).
const chunkSize = 4096

// DefaultPerfettoStopDelay is how long a simulated perfetto lives after
// SIGTERM: it flushes, the data source stops and writes its last dump,
// and the service writes the file out before perfetto exits.
const DefaultPerfettoStopDelay = 250 * time.Millisecond

// The simulated device's clocks, as a trace's clock snapshots give them:
// REALTIME is the host's wall clock (as logcat's stamps, LogEntry.Time),
// MONOTONIC the time since Device.boot, and BOOTTIME the same (the device
// never suspends). The coarse clocks advance by whole kernel ticks
// (coarseTick): heapprofd's dump windows are in CLOCK_MONOTONIC_COARSE.
// A session writes one clock snapshot, when it starts: the tracing service
// writes another only when a clock drifted 10 ms or more from BOOTTIME
// (tracing_service_impl.cc SnapshotClocks), which the host's wall clock
// does not do in a simulated session's life.
//
// coarseTick is one kernel tick, 1/CONFIG_HZ: 4 ms at HZ=250.
const coarseTick = 4 * time.Millisecond

// monoCoarse is CLOCK_MONOTONIC_COARSE at t, in ns.
func (d *Device) monoCoarse(t time.Time) uint64 {
	return uint64(max(t.Sub(d.boot), 0).Truncate(coarseTick))
}

// clockSnapshot reads the device's clocks at now as the tracing service
// does (src/base/clock_snapshots.cc: BOOTTIME, REALTIME_COARSE,
// MONOTONIC_COARSE, REALTIME, MONOTONIC, MONOTONIC_RAW).
func (d *Device) clockSnapshot(now time.Time) []perfetto.ClockReading {
	mono := uint64(max(now.Sub(d.boot), 0))
	wall := uint64(now.UnixNano())
	return []perfetto.ClockReading{
		{ID: perfetto.ClockBoottime, Timestamp: mono},
		{ID: perfetto.ClockRealtimeCoarse, Timestamp: wall - wall%uint64(coarseTick)},
		{ID: perfetto.ClockMonotonicCoarse, Timestamp: d.monoCoarse(now)},
		{ID: perfetto.ClockRealtime, Timestamp: wall},
		{ID: perfetto.ClockMonotonic, Timestamp: mono},
		{ID: perfetto.ClockMonotonicRaw, Timestamp: mono},
	}
}

// perfettoProc is one perfetto process: one tracing session.
type perfettoProc struct {
	d       *Device
	pid     int
	args    []string
	path    string
	cfg     *perfetto.HeapprofdSession
	w       *perfetto.Writer
	buf     bytes.Buffer // written, not yet in the file
	targets map[int]*hpTarget
	sig     chan string
	done    chan struct{}
	overrun atomic.Bool // the DISCARD buffer overran: nothing more is written
}

type hpTarget struct {
	vm    *VM
	state hpAttach
	ended bool
}

// PerfettoSession describes a running perfetto process of a device.
type PerfettoSession struct {
	PID         int
	Args        []string
	Output      string
	SessionName string
	Targets     []int // pids asked for, or found by name
}

// PerfettoSessions lists the device's running perfetto processes.
func (d *Device) PerfettoSessions() []PerfettoSession {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []PerfettoSession
	for _, p := range d.perfettos {
		s := PerfettoSession{PID: p.pid, Args: slices.Clone(p.args), Output: p.path, SessionName: p.cfg.UniqueSessionName}
		for pid := range p.targets {
			s.Targets = append(s.Targets, pid)
		}
		slices.Sort(s.Targets)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// TraceFiles lists the files in the device's trace directory, by name,
// with their sizes.
func (d *Device) TraceFiles() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for path, b := range d.files {
		out[strings.TrimPrefix(path, PerfettoTraceDir+"/")] = len(b)
	}
	return out
}

// TraceFile returns a trace file's bytes.
func (d *Device) TraceFile(name string) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.files[PerfettoTraceDir+"/"+name]
	return slices.Clone(b), ok
}

// StartForeignSession starts a perfetto session that is not the daemon's
// (as Android Studio's would be) writing to name in the trace directory,
// profiling pids. It returns the session's pid.
func (d *Device) StartForeignSession(name string, interval uint64, pids ...int) (int, error) {
	cfg := &perfetto.HeapprofdSession{
		WriteIntoFile: true, FileWritePeriodMS: 1000, SamplingInterval: interval,
		Heaps: []string{perfetto.ArtHeap}, DumpIntervalMS: 1000, UniqueSessionName: "studio-" + name,
	}
	for _, p := range pids {
		cfg.PIDs = append(cfg.PIDs, uint64(p))
	}
	path := PerfettoTraceDir + "/" + name
	p, refusal, err := d.startPerfetto(cfg, path, []string{"perfetto", "--background", "-c", "-", "-o", path})
	if err != nil {
		return 0, err
	}
	if refusal != "" {
		return 0, errors.New(refusal)
	}
	return p.pid, nil
}

// perfettoCommand runs "perfetto" as the shell does: -c FILE or -c - (the
// config on standard input), binary or with --txt; -o the trace file,
// which must lie in PerfettoTraceDir; --background (-d) prints the pid of
// the session's process and returns. In the foreground it returns when
// the session ends, which needs duration_ms.
func (d *Device) perfettoCommand(argv []string, in *shellInput) (out, errOut []byte, code int) {
	fail := func(format string, args ...any) ([]byte, []byte, int) {
		return nil, []byte("perfetto: " + fmt.Sprintf(format, args...) + "\n"), 1
	}
	if d.cfg.API < apiPerfetto || d.cfg.NoPerfetto {
		return nil, []byte("/system/bin/sh: perfetto: inaccessible or not found\n"), 127
	}
	if len(argv) == 2 && argv[1] == "--version" {
		if d.cfg.API < apiPerfettoVersion {
			// getopt's complaint, then PrintUsage (PERFETTO_ELOG), status 1.
			return fail("unrecognized option '--version'\n\nUsage: perfetto")
		}
		return []byte(perfettoVersion(d.cfg.API) + "\n"), nil, 0
	}
	a, msg := d.perfettoArgs(argv)
	if msg != "" {
		return fail("%s", msg)
	}
	cfg, msg := d.perfettoConfig(a, in)
	if msg != "" {
		return fail("%s", msg)
	}
	p, refusal, err := d.startPerfetto(cfg, a.outPath, argv)
	if err != nil {
		return fail("%v", err)
	}
	switch {
	case a.wait && refusal != "":
		// --background-wait: the parent waits for tracing to start and
		// exits non-zero when the service refuses it.
		return nil, []byte("perfetto: Service error: " + refusal + "\n"), 1
	case a.background:
		// --background: the parent prints the child's pid and exits 0
		// before the service has answered; a refusal reaches only logcat,
		// and the child is gone at once.
		return []byte(strconv.Itoa(p.pid) + "\n"), nil, 0
	case refusal != "":
		return nil, []byte("perfetto: Service error: " + refusal + "\n"), 1
	}
	<-p.done
	return nil, nil, 0
}

// perfettoOpts are the options of one perfetto command line.
type perfettoOpts struct {
	cfgPath, outPath      string
	background, wait, txt bool
}

// perfettoArgs reads perfetto's options as its getopt does; msg is its
// complaint, "" when they are good.
func (d *Device) perfettoArgs(argv []string) (o perfettoOpts, msg string) {
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch a {
		case "--background", "-d":
			o.background = true
		case "--background-wait", "-D":
			if d.cfg.API < apiBackgroundWait {
				// getopt of a perfetto older than v22.
				if a == "-D" {
					return o, "invalid option -- 'D'"
				}
				return o, fmt.Sprintf("unrecognized option '%s'", a)
			}
			o.background, o.wait = true, true
		case "--txt":
			o.txt = true
		case "-c", "--config", "-o", "--out":
			if i+1 >= len(argv) {
				return o, fmt.Sprintf("option %s requires an argument", a)
			}
			i++
			if a == "-c" || a == "--config" {
				o.cfgPath = argv[i]
			} else {
				o.outPath = argv[i]
			}
		default:
			return o, fmt.Sprintf("unrecognized option '%s'", a)
		}
	}
	switch {
	case o.cfgPath == "":
		return o, "a config is required (-c)"
	case o.outPath == "":
		return o, "Either --out or --upload is required"
	}
	return o, ""
}

// perfettoConfig reads the session's config (a file, or standard input
// for -c -) and checks it against its output file; msg says what is
// wrong.
func (d *Device) perfettoConfig(o perfettoOpts, in *shellInput) (cfg *perfetto.HeapprofdSession, msg string) {
	var raw []byte
	if o.cfgPath == "-" {
		raw = in.read()
	} else {
		d.mu.Lock()
		b, ok := d.files[o.cfgPath]
		d.mu.Unlock()
		if !ok {
			return nil, "Could not open " + o.cfgPath
		}
		raw = b
	}
	var err error
	if o.txt {
		cfg, err = parseTextConfig(string(raw))
	} else {
		cfg, err = perfetto.ParseHeapprofdSession(raw)
	}
	if err != nil {
		return nil, fmt.Sprintf("The trace config is invalid: %v", err)
	}
	if cfg.OutputPath != "" {
		// perfetto_cmd.cc, from Android 11: the service is to create the
		// file, so perfetto may not be given one too.
		return nil, "Can't pass --out or --upload if output_path is set in the trace config"
	}
	if dir, name, ok := strings.Cut(o.outPath, PerfettoTraceDir+"/"); !ok || dir != "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Sprintf("Failed to open %s: Permission denied", o.outPath)
	}
	if !o.background && cfg.DurationMS == 0 {
		return nil, "sim: a session in the foreground needs duration_ms"
	}
	return cfg, ""
}

// startPerfetto creates the trace file and starts the session's process.
// A session the tracing service refuses (a unique name another running
// session has, or one over the limits on concurrent sessions) ends at once,
// leaving its file empty; refusal says why.
func (d *Device) startPerfetto(cfg *perfetto.HeapprofdSession, path string, argv []string) (p *perfettoProc, refusal string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, "", errors.New("device is closed")
	}
	if d.nextBgPID == 0 {
		d.nextBgPID = 4200
	}
	d.nextBgPID += 3
	p = &perfettoProc{
		d: d, pid: d.nextBgPID, args: slices.Clone(argv), path: path, cfg: cfg,
		targets: map[int]*hpTarget{}, sig: make(chan string, 4), done: make(chan struct{}),
	}
	p.w = perfetto.NewWriter(&p.buf, &perfetto.WriterOptions{Sequence: uint32(p.pid)})
	d.files[path] = []byte{}
	for _, o := range d.perfettos {
		if cfg.UniqueSessionName != "" && o.cfg.UniqueSessionName == cfg.UniqueSessionName {
			refusal = fmt.Sprintf("A trace with this unique session name (%s) already exists", cfg.UniqueSessionName)
		}
	}
	// Every session here is the shell's (uid 2000), so the per-uid limit
	// is reached first, unless the device counts others' sessions too.
	switch running := len(d.perfettos); {
	case running+d.cfg.OtherUIDSessions >= MaxSessions:
		refusal = fmt.Sprintf("Too many concurrent tracing sesions (%d)", running+d.cfg.OtherUIDSessions)
	case running >= MaxSessionsPerUID:
		refusal = fmt.Sprintf("Too many concurrent tracing sesions (%d) for uid 2000", running)
	}
	if refusal != "" {
		d.refused++
		close(p.done)
		return p, refusal, nil
	}
	d.perfettos[p.pid] = p
	go p.run()
	return p, "", nil
}

// RefusedSessions counts the perfetto sessions the device's tracing
// service refused.
func (d *Device) RefusedSessions() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refused
}

// signal delivers a signal (TERM, INT or KILL) to a perfetto process.
func (p *perfettoProc) signal(sig string) {
	select {
	case p.sig <- sig:
	default:
	}
}

func (p *perfettoProc) run() {
	start := time.Now()
	p.attach(start)
	clocks := p.d.clockSnapshot(start)
	p.w.WriteClockSnapshot(clocks[0].Timestamp, clocks...)
	t := p.timers()
	defer t.stop()
	p.end(p.loop(t))
}

// attach starts profiling each live process the session names (by pid or
// cmdline) that it does not profile yet, if it asks for the Java heap.
func (p *perfettoProc) attach(now time.Time) {
	if !slices.Contains(p.cfg.Heaps, perfetto.ArtHeap) || p.cfg.SamplingInterval == 0 {
		return
	}
	startDelay := cmp.Or(p.d.cfg.HeapprofdStartDelay, DefaultHeapprofdStartDelay)
	for _, vm := range p.d.VMs() {
		if p.targets[vm.PID()] != nil || !vm.Alive() {
			continue
		}
		if !slices.Contains(p.cfg.PIDs, uint64(vm.PID())) && !slices.Contains(p.cfg.ProcessCmdlines, vm.ProcessName()) {
			continue
		}
		t := &hpTarget{vm: vm, state: vm.attachHeapprofd(p, p.cfg.SamplingInterval, startDelay, now)}
		// Only the session's goroutine writes targets; PerfettoSessions
		// reads them under the device's lock.
		p.d.mu.Lock()
		p.targets[vm.PID()] = t
		p.d.mu.Unlock()
	}
}

// sessionTimers are a session's clocks: dumps (after their phase), file
// writes, flushes and its end; a channel that never fires for one it does
// not have.
type sessionTimers struct {
	dump, write, flush, end <-chan time.Time
	dumpT                   *time.Ticker // after the phase
	stops                   []func() bool
}

func (t *sessionTimers) stop() {
	for _, f := range t.stops {
		f()
	}
}

func (p *perfettoProc) timers() *sessionTimers {
	never := make(<-chan time.Time)
	t := &sessionTimers{dump: never, flush: never, end: never}
	if p.cfg.DumpIntervalMS > 0 {
		phase := time.NewTimer(time.Duration(p.cfg.DumpPhaseMS) * time.Millisecond)
		t.dump, t.stops = phase.C, append(t.stops, phase.Stop)
	}
	period := time.Duration(max(p.cfg.FileWritePeriodMS, 100)) * time.Millisecond
	if p.cfg.FileWritePeriodMS == 0 {
		period = 5 * time.Second
	}
	write := time.NewTicker(period)
	t.write, t.stops = write.C, append(t.stops, func() bool { write.Stop(); return true })
	if p.cfg.FlushPeriodMS > 0 {
		flush := time.NewTicker(time.Duration(p.cfg.FlushPeriodMS) * time.Millisecond)
		t.flush, t.stops = flush.C, append(t.stops, func() bool { flush.Stop(); return true })
	}
	if p.cfg.DurationMS > 0 {
		end := time.NewTimer(time.Duration(p.cfg.DurationMS) * time.Millisecond)
		t.end, t.stops = end.C, append(t.stops, end.Stop)
	}
	return t
}

// loop runs the session until its duration, a signal or a full file ends
// it; final says it ends as perfetto ends a session (not killed, not
// disabled by the service).
func (p *perfettoProc) loop(t *sessionTimers) (final bool) {
	for {
		full := false
		select {
		case <-t.dump:
			if t.dumpT == nil {
				t.dumpT = time.NewTicker(time.Duration(p.cfg.DumpIntervalMS) * time.Millisecond)
				dumpT := t.dumpT
				t.dump, t.stops = dumpT.C, append(t.stops, func() bool { dumpT.Stop(); return true })
			}
			now := time.Now()
			p.attach(now)
			p.dumpRound(now)
		case <-t.write:
			// The periodic write copies only committed chunks: the tail
			// of the last dump waits for the next dump or a flush.
			full = p.writeOut(false)
		case <-t.flush:
			full = p.writeOut(true)
		case <-t.end:
			return true
		case sig := <-p.sig:
			if sig == "KILL" {
				return false
			}
			// Flush, stop the data sources, write out: perfetto is still
			// there meanwhile, and the last dump not yet in the file.
			time.Sleep(cmp.Or(p.d.cfg.PerfettoStopDelay, DefaultPerfettoStopDelay))
			return true
		}
		if full {
			// max_file_size_bytes reached: the service disables the
			// session; nothing more reaches the file.
			return false
		}
	}
}

// end ends the session. A final end writes a last dump, then the
// processes another session held (rejected_concurrent) in a packet of
// their own, then the trace; the file is closed either way.
func (p *perfettoProc) end(final bool) {
	if final {
		p.dumpRound(time.Now())
		var rejected []uint64
		for pid, t := range p.targets {
			if t.state == hpRejected {
				rejected = append(rejected, uint64(pid))
			}
		}
		slices.Sort(rejected)
		p.w.WriteRejected(uint64(time.Since(p.d.boot).Nanoseconds()), rejected...)
		p.writeOut(true)
	}
	for _, t := range p.targets {
		t.vm.detachHeapprofd(p)
	}
	p.d.mu.Lock()
	delete(p.d.perfettos, p.pid)
	p.d.mu.Unlock()
	close(p.done)
}

// dumpRound writes one dump of every process the session profiles.
func (p *perfettoProc) dumpRound(now time.Time) {
	pids := make([]int, 0, len(p.targets))
	for pid := range p.targets {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	boot := uint64(now.Sub(p.d.boot).Nanoseconds())
	var specs []perfetto.DumpSpec
	for _, pid := range pids {
		t := p.targets[pid]
		if t.ended || t.state == hpIneligible || t.state == hpRejected {
			// An ineligible process gives nothing; a rejected one is
			// listed only when the data source stops.
			continue
		}
		d := t.vm.heapprofdDump(p, now)
		if !d.present {
			continue
		}
		for _, fr := range d.retire {
			p.w.Retire(fr)
		}
		d.spec.PacketTimestamp = boot
		specs = append(specs, d.spec)
		t.ended = d.ended
	}
	// A round with no process to dump is still its empty ProfilePacket.
	p.w.WriteDumps(specs...)
}

// OverrunSessions makes every running perfetto session's buffer overrun
// once: with the DISCARD fill policy the service then takes no more of
// its data for good, while perfetto lives on (trace_buffer.cc), so the
// file stops growing.
func (d *Device) OverrunSessions() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.perfettos {
		p.overrun.Store(true)
	}
}

// writeOut moves what the session wrote into its file: all of it when
// flushed, else only whole chunks. It reports whether the file reached
// max_file_size_bytes, which ends the session.
func (p *perfettoProc) writeOut(flushed bool) (full bool) {
	if p.overrun.Load() {
		p.buf.Reset()
		return false
	}
	n := p.buf.Len()
	if !flushed {
		n -= n % chunkSize
	}
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	b, ok := p.d.files[p.path]
	if limit := int(p.cfg.MaxFileSizeBytes); limit > 0 && len(b)+n >= limit {
		n = max(min(n, limit-len(b)), 0)
		full = true
	}
	if n == 0 {
		return full
	}
	// A file removed under the session is gone for good: perfetto goes on
	// writing to the unlinked file, which no one can read.
	if ok {
		p.d.files[p.path] = append(b, p.buf.Next(n)...)
	} else {
		p.buf.Next(n)
	}
	return full
}

// stopPerfettos ends every perfetto process without a last dump, as when
// the device shuts down.
func (d *Device) stopPerfettos() {
	d.mu.Lock()
	procs := make([]*perfettoProc, 0, len(d.perfettos))
	for _, p := range d.perfettos {
		procs = append(procs, p)
	}
	d.mu.Unlock()
	for _, p := range procs {
		p.signal("KILL")
		<-p.done
	}
}

// killCommand is kill for the shell user. SELinux lets the shell domain
// send perfetto only what the "signal" permission covers (TERM, INT, HUP):
// -0 needs "signull" and -9 "sigkill", which shell is not granted on the
// perfetto domain (system/sepolicy private/shell.te), so both fail with
// EACCES. Other processes are not the shell's to signal.
func (d *Device) killCommand(args []string) (out, errOut []byte, code int) {
	sig := "TERM"
	if len(args) > 0 && strings.HasPrefix(args[0], "-") {
		sig = strings.TrimPrefix(strings.TrimPrefix(args[0], "-"), "SIG")
		args = args[1:]
		switch sig {
		case "15":
			sig = "TERM"
		case "2":
			sig = "INT"
		case "9":
			sig = "KILL"
		case "1":
			sig = "HUP"
		case "0", "TERM", "INT", "KILL", "HUP":
		default:
			return nil, []byte(fmt.Sprintf("kill: unknown signal '%s'\n", sig)), 1
		}
	}
	if len(args) == 0 {
		return nil, []byte("kill: Need 1 argument\n"), 1
	}
	var errs bytes.Buffer
	for _, a := range args {
		pid, err := strconv.Atoi(a)
		if err != nil {
			fmt.Fprintf(&errs, "kill: not a number: %s\n", a)
			continue
		}
		d.mu.Lock()
		p := d.perfettos[pid]
		d.mu.Unlock()
		switch {
		case p != nil && (sig == "0" || sig == "KILL"):
			fmt.Fprintf(&errs, "kill: pid %d: Permission denied\n", pid)
		case p != nil:
			p.signal(sig)
		case d.hasProcess(pid):
			fmt.Fprintf(&errs, "kill: pid %d: Operation not permitted\n", pid)
		default:
			fmt.Fprintf(&errs, "kill: pid %d: No such process\n", pid)
		}
	}
	if errs.Len() > 0 {
		return nil, errs.Bytes(), 1
	}
	return nil, nil, 0
}

// procCmdlineLocked reads /proc/PID/cmdline: argv, each argument ended by
// a NUL; nil when there is no such process. isProc is false for any other
// path. The shell may read every domain's /proc entries (system/sepolicy:
// shell may search and read the dirs and files of every domain).
func (d *Device) procCmdlineLocked(path string) (cmdline []byte, isProc bool) {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return nil, false
	}
	if rest == "uptime" {
		// CLOCK_BOOTTIME seconds (the trace's clock), and idle time.
		up := time.Since(d.boot).Seconds()
		return fmt.Appendf(nil, "%.2f %.2f\n", up, up*1.5), true
	}
	ps, ok := strings.CutSuffix(rest, "/cmdline")
	pid, err := strconv.Atoi(ps)
	if !ok || err != nil {
		return nil, false
	}
	var argv []string
	if p := d.perfettos[pid]; p != nil {
		argv = p.args
	} else if name, ok := d.procs[pid]; ok {
		argv = []string{name}
	} else {
		for _, vm := range d.vms {
			if vm.PID() == pid && vm.Alive() {
				argv = []string{vm.AppName()}
			}
		}
	}
	if argv == nil {
		return nil, true
	}
	for _, a := range argv {
		cmdline = append(append(cmdline, a...), 0)
	}
	return cmdline, true
}

func (d *Device) hasProcess(pid int) bool {
	for _, p := range d.processes() {
		if p.pid == pid {
			return true
		}
	}
	return false
}

// fileCommand runs tail, cat, rm and ls on the device's files: only the
// trace directory holds any.
func (d *Device) fileCommand(argv []string) (out, errOut []byte, code int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch argv[0] {
	case "tail":
		return d.tailLocked(argv)
	case "cat":
		return d.catLocked(argv)
	case "rm":
		return d.rmLocked(argv)
	case "ls":
		return d.lsLocked(argv)
	}
	return nil, nil, 127
}

// noFile is a file command's complaint about path.
func noFile(argv []string, path string) []byte {
	return []byte(fmt.Sprintf("%s: %s: No such file or directory\n", argv[0], path))
}

// tailLocked is tail -c +N FILE (from byte N) or tail -c N FILE (the last
// N).
func (d *Device) tailLocked(argv []string) (out, errOut []byte, code int) {
	if len(argv) != 4 || argv[1] != "-c" {
		return nil, []byte("tail: sim: only tail -c [+]N FILE\n"), 1
	}
	b, ok := d.files[argv[3]]
	if !ok {
		return nil, noFile(argv, argv[3]), 1
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(argv[2], "+"), 10, 64)
	if err != nil || n < 0 {
		return nil, []byte(fmt.Sprintf("tail: bad -c '%s'\n", argv[2])), 1
	}
	if strings.HasPrefix(argv[2], "+") {
		from := min(max(n-1, 0), int64(len(b)))
		return slices.Clone(b[from:]), nil, 0
	}
	return slices.Clone(b[max(int64(len(b))-n, 0):]), nil, 0
}

// catLocked is cat FILE...: files and /proc/PID/cmdline.
func (d *Device) catLocked(argv []string) (out, errOut []byte, code int) {
	for _, path := range argv[1:] {
		if cmdline, isProc := d.procCmdlineLocked(path); isProc {
			if cmdline == nil {
				errOut = append(errOut, noFile(argv, path)...)
			}
			out = append(out, cmdline...)
			continue
		}
		b, ok := d.files[path]
		if !ok {
			errOut = append(errOut, noFile(argv, path)...)
			continue
		}
		out = append(out, b...)
	}
	if len(errOut) > 0 {
		return out, errOut, 1
	}
	return out, nil, 0
}

// rmLocked is rm [-f] FILE...
func (d *Device) rmLocked(argv []string) (out, errOut []byte, code int) {
	force := false
	for _, path := range argv[1:] {
		if path == "-f" {
			force = true
			continue
		}
		if _, ok := d.files[path]; !ok {
			if !force {
				errOut = append(errOut, noFile(argv, path)...)
			}
			continue
		}
		delete(d.files, path)
	}
	if len(errOut) > 0 {
		return nil, errOut, 1
	}
	return nil, nil, 0
}

// lsLocked is ls DIR.
func (d *Device) lsLocked(argv []string) (out, errOut []byte, code int) {
	if len(argv) != 2 {
		return nil, []byte("ls: sim: only ls DIR\n"), 1
	}
	dir := strings.TrimSuffix(argv[1], "/")
	var names []string
	for path := range d.files {
		if name, ok := strings.CutPrefix(path, dir+"/"); ok && !strings.Contains(name, "/") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		out = append(out, n+"\n"...)
	}
	return out, nil, 0
}

// apiPerfettoVersion is the first API level whose perfetto has
// --version: the option came in perfetto commit ec59013a1e (2020-11),
// after Android 11 shipped (docs/doctor.md).
const apiPerfettoVersion = 31

// perfettoVersion is the line perfetto --version prints: "Perfetto V
// (N/A)", V the newest release the tree's CHANGELOG names and N/A the
// revision an Android build leaves out (--no_git); v16 on Android 12 and
// v22 on 13 (docs/heapprofd-devices.md fact 4). Later releases get a
// version that names the simulator (docs/doctor.md).
func perfettoVersion(api int) string {
	switch api {
	case 31, 32:
		return "Perfetto v16.0 (N/A)"
	case 33:
		return "Perfetto v22.0 (N/A)"
	}
	return fmt.Sprintf("Perfetto v0.0-sim-api%d (N/A)", api)
}
