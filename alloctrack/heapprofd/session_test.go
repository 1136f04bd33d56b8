package heapprofd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/internal/source"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// hpDevice is one simulated Android 12+ device served through the
// simulator's adb host server, and a way to run commands on it.
type hpDevice struct {
	farm *sim.Farm
	dev  *sim.Device
	exec heapprofd.ExecFunc
}

func newHPDevice(t *testing.T, api, apps int, rate float64, adjust func(*sim.DeviceConfig)) *hpDevice {
	t.Helper()
	w := sim.DefaultWorkload()
	w.Rate, w.Sites = rate, 20
	farm := sim.NewFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: apps, APIs: []int{api}, Workload: w,
		Device: func(_ int, c *sim.DeviceConfig) {
			c.HeapprofdStartDelay = 20 * time.Millisecond
			if adjust != nil {
				adjust(c)
			}
		}})
	t.Cleanup(func() { farm.Close() })
	a, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src := source.New(a.String())
	dev := farm.Devices()[0]
	return &hpDevice{farm: farm, dev: dev, exec: func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
		return src.Exec(ctx, dev.Serial(), stdin, argv...)
	}}
}

// session returns a session for every app of the device, by name, with a
// target per app.
func (h *hpDevice) session(window time.Duration) (*heapprofd.Session, map[int]*heapprofd.Target) {
	byPID := map[int]*heapprofd.Target{}
	s := &heapprofd.Session{
		Serial: h.dev.Serial(), API: h.dev.Config().API, Exec: h.exec, Window: window,
		Config: heapprofd.Config{StopTimeout: 5 * time.Second, StartCheck: 200 * time.Millisecond},
	}
	for _, vm := range h.dev.VMs() {
		t := &heapprofd.Target{
			Counters: alloctrack.NewCounters(alloctrack.AggregateConfig{}),
			Stats:    alloctrack.NewAppStats(h.dev.Serial(), vm.PID()),
		}
		byPID[vm.PID()] = t
		s.Targets = append(s.Targets, t)
		s.Processes = append(s.Processes, vm.ProcessName())
	}
	s.Resolve = func(_ context.Context, pid int) *heapprofd.Target { return byPID[pid] }
	return s, byPID
}

// leftovers lists perfetto sessions and trace files of ours on the device.
func (h *hpDevice) leftovers() (sessions int, files []string) {
	for _, p := range h.dev.PerfettoSessions() {
		if strings.HasPrefix(p.SessionName, heapprofd.Prefix) {
			sessions++
		}
	}
	for name := range h.dev.TraceFiles() {
		if strings.HasPrefix(name, heapprofd.Prefix) {
			files = append(files, name)
		}
	}
	return sessions, files
}

// waitDumps waits until every target has counted n dumps.
func waitDumps(t *testing.T, byPID map[int]*heapprofd.Target, n uint64) {
	t.Helper()
	testwait.Until(t, 10*time.Millisecond, fmt.Sprintf("%d dumps of every app", n), func() (bool, string) {
		for pid, tg := range byPID {
			if d := tg.Stats.Snapshot().Heapprofd.Dumps; d < n {
				return false, fmt.Sprintf("pid %d: %d dumps", pid, d)
			}
		}
		return true, ""
	})
}

