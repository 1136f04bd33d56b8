package alloctrack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/perfetto"
)

// fakePerfettoDevice answers the commands a heapprofd session sends, as
// a device's shell would: perfetto --background, tail -c +N, kill, rm,
// ps -A -o PID,ARGS and ls. Tests append dumps to a session's file with
// dump; kill -TERM appends the dumps queued with final, as heapprofd's
// last dump, and ends the process.
type fakePerfettoDevice struct {
	mu       sync.Mutex
	files    map[string]*bytes.Buffer
	writers  map[string]*perfetto.Writer
	procs    map[int]fakeProc
	nextPID  int
	final    map[string][]perfetto.DumpSpec
	log      [][]string
	refuse   string // perfetto's stderr when it refuses to start
	configs  []*perfetto.HeapprofdSession
	running  map[string]bool // unique session names
	stuckPID int             // a perfetto that ignores SIGTERM
}

type fakeProc struct {
	args    []string
	file    string
	session string
}

func newFakePerfettoDevice() *fakePerfettoDevice {
	return &fakePerfettoDevice{files: map[string]*bytes.Buffer{}, writers: map[string]*perfetto.Writer{},
		procs: map[int]fakeProc{}, nextPID: 5000, final: map[string][]perfetto.DumpSpec{}, running: map[string]bool{}}
}

func (f *fakePerfettoDevice) exec(_ context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, argv)
	switch argv[0] {
	case "perfetto":
		if f.refuse != "" {
			return nil, []byte(f.refuse + "\n"), 1, nil
		}
		i := slices.Index(argv, "-o")
		if i < 0 || i+1 >= len(argv) || !slices.Contains(argv, "--background") || !slices.Contains(argv, "-") {
			return nil, []byte("perfetto: bad arguments\n"), 1, nil
		}
		cfg, err := perfetto.ParseHeapprofdSession(stdin)
		if err != nil {
			return nil, []byte(err.Error() + "\n"), 1, nil
		}
		if f.running[cfg.UniqueSessionName] {
			return nil, []byte("A session with the same unique name is already running\n"), 1, nil
		}
		file := argv[i+1]
		if _, ok := f.files[file]; ok {
			return nil, []byte("file exists\n"), 1, nil
		}
		f.configs = append(f.configs, cfg)
		f.running[cfg.UniqueSessionName] = true
		f.files[file] = &bytes.Buffer{}
		f.writers[file] = perfetto.NewWriter(f.files[file], nil)
		f.nextPID++
		f.procs[f.nextPID] = fakeProc{args: argv, file: file, session: cfg.UniqueSessionName}
		return []byte(strconv.Itoa(f.nextPID) + "\n"), nil, 0, nil
	case "tail":
		n, _ := strconv.Atoi(strings.TrimPrefix(argv[2], "+"))
		b, ok := f.files[argv[3]]
		if !ok {
			return nil, []byte("tail: " + argv[3] + ": No such file or directory\n"), 1, nil
		}
		if n-1 >= b.Len() {
			return nil, nil, 0, nil
		}
		return slices.Clone(b.Bytes()[n-1:]), nil, 0, nil
	case "kill":
		code := 0
		for _, a := range argv[2:] {
			pid, _ := strconv.Atoi(a)
			p, ok := f.procs[pid]
			if !ok {
				code = 1
				continue
			}
			if argv[1] == "-TERM" && pid != f.stuckPID {
				if specs := f.final[p.file]; len(specs) > 0 {
					f.writers[p.file].WriteDumps(specs...)
				}
				delete(f.procs, pid)
				delete(f.running, p.session)
			}
		}
		return nil, nil, code, nil
	case "rm":
		for _, a := range argv[2:] {
			delete(f.files, a)
		}
		return nil, nil, 0, nil
	case "ps":
		var b strings.Builder
		b.WriteString("  PID ARGS\n    1 init\n  700 com.example.app\n")
		for pid, p := range f.procs {
			fmt.Fprintf(&b, "%5d %s\n", pid, strings.Join(p.args, " "))
		}
		return []byte(b.String()), nil, 0, nil
	case "ls":
		var names []string
		for name := range f.files {
			names = append(names, strings.TrimPrefix(name, PerfettoTraceDir+"/"))
		}
		slices.Sort(names)
		return []byte(strings.Join(names, "\n") + "\n"), nil, 0, nil
	}
	return nil, []byte(argv[0] + ": inaccessible or not found\n"), 127, nil
}