// TestHeapprofdSessionEightApps: one session samples eight apps of an
// Android 12 device (more than traced's 5 sessions per uid would allow
// one session each); when it stops, perfetto's last dump is read after
// perfetto is gone, so every app's samples equal the simulator's truth
// exactly, and nothing of ours is left.
func TestHeapprofdSessionEightApps(t *testing.T) {
	for _, api := range []int{31, 33} {
		t.Run("api"+string(rune('0'+api/10))+string(rune('0'+api%10)), func(t *testing.T) {
			h := newHPDevice(t, api, 8, 3000, nil)
			s, byPID := h.session(300 * time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			waitDumps(t, byPID, 3)
			if n := len(h.dev.PerfettoSessions()); n != 1 {
				t.Errorf("%d perfetto sessions on the device, want 1", n)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			for _, vm := range h.dev.VMs() {
				tr := vm.HeapprofdTruth()
				st := byPID[vm.PID()].Stats.Snapshot()
				if tr.Sampled.Total.Allocations == 0 || st.Heapprofd.Samples != tr.Sampled.Total.Allocations || st.Heapprofd.SampledBytes != tr.Sampled.Total.Bytes {
					t.Errorf("pid %d: counted %d samples %d bytes, the VM sampled %+v", vm.PID(), st.Heapprofd.Samples, st.Heapprofd.SampledBytes, tr.Sampled.Total)
				}
				if st.State != alloctrack.StateTracking {
					t.Errorf("pid %d: state %s", vm.PID(), st.State)
				}
			}
			if n, files := h.leftovers(); n != 0 || len(files) != 0 {
				t.Errorf("left on the device: %d sessions, files %v", n, files)
			}
		})
	}
}

// TestHeapprofdSessionRefused: with the tracing service full (other uids'
// sessions fill its 15), the session ends with the perfetto-refused stage
// and every app says so, both on Android 12 (--background: the refusal
// is seen by the process being gone) and 13 (--background-wait exits 1).
func TestHeapprofdSessionRefused(t *testing.T) {
	for _, api := range []int{31, 33} {
		h := newHPDevice(t, api, 2, 1000, func(c *sim.DeviceConfig) { c.OtherUIDSessions = sim.MaxSessions })
		s, byPID := h.session(300 * time.Millisecond)
		err := s.Run(context.Background())
		if !errors.Is(err, alloctrack.ErrPerfettoRefused) || alloctrack.ErrorStage(err) != alloctrack.StagePerfettoRefused {
			t.Fatalf("API %d: Run: %v, want a perfetto-refused error", api, err)
		}
		for pid, tg := range byPID {
			st := tg.Stats.Snapshot()
			if st.State != alloctrack.StateRefused || st.Errors[alloctrack.StagePerfettoRefused] != 1 {
				t.Errorf("API %d pid %d: state %s errors %v", api, pid, st.State, st.Errors)
			}
		}
		if n, files := h.leftovers(); n != 0 || len(files) != 0 {
			t.Errorf("API %d: left on the device: %d sessions, files %v", api, n, files)
		}
	}
}

// TestHeapprofdSessionIdleApp: an app that allocates nothing for many
// windows is tracking with zero (heapprofd writes ProfilePackets for the
// session, no samples of the app), never unprofileable; once it
// allocates, it is counted exactly.
func TestHeapprofdSessionIdleApp(t *testing.T) {
	h := newHPDevice(t, 31, 2, 0, nil)
	s, byPID := h.session(200 * time.Millisecond)
	var reads atomic.Int64 // windows: each reads what the file gained
	s.Exec = func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
		if strings.Contains(strings.Join(argv, " "), "tail -c +") {
			reads.Add(1)
		}
		return h.exec(ctx, stdin, argv...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	vms := h.dev.VMs()
	// 15 windows read; the old rule gave up after 3.
	testwait.Until(t, 10*time.Millisecond, "15 windows read", func() (bool, string) {
		return reads.Load() >= 15, fmt.Sprintf("%d windows", reads.Load())
	})
	for _, vm := range vms {
		if st := byPID[vm.PID()].Stats.Snapshot(); st.State != alloctrack.StateTracking || st.Heapprofd.Samples != 0 {
			t.Errorf("idle pid %d: state %s, %d samples", vm.PID(), st.State, st.Heapprofd.Samples)
		}
	}
	vms[0].Allocate(500)
	cancel() // the session reads perfetto's last dump once it is gone
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tr := vms[0].HeapprofdTruth()
	if st := byPID[vms[0].PID()].Stats.Snapshot(); tr.Sampled.Total.Allocations == 0 || st.Heapprofd.Samples != tr.Sampled.Total.Allocations {
		t.Errorf("after allocating: %d samples counted, %+v sampled", st.Heapprofd.Samples, tr.Sampled.Total)
	}
}

// TestHeapprofdSessionRotates: sessions rotate; across the rotations the
// samples stay exact (each session's last dump is read after its perfetto
// is gone), and the device never holds more than one session of ours nor
// more than one file.
func TestHeapprofdSessionRotates(t *testing.T) {
	h := newHPDevice(t, 33, 3, 2000, nil)
	ctx := testwait.Context(t)
	var targets map[int]*heapprofd.Target
	stop, watched := make(chan struct{}), make(chan int)
	go func() {
		most := 0
		for {
			select {
			case <-stop:
				watched <- most
				return
			case <-time.After(20 * time.Millisecond):
			}
			n, files := h.leftovers()
			most = max(most, n, len(files))
		}
	}()
	sessions := 0
	for sessions < 3 {
		s, byPID := h.session(200 * time.Millisecond)
		if targets != nil {
			// The same apps' targets go on counting.
			for pid, t := range targets {
				byPID[pid] = t
			}
			s.Targets = nil
			for _, t := range targets {
				s.Targets = append(s.Targets, t)
			}
		}
		targets = byPID
		s.Config.Rotate = time.Second
		if err := s.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("%d sessions in %v with a 1 s rotation", sessions, testwait.Bound)
		}
		sessions++
	}
	close(stop)
	most := <-watched
	for _, vm := range h.dev.VMs() {
		tr := vm.HeapprofdTruth()
		if st := targets[vm.PID()].Stats.Snapshot(); tr.Sampled.Total.Allocations == 0 || st.Heapprofd.Samples != tr.Sampled.Total.Allocations {
			t.Errorf("pid %d: %d samples counted over %d sessions, %+v sampled", vm.PID(), st.Heapprofd.Samples, sessions, tr.Sampled.Total)
		}
	}
	if most > 1 {
		t.Errorf("at most %d sessions or files of ours at once, want 1", most)
	}
}

// TestCleanHeapprofdWaitsForPerfetto: the clean-up at a device's arrival
// stops an earlier run's perfetto with SIGTERM (the shell may not send it
// signal 0 or SIGKILL), removes the file only once perfetto is gone, and
// leaves other tools' sessions and files alone.
func TestCleanHeapprofdWaitsForPerfetto(t *testing.T) {
	h := newHPDevice(t, 31, 2, 1000, func(c *sim.DeviceConfig) { c.PerfettoStopDelay = 400 * time.Millisecond })
	vms := h.dev.VMs()
	foreign, err := h.dev.StartForeignSession("studio.perfetto-trace", 4096, vms[1].PID())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := h.session(200 * time.Millisecond)
	s.Processes = []string{vms[0].ProcessName()}
	// Start a session and abandon it, as a daemon killed with SIGKILL:
	// from then on no command of it reaches the device (while it ran on,
	// it could see its perfetto stopped and remove the file before the
	// clean-up did).
	var killed atomic.Bool
	s.Exec = func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
		if killed.Load() {
			return nil, nil, 0, errors.New("the daemon was killed")
		}
		return h.exec(ctx, stdin, argv...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { s.Run(ctx); close(ran) }()
	defer func() { cancel(); <-ran }()
	testwait.Until(t, 10*time.Millisecond, "a session started", func() (bool, string) {
		n, files := h.leftovers()
		return n > 0 && len(files) > 0, fmt.Sprintf("%d sessions, files %v", n, files)
	})
	killed.Store(true)
	stopped, removed, left, err := heapprofd.Clean(context.Background(), h.exec, 50*time.Millisecond)
	if err != nil || stopped != 1 || removed != 1 || left != 0 {
		t.Fatalf("CleanHeapprofd: stopped %d removed %d left %d: %v", stopped, removed, left, err)
	}
	if n, files := h.leftovers(); n != 0 || len(files) != 0 {
		t.Errorf("left: %d sessions, files %v", n, files)
	}
	alive := false
	for _, p := range h.dev.PerfettoSessions() {
		alive = alive || p.PID == foreign
	}
	if _, ok := h.dev.TraceFiles()["studio.perfetto-trace"]; !ok || !alive {
		t.Errorf("the other tool's session (alive %v) or file was touched", alive)
	}
	for _, argv := range h.dev.ShellLog() {
		if argv[0] == "kill" && (argv[1] == "-0" || argv[1] == "-9" || argv[1] == "-KILL") {
			t.Errorf("the shell was asked to %q, which SELinux denies on perfetto", argv)
		}
	}
}

// TestHeapprofdSessionNoPerfetto: a device whose shell finds no perfetto
// is a start error, not a refusal, with and without --background-wait.
func TestHeapprofdSessionNoPerfetto(t *testing.T) {
	for _, api := range []int{31, 33} {
		h := newHPDevice(t, api, 1, 0, func(c *sim.DeviceConfig) { c.NoPerfetto = true })
		s, _ := h.session(300 * time.Millisecond)
		if err := s.Run(context.Background()); alloctrack.ErrorStage(err) != alloctrack.StagePerfettoStart || errors.Is(err, alloctrack.ErrPerfettoRefused) {
			t.Errorf("API %d: %v, want a perfetto-start error", api, err)
		}
	}
}

// TestHeapprofdSessionStalled: a session whose DISCARD buffer overran
// once takes no more data while perfetto lives on; the file stops
// growing, and the session ends with the perfetto-stalled stage, its
// perfetto stopped and file removed.
func TestHeapprofdSessionStalled(t *testing.T) {
	h := newHPDevice(t, 33, 2, 2000, nil)
	s, byPID := h.session(200 * time.Millisecond)
	s.Config.StallWindows = 3
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	testwait.Until(t, 20*time.Millisecond, "a dump counted", func() (bool, string) {
		return len(h.dev.PerfettoSessions()) > 0 && byPID[h.dev.VMs()[0].PID()].Stats.Snapshot().Heapprofd.Dumps > 0, ""
	})
	h.dev.OverrunSessions()
	select {
	case err := <-done:
		if alloctrack.ErrorStage(err) != alloctrack.StagePerfettoStalled || !errors.Is(err, alloctrack.ErrPerfettoStalled) {
			t.Fatalf("Run: %v, want a perfetto-stalled error", err)
		}
	case <-time.After(testwait.Bound):
		t.Fatal("a stalled session went on")
	}
	for pid, tg := range byPID {
		if n := tg.Stats.Snapshot().Errors[alloctrack.StagePerfettoStalled]; n != 1 {
			t.Errorf("pid %d: %d stalled errors", pid, n)
		}
	}
	if n, files := h.leftovers(); n != 0 || len(files) != 0 {
		t.Errorf("left: %d sessions, files %v", n, files)
	}
}

// TestHeapprofdSessionEndsAtMaxFileSize: the tracing service ends a
// session whose file reaches max_file_size_bytes; the session notices its
// perfetto gone and ends with the perfetto-ended stage, the file removed.
// On Android 12 (--background) the session fills its file before the
// start check looks: a perfetto gone with data written started, and is
// not called refused; what it wrote is counted.
func TestHeapprofdSessionEndsAtMaxFileSize(t *testing.T) {
	h := newHPDevice(t, 31, 2, 5000, nil)
	s, byPID := h.session(200 * time.Millisecond)
	// Above the first round of dumps (about 17 KiB, most of it interned
	// frames), reached a few rounds later.
	s.Config.MaxFileBytes = 24 << 10
	s.Config.StartCheck = 3 * time.Second
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	select {
	case err := <-done:
		if alloctrack.ErrorStage(err) != alloctrack.StagePerfettoEnded || !errors.Is(err, alloctrack.ErrPerfettoEnded) {
			t.Fatalf("Run: %v, want a perfetto-ended error", err)
		}
	case <-time.After(testwait.Bound):
		t.Fatal("the session went on past max_file_size_bytes")
	}
	for pid, tg := range byPID {
		if n := tg.Stats.Snapshot().Errors[alloctrack.StagePerfettoEnded]; n != 1 {
			t.Errorf("pid %d: %d perfetto-ended errors", pid, n)
		}
	}
	var samples uint64
	for _, tg := range byPID {
		samples += tg.Stats.Snapshot().Heapprofd.Samples
	}
	if samples == 0 {
		t.Error("nothing counted from the file written before max_file_size_bytes")
	}
	if n, files := h.leftovers(); n != 0 || len(files) != 0 {
		t.Errorf("left: %d sessions, files %v", n, files)
	}
}

// TestHeapprofdSessionStartLog: the "session started" line names the
// processes a session profiles the way it profiles them (by name: the
// daemon; by pid: capture) and carries no empty field for the other way.
func TestHeapprofdSessionStartLog(t *testing.T) {
	h := newHPDevice(t, 31, 1, 100, nil)
	vm := h.dev.VMs()[0]
	for _, byPID := range []bool{false, true} {
		s, _ := h.session(time.Second)
		if byPID {
			s.Processes, s.PIDs = nil, []int{vm.PID()}
		}
		core, logs := observer.New(zapcore.InfoLevel)
		started := make(chan struct{}, 1)
		s.Log = zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
			if e.Message == "heapprofd session started" {
				select {
				case started <- struct{}{}:
				default:
				}
			}
			return nil
		}))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("by pid %v: Run ended before the session started: %v", byPID, err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("by pid %v: Run: %v", byPID, err)
		}
		entries := logs.FilterMessage("heapprofd session started").All()
		if len(entries) != 1 {
			t.Fatalf("by pid %v: %d start lines", byPID, len(entries))
		}
		fields := entries[0].ContextMap()
		want, not := "processes", "pids"
		if byPID {
			want, not = not, want
		}
		if _, ok := fields[want]; !ok {
			t.Errorf("by pid %v: no %s field: %v", byPID, want, fields)
		}
		if v, ok := fields[not]; ok {
			t.Errorf("by pid %v: a %s field, %v", byPID, not, v)
		}
	}
}

// TestHeapprofdSessionReadsInPieces: the trace file is read in pieces of
// at most Config.ReadLimit, each command from where the last stopped,
// however much it gained in a window, and the samples counted still
// equal the simulator's truth exactly (issue 33 item 8, sibling).
func TestHeapprofdSessionReadsInPieces(t *testing.T) {
	const limit = 1 << 10
	h := newHPDevice(t, 31, 3, 3000, nil)
	var mu sync.Mutex
	var largest, full int
	exec := h.exec
	h.exec = func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
		out, errOut, code, err := exec(ctx, stdin, argv...)
		if strings.Contains(strings.Join(argv, " "), "tail -c +") {
			mu.Lock()
			largest = max(largest, len(out))
			if len(out) == limit {
				full++
			}
			mu.Unlock()
		}
		return out, errOut, code, err
	}
	s, byPID := h.session(300 * time.Millisecond)
	s.Config.ReadLimit = limit
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := full
		mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded generously
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if largest > limit || full < 4 {
		t.Fatalf("largest trace read %d bytes (limit %d); %d full pieces, want 4 or more", largest, limit, full)
	}
	for _, vm := range h.dev.VMs() {
		tr := vm.HeapprofdTruth()
		st := byPID[vm.PID()].Stats.Snapshot()
		if tr.Sampled.Total.Allocations == 0 || st.Heapprofd.Samples != tr.Sampled.Total.Allocations || st.Heapprofd.SampledBytes != tr.Sampled.Total.Bytes {
			t.Errorf("pid %d: counted %d samples %d bytes, the VM sampled %+v", vm.PID(), st.Heapprofd.Samples, st.Heapprofd.SampledBytes, tr.Sampled.Total)
		}
	}
}