// session returns the only file and perfetto pid of a running session.
func (f *fakePerfettoDevice) session(t *testing.T) (file string, pid int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, pr := range f.procs {
		return pr.file, p
	}
	return "", 0
}

// dump appends dumps to file as heapprofd would; cut writes only the
// first n bytes now and returns a func that writes the rest.
func (f *fakePerfettoDevice) dump(t *testing.T, file string, specs ...perfetto.DumpSpec) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writers[file].WriteDumps(specs...); err != nil {
		t.Fatal(err)
	}
}

func javaFrames(methods ...string) []perfetto.Frame {
	fr := []perfetto.Frame{{Function: "art_quick_alloc_object_resolved_tlab", Mapping: "/apex/com.android.art/lib64/libart.so"}}
	for _, m := range methods {
		fr = append(fr, perfetto.Frame{Function: m, Mapping: "/data/app/com.example.app/oat/arm64/base.odex"})
	}
	return fr
}

func spec(pid int, samples ...perfetto.SampleSpec) perfetto.DumpSpec {
	return perfetto.DumpSpec{PID: uint64(pid), Heap: perfetto.ArtHeap, SamplingInterval: 1, Samples: samples}
}

func sample(count, bytes uint64, methods ...string) perfetto.SampleSpec {
	return perfetto.SampleSpec{Frames: javaFrames(methods...), Values: perfetto.Values{Count: count, Allocated: bytes}}
}

type heapprofdRun struct {
	s      *HeapprofdSession
	cancel context.CancelFunc
	done   chan error
}