// TestHeapprofdSessionEndsForSilentApps: heapprofd says that another
// session holds a process only when a session stops (fact 14), so a
// session with Config.Silence ends once some app has sent no sample in
// it for that long: its stop shows the app a foreign session holds held
// (and counts rejected-concurrent), the idle app stays tracking, the busy
// one counts on. The next session ends for them again only once their
// check is due. The foreign session and its file are not touched.
func TestHeapprofdSessionEndsForSilentApps(t *testing.T) {
	h := newHPDevice(t, 33, 3, 3000, nil)
	vms := h.dev.VMs()
	vms[1].Pause(true) // idle
	foreign, err := h.dev.StartForeignSession("studio.perfetto-trace", 4096, vms[2].PID())
	if err != nil {
		t.Fatal(err)
	}
	s, byPID := h.session(200 * time.Millisecond)
	s.Config.Silence = time.Second
	busy, idle, held := byPID[vms[0].PID()], byPID[vms[1].PID()], byPID[vms[2].PID()]
	for i := range 2 {
		s := &heapprofd.Session{Serial: s.Serial, API: s.API, Exec: s.Exec, Window: s.Window, Config: s.Config,
			Processes: s.Processes, Targets: s.Targets, Resolve: s.Resolve}
		done := make(chan error, 1)
		go func() { done <- s.Run(context.Background()) }()
		var err error
		testwait.Until(t, 10*time.Millisecond, fmt.Sprintf("session %d ended for its silent apps", i+1), func() (bool, string) {
			select {
			case err = <-done:
				return true, ""
			default:
				return false, "running"
			}
		})
		if err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
		if st := held.Stats.Snapshot(); st.State != alloctrack.StateHeld || st.Errors[alloctrack.StageRejected] != uint64(i+1) {
			t.Errorf("session %d: the app another session holds is %s with %d rejections, want held", i+1, st.State, st.Errors[alloctrack.StageRejected])
		}
		if st := idle.Stats.Snapshot(); st.State != alloctrack.StateTracking || st.Errors[alloctrack.StageRejected] != 0 {
			t.Errorf("session %d: the idle app is %s with %d rejections, want tracking", i+1, st.State, st.Errors[alloctrack.StageRejected])
		}
		if st := busy.Stats.Snapshot(); st.State != alloctrack.StateTracking || st.Heapprofd.Samples == 0 {
			t.Errorf("session %d: the busy app is %s with %d samples", i+1, st.State, st.Heapprofd.Samples)
		}
	}
	if n, files := h.leftovers(); n != 0 || len(files) != 0 {
		t.Errorf("left: %d sessions, files %v", n, files)
	}
	live := false
	for _, p := range h.dev.PerfettoSessions() {
		live = live || p.PID == foreign
	}
	if _, ok := h.dev.TraceFiles()["studio.perfetto-trace"]; !ok || !live {
		t.Errorf("the foreign session (running %v) or its file (%v) was touched", live, ok)
	}
}