func startHeapprofd(t *testing.T, dev *fakePerfettoDevice, cfg HeapprofdConfig) *heapprofdRun {
	t.Helper()
	s := &HeapprofdSession{Serial: "emu-1", PID: 700, Process: "com.example.app", Exec: dev.exec, Window: 10 * time.Millisecond,
		Config: cfg, Counters: NewCounters(AggregateConfig{}), Stats: NewAppStats("emu-1", 700)}
	ctx, cancel := context.WithCancel(context.Background())
	r := &heapprofdRun{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (r *heapprofdRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end")
		return nil
	}
}

func TestHeapprofdSessionCounts(t *testing.T) {
	dev := newFakePerfettoDevice()
	r := startHeapprofd(t, dev, HeapprofdConfig{SamplingInterval: 1})
	var file string
	waitUntil(t, "perfetto started", func() bool { file, _ = dev.session(t); return file != "" })

	// Values are cumulative per call stack; the daemon counts deltas.
	dev.dump(t, file, spec(700, sample(3, 96, "com.example.A.run"), sample(1, 4000, "com.example.B.load", "com.example.A.run")))
	waitUntil(t, "the first dump counted", func() bool { return r.s.Stats.Snapshot().Heapprofd.Dumps == 1 })
	if st := r.s.Stats.Snapshot(); st.State != StateTracking || st.Backend != BackendHeapprofd || st.Heapprofd.Sessions != 1 {
		t.Errorf("after the first dump: state %q backend %q sessions %d", st.State, st.Backend, st.Heapprofd.Sessions)
	}
	// The second dump arrives in two pieces, cut inside a packet.
	var buf bytes.Buffer
	w := perfetto.NewWriter(&buf, nil)
	w.WriteDumps(spec(700, sample(3, 96, "com.example.A.run"), sample(1, 4000, "com.example.B.load", "com.example.A.run")))
	before := buf.Len()
	w.WriteDumps(spec(700, sample(5, 160, "com.example.A.run")))
	second := slices.Clone(buf.Bytes()[before:])
	dev.mu.Lock()
	dev.files[file].Write(second[:len(second)/2])
	dev.mu.Unlock()
	time.Sleep(50 * time.Millisecond) // a few reads see only half
	if n := r.s.Stats.Snapshot().Heapprofd.Dumps; n != 1 {
		t.Fatalf("%d dumps counted from a dump and a half", n)
	}
	dev.mu.Lock()
	dev.files[file].Write(second[len(second)/2:])
	dev.final[file] = []perfetto.DumpSpec{spec(700, sample(6, 192, "com.example.A.run"), sample(2, 8000, "com.example.B.load", "com.example.A.run"))}
	dev.mu.Unlock()
	waitUntil(t, "the second dump counted", func() bool { return r.s.Stats.Snapshot().Heapprofd.Dumps == 2 })

	r.cancel()
	if err := r.wait(t); err != nil {
		t.Fatalf("Run ended with %v on cancel", err)
	}
	// The last dump (written at SIGTERM) is counted, and the file is gone.
	c := r.s.Counters.Snapshot()
	if c.Sampled != (Count{Allocations: 8, Bytes: 8192}) {
		t.Errorf("sampled %+v, want 8 allocations, 8192 bytes (6 + 2 in the last dump)", c.Sampled)
	}
	if c.Estimated.Allocations != 8 || c.Estimated.Bytes != 8192 {
		t.Errorf("estimated %+v at interval 1, want the samples exactly", c.Estimated)
	}
	st := r.s.Stats.Snapshot().Heapprofd
	if st.Dumps != 3 || st.Samples != 8 || st.TraceBytes == 0 {
		t.Errorf("status %+v, want 3 dumps, 8 samples, trace bytes", st)
	}
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if len(dev.files) != 0 || len(dev.procs) != 0 {
		t.Errorf("after the session: files %v, perfetto processes %v", dev.files, dev.procs)
	}
	cfg := dev.configs[0]
	if cfg.UniqueSessionName != SessionName("com.example.app", 700) || !slices.Equal(cfg.PIDs, []uint64{700}) ||
		!slices.Equal(cfg.Heaps, []string{perfetto.ArtHeap}) || cfg.SamplingInterval != 1 || cfg.OutputPath != file ||
		cfg.DumpIntervalMS != 100 || !strings.HasPrefix(file, PerfettoTraceDir+"/"+HeapprofdPrefix+"com.example.app-700-") {
		t.Errorf("config %+v, file %s", cfg, file)
	}
}

func TestHeapprofdSessionEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dump  perfetto.DumpSpec
		want  error
		stage string
		state string
	}{
		{"rejected", perfetto.DumpSpec{PID: 700, Heap: perfetto.ArtHeap, SamplingInterval: 4096, RejectedConcurrent: true}, ErrRejected, StageRejected, StateRejected},
		{"overran", perfetto.DumpSpec{PID: 700, Heap: perfetto.ArtHeap, SamplingInterval: 4096, BufferOverran: true, Samples: []perfetto.SampleSpec{sample(1, 10, "a.B.c")}}, ErrProfileEnded, StageOverran, StateTracking},
		{"guardrail", perfetto.DumpSpec{PID: 700, Heap: perfetto.ArtHeap, SamplingInterval: 4096, HitGuardrail: true}, ErrProfileEnded, StageGuardrail, StateTracking},
		{"disconnected", perfetto.DumpSpec{PID: 700, Heap: perfetto.ArtHeap, SamplingInterval: 4096, Disconnected: true}, ErrProfileEnded, "", StateTracking},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newFakePerfettoDevice()
			r := startHeapprofd(t, dev, HeapprofdConfig{})
			var file string
			waitUntil(t, "perfetto started", func() bool { file, _ = dev.session(t); return file != "" })
			dev.dump(t, file, tc.dump)
			if err := r.wait(t); !errors.Is(err, tc.want) {
				t.Fatalf("Run: %v, want %v", err, tc.want)
			}
			st := r.s.Stats.Snapshot()
			if tc.stage != "" && st.Errors[tc.stage] != 1 {
				t.Errorf("errors %v, want one at %s", st.Errors, tc.stage)
			}
			if st.State != tc.state {
				t.Errorf("state %q, want %q", st.State, tc.state)
			}
			if tc.name == "overran" && r.s.Counters.Snapshot().Sampled.Allocations != 1 {
				t.Errorf("the overrun dump's samples were not counted")
			}
			dev.mu.Lock()
			defer dev.mu.Unlock()
			if len(dev.files) != 0 || len(dev.procs) != 0 {
				t.Errorf("left behind: files %v, processes %v", dev.files, dev.procs)
			}
		})
	}
}

func TestHeapprofdSessionUnprofileable(t *testing.T) {
	dev := newFakePerfettoDevice()
	r := startHeapprofd(t, dev, HeapprofdConfig{Grace: 50 * time.Millisecond})
	if err := r.wait(t); !errors.Is(err, ErrUnprofileable) {
		t.Fatalf("no dump: %v, want ErrUnprofileable", err)
	}
	if st := r.s.Stats.Snapshot(); st.State != StateUnprofileable || st.Errors[StageUnprofileable] != 1 {
		t.Errorf("state %q errors %v", st.State, st.Errors)
	}
	if len(dev.files) != 0 || len(dev.procs) != 0 {
		t.Errorf("left behind: files %v, processes %v", dev.files, dev.procs)
	}
}

func TestHeapprofdSessionStartRefused(t *testing.T) {
	dev := newFakePerfettoDevice()
	dev.refuse = "Could not connect to the tracing service"
	r := startHeapprofd(t, dev, HeapprofdConfig{})
	err := r.wait(t)
	if err == nil || !strings.Contains(err.Error(), dev.refuse) || !strings.HasPrefix(err.Error(), StagePerfettoStart) {
		t.Fatalf("refused start: %v, want perfetto's message", err)
	}
	if st := r.s.Stats.Snapshot(); st.Errors[StagePerfettoStart] != 1 || st.Heapprofd.Sessions != 0 {
		t.Errorf("errors %v sessions %d", st.Errors, st.Heapprofd.Sessions)
	}
}

// A second session on a process one of ours profiles is refused by
// perfetto itself: both have the same unique session name.
func TestHeapprofdOneSessionPerProcess(t *testing.T) {
	dev := newFakePerfettoDevice()
	startHeapprofd(t, dev, HeapprofdConfig{})
	waitUntil(t, "perfetto started", func() bool { f, _ := dev.session(t); return f != "" })
	r2 := startHeapprofd(t, dev, HeapprofdConfig{})
	if err := r2.wait(t); err == nil || !strings.Contains(err.Error(), "same unique name") {
		t.Fatalf("a second session on pid 700: %v", err)
	}
	if SessionName("com.example.app", 700) == SessionName("com.example.app", 701) {
		t.Error("two pids share a session name")
	}
}

func TestCleanHeapprofd(t *testing.T) {
	dev := newFakePerfettoDevice()
	dev.procs[4000] = fakeProc{args: []string{"perfetto", "--background", "-c", "-", "-o", PerfettoTraceDir + "/alloctrack-com.example.app-700-0011aabb.pftrace"}, file: PerfettoTraceDir + "/alloctrack-com.example.app-700-0011aabb.pftrace"}
	dev.procs[4001] = fakeProc{args: []string{"perfetto", "-c", "-", "-o", PerfettoTraceDir + "/studio.trace"}, file: PerfettoTraceDir + "/studio.trace"}
	for _, f := range []string{"alloctrack-com.example.app-700-0011aabb.pftrace", "alloctrack-x-1-00000000.pftrace", "studio.trace"} {
		dev.files[PerfettoTraceDir+"/"+f] = &bytes.Buffer{}
		dev.writers[PerfettoTraceDir+"/"+f] = perfetto.NewWriter(dev.files[PerfettoTraceDir+"/"+f], nil)
	}
	stopped, removed, err := CleanHeapprofd(context.Background(), dev.exec)
	if err != nil || stopped != 1 || removed != 2 {
		t.Fatalf("CleanHeapprofd: stopped %d, removed %d, %v; want 1, 2", stopped, removed, err)
	}
	if _, ok := dev.procs[4001]; !ok || len(dev.procs) != 1 {
		t.Errorf("processes left: %v, want only the other perfetto", dev.procs)
	}
	if _, ok := dev.files[PerfettoTraceDir+"/studio.trace"]; !ok || len(dev.files) != 1 {
		t.Errorf("files left: %v, want only studio.trace", dev.files)
	}
	for _, argv := range dev.log {
		if argv[0] == "kill" && slices.Contains(argv, "4001") || argv[0] == "rm" && slices.Contains(argv, PerfettoTraceDir+"/studio.trace") {
			t.Errorf("touched what is not ours: %q", argv)
		}
	}
}
