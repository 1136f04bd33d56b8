package sim

import (
	"bytes"
	"encoding/binary"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/perfetto"
)

// execV2 runs argv on d through the shell,v2 service with stdin, as
// adb's Exec does, and returns stdout, stderr and the exit status.
func execV2(t *testing.T, d *Device, stdin []byte, argv ...string) (string, string, int) {
	t.Helper()
	c, err := d.OpenService("shell,v2,raw:" + adb.ShellCommand(argv...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := func(id byte, b []byte) []byte {
		h := []byte{id, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(h[1:], uint32(len(b)))
		return append(h, b...)
	}
	go c.Write(append(frame(0, stdin), frame(4, nil)...))
	var out, errOut bytes.Buffer
	for {
		var h [5]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			t.Fatalf("%q: no exit status: %v", argv, err)
		}
		b := make([]byte, binary.LittleEndian.Uint32(h[1:]))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		switch h[0] {
		case 1:
			out.Write(b)
		case 2:
			errOut.Write(b)
		case 3:
			return out.String(), errOut.String(), int(b[0])
		}
	}
}

func newHeapprofdDevice(t *testing.T, apps ...AppConfig) (*Device, []*VM) {
	t.Helper()
	d := NewDevice(DeviceConfig{Serial: "hp-1", API: 33, Build: BuildUser, HeapprofdStartDelay: 20 * time.Millisecond}) // a user build: release apps have no JDWP
	t.Cleanup(d.Close)
	var vms []*VM
	for _, a := range apps {
		vm := NewVM(a, 33)
		d.AddVM(vm)
		vms = append(vms, vm)
	}
	return d, vms
}

func sessionConfig(name string, interval uint64, pids ...int) []byte {
	c := perfetto.HeapprofdSession{
		BufferKB: 65536, WriteIntoFile: true, FileWritePeriodMS: 100, UniqueSessionName: name,
		SamplingInterval: interval, Heaps: []string{perfetto.ArtHeap}, DumpIntervalMS: 150,
	}
	for _, p := range pids {
		c.PIDs = append(c.PIDs, uint64(p))
	}
	return c.Marshal()
}

// startSession starts perfetto in the background and returns its pid.
func startSession(t *testing.T, d *Device, cfg []byte, file string) int {
	t.Helper()
	out, errOut, code := execV2(t, d, cfg, "perfetto", "--background", "-c", "-", "-o", PerfettoTraceDir+"/"+file)
	if code != 0 {
		t.Fatalf("perfetto exited %d: %s", code, errOut)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("perfetto printed %q, not a pid", out)
	}
	return pid
}

// alive tells whether a process lives, as the shell may find out: by
// reading its /proc/PID/cmdline (kill -0 is denied on perfetto).
func alive(t *testing.T, d *Device, pid int) bool {
	t.Helper()
	_, e, code := execV2(t, d, nil, "cat", "/proc/"+strconv.Itoa(pid)+"/cmdline")
	if code != 0 && !strings.Contains(e, "No such file") {
		t.Fatalf("cat /proc/%d/cmdline: %s", pid, e)
	}
	return code == 0
}

// stopSession sends TERM and waits until the process is gone.
func stopSession(t *testing.T, d *Device, pid int, sig string) {
	t.Helper()
	if _, e, code := execV2(t, d, nil, "kill", "-"+sig, strconv.Itoa(pid)); code != 0 {
		t.Fatalf("kill -%s %d: %d %s", sig, pid, code, e)
	}
	for deadline := time.Now().Add(testwait.Bound); ; {
		if !alive(t, d, pid) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("perfetto %d still runs %v after SIGTERM", pid, testwait.Bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// decodeDumps reads every dump of a trace.
func decodeDumps(t *testing.T, b []byte) []*perfetto.Dump {
	t.Helper()
	dec := perfetto.NewDecoder(bytes.NewReader(b), nil)
	var out []*perfetto.Dump
	for {
		d, err := dec.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("decoding the simulator's trace: %v", err)
		}
		out = append(out, d)
	}
}

// TestPerfettoHeapprofdSampledTruth runs a heapprofd session through the
// device's shell as the daemon does (binary config on standard input,
// --background, SIGTERM, the file read and removed) and decodes its trace
// with the project's decoder: the samples per site equal what the VM says
// it sampled, exactly; stacks were dropped from dumps and came back under
// new ids; and the session leaves no process or file.
func TestPerfettoHeapprofdSampledTruth(t *testing.T) {
	w := DefaultWorkload()
	w.Rate, w.Sites = 20000, 40
	d, vms := newHeapprofdDevice(t, AppConfig{PID: 5001, Package: "com.example.hp", Workload: w})
	pid := startSession(t, d, sessionConfig("t-1", 4096, 5001), "alloctrack-t.pftrace")
	out, _, _ := execV2(t, d, nil, "ps", "-A", "-o", "PID,ARGS")
	if !strings.Contains(out, strconv.Itoa(pid)+" perfetto --background -c - -o "+PerfettoTraceDir+"/alloctrack-t.pftrace") {
		t.Errorf("ps -A -o PID,ARGS does not show the session:\n%s", out)
	}
	waitFor(t, func() bool { return vms[0].HeapprofdTruth().Dumps >= 5 })
	stopSession(t, d, pid, "TERM")
	trace, _, code := execV2(t, d, nil, "cat", PerfettoTraceDir+"/alloctrack-t.pftrace")
	if code != 0 {
		t.Fatalf("cat: %d", code)
	}
	dumps := decodeDumps(t, []byte(trace))
	truth := vms[0].HeapprofdTruth()
	if len(dumps) < 5 || len(dumps) != truth.Dumps {
		t.Fatalf("%d dumps decoded, the VM wrote %d; want the same, at least 5", len(dumps), truth.Dumps)
	}
	got := map[string]alloctrack.Count{}
	var total alloctrack.Count
	for _, dp := range dumps {
		if dp.PID != 5001 || dp.Heap != perfetto.ArtHeap || dp.SamplingInterval != 4096 {
			t.Fatalf("dump of pid %d heap %q interval %d", dp.PID, dp.Heap, dp.SamplingInterval)
		}
		for _, sd := range dp.Stacks {
			id := alloctrack.SiteID(heapprofd.SiteHash(heapprofd.JavaFrames(sd.Stack)))
			c := got[id]
			c.Allocations += sd.Delta.Count
			c.Bytes += sd.Delta.Allocated
			got[id] = c
			total.Allocations += sd.Delta.Count
			total.Bytes += sd.Delta.Allocated
			if sd.Stack.Unwind != perfetto.UnwindOK {
				t.Errorf("stack %s unwinds %v", sd.Stack, sd.Stack.Unwind)
			}
		}
	}
	if total != truth.Sampled.Total || total.Allocations == 0 {
		t.Errorf("decoded samples %+v, the VM sampled %+v", total, truth.Sampled.Total)
	}
	for id, want := range truth.Sampled.BySiteID {
		if got[id] != want {
			t.Errorf("site %s: decoded %+v, sampled %+v", id, got[id], want)
		}
	}
	if len(got) != len(truth.Sampled.BySiteID) {
		t.Errorf("%d sites decoded, %d sampled", len(got), len(truth.Sampled.BySiteID))
	}
	if a := truth.Allocated.Total; a.Bytes <= total.Bytes || a.Allocations <= total.Allocations {
		t.Errorf("allocated %+v is not more than sampled %+v at interval 4096", a, total)
	}
	if _, e, code := execV2(t, d, nil, "rm", "-f", PerfettoTraceDir+"/alloctrack-t.pftrace"); code != 0 {
		t.Fatalf("rm: %s", e)
	}
	if ls, _, _ := execV2(t, d, nil, "ls", PerfettoTraceDir); ls != "" || len(d.PerfettoSessions()) != 0 {
		t.Errorf("left behind: files %q, sessions %v", ls, d.PerfettoSessions())
	}
	if vms[0].Stats().TrackingOn {
		t.Error("the VM's DDM tracking was turned on")
	}
}

// TestPerfettoDropsAndRenumbers: a stack with nothing new is dropped from
// later dumps, and its next samples come under a new callstack id from
// zero, which the decoder turns back into increments.
func TestPerfettoDropsAndRenumbers(t *testing.T) {
	w := DefaultWorkload()
	w.Rate, w.Sites = 0, 8
	d, vms := newHeapprofdDevice(t, AppConfig{PID: 5002, Workload: w})
	pid := startSession(t, d, sessionConfig("t-2", 1, 5002), "a.pftrace")
	time.Sleep(50 * time.Millisecond)
	for range 6 {
		// A burst, then dumps with nothing new.
		n := vms[0].HeapprofdTruth().Dumps
		vms[0].Allocate(50)
		waitFor(t, func() bool { return vms[0].HeapprofdTruth().Dumps > n })
		time.Sleep(400 * time.Millisecond)
	}
	stopSession(t, d, pid, "TERM")
	b, _ := d.TraceFile("a.pftrace")
	dumps := decodeDumps(t, b)
	var samples uint64
	for _, dp := range dumps {
		samples += dp.Delta.Count
	}
	if samples != 300 {
		t.Errorf("interval 1: %d samples, want all 300 allocations", samples)
	}
	if tr := vms[0].HeapprofdTruth(); tr.Sampled.Total != tr.Allocated.Total {
		t.Errorf("interval 1: sampled %+v, allocated %+v", tr.Sampled.Total, tr.Allocated.Total)
	}
	// Stacks were dropped from dumps and came back under new ids; the
	// exact total above shows they counted on, not from zero.
	if tr := vms[0].HeapprofdTruth(); tr.Dropped == 0 {
		t.Errorf("no stack was dropped from a dump in %d dumps", len(dumps))
	}
}

// TestPerfettoFaults: each fault a session can meet, as heapprofd shows it.
func TestPerfettoFaults(t *testing.T) {
	w := DefaultWorkload()
	w.Rate = 5000
	d, vms := newHeapprofdDevice(t,
		AppConfig{PID: 6001, Package: "a.foreign", Workload: w},
		AppConfig{PID: 6002, Package: "a.overrun", Workload: w},
		AppConfig{PID: 6003, Package: "a.release", NotDebuggable: true, Workload: w},
		AppConfig{PID: 6004, Package: "a.profileable", NotDebuggable: true, Profileable: true, Workload: w},
		AppConfig{PID: 6005, Package: "a.broken", BrokenUnwind: true, Workload: w},
		AppConfig{PID: 6006, Package: "a.dies", Workload: w},
		AppConfig{PID: 6007, Package: "a.guard", Workload: w},
	)
	vms[0].SetFaults(Faults{ForeignProfiler: true})
	vms[1].SetFaults(Faults{HeapprofdOverrun: 1})
	vms[6].SetFaults(Faults{HeapprofdGuardrail: 1})
	if got := d.PIDs(); len(got) != 5 {
		t.Errorf("track-jdwp lists %v: release builds are not debuggable", got)
	}
	pid := startSession(t, d, sessionConfig("t-3", 4096, 6001, 6002, 6003, 6004, 6005, 6006, 6007), "f.pftrace")
	// A second session of the same name is refused by the service: its
	// process is gone at once and its file stays empty.
	dup := startSession(t, d, sessionConfig("t-3", 4096, 6001), "dup.pftrace")
	if alive(t, d, dup) {
		t.Errorf("the session with a name in use still runs")
	}
	waitFor(t, func() bool { return vms[3].HeapprofdTruth().Dumps >= 3 })
	vms[5].Kill()
	time.Sleep(400 * time.Millisecond)
	stopSession(t, d, pid, "TERM")
	b, _ := d.TraceFile("f.pftrace")
	byPID := map[uint64][]*perfetto.Dump{}
	for _, dp := range decodeDumps(t, b) {
		byPID[dp.PID] = append(byPID[dp.PID], dp)
	}
	if ds := byPID[6001]; len(ds) == 0 || !ds[0].RejectedConcurrent || ds[0].Delta.Count != 0 {
		t.Errorf("foreign profiler: dumps %d, want rejected_concurrent and no samples", len(ds))
	}
	if ds := byPID[6002]; len(ds) != 1 || !ds[0].BufferOverran {
		t.Errorf("overrun: %d dumps, want 1 that says buffer_overran, then none", len(ds))
	}
	if ds := byPID[6007]; len(ds) != 1 || !ds[0].HitGuardrail {
		t.Errorf("guardrail: %d dumps, want 1 that says hit_guardrail, then none", len(ds))
	}
	if ds := byPID[6003]; len(ds) != 0 {
		t.Errorf("an app neither debuggable nor profileable gave %d dumps", len(ds))
	}
	if ds := byPID[6004]; len(ds) < 3 || ds[len(ds)-1].Delta.Count == 0 && vms[3].HeapprofdTruth().Sampled.Total.Allocations == 0 {
		t.Errorf("a profileable app gave %d dumps", len(ds))
	}
	broken := byPID[6005]
	if len(broken) == 0 {
		t.Fatal("no dumps of the app with the unwinding bug")
	}
	for _, dp := range broken {
		for _, sd := range dp.Stacks {
			if sd.Stack.Unwind != perfetto.UnwindUnknown {
				t.Errorf("broken unwind: stack %s is %v", sd.Stack, sd.Stack.Unwind)
			}
		}
	}
	dies := byPID[6006]
	if len(dies) == 0 || !dies[len(dies)-1].Disconnected {
		t.Errorf("the app that died: its last dump does not say disconnected")
	}
	var n uint64
	for _, dp := range dies {
		n += dp.Delta.Count
	}
	if want := vms[5].HeapprofdTruth().Sampled.Total.Allocations; n != want || n == 0 {
		t.Errorf("the app that died: %d samples decoded, %d sampled", n, want)
	}
}

// TestPerfettoKillLosesLastDump: the shell may not send perfetto SIGKILL
// or signal 0 (SELinux grants it only "signal"); a session killed another
// way (the device shutting down) ends without its last dump, and SIGTERM
// writes one, while perfetto lives on for a moment.
func TestPerfettoKillLosesLastDump(t *testing.T) {
	w := DefaultWorkload()
	w.Rate = 5000
	d, vms := newHeapprofdDevice(t, AppConfig{PID: 7001, Workload: w})
	cfg := perfetto.HeapprofdSession{WriteIntoFile: true, FileWritePeriodMS: 100, SamplingInterval: 4096,
		Heaps: []string{perfetto.ArtHeap}, PIDs: []uint64{7001}} // no periodic dumps
	pid := startSession(t, d, cfg.Marshal(), "k.pftrace")
	for _, sig := range []string{"-0", "-KILL", "-9"} {
		if _, e, code := execV2(t, d, nil, "kill", sig, strconv.Itoa(pid)); code == 0 || !strings.Contains(e, "Permission denied") {
			t.Errorf("kill %s on perfetto: exit %d %q, want Permission denied", sig, code, e)
		}
	}
	time.Sleep(300 * time.Millisecond)
	d.mu.Lock()
	p := d.perfettos[pid]
	d.mu.Unlock()
	p.signal("KILL")
	<-p.done
	if n := vms[0].HeapprofdTruth().Dumps; n != 0 {
		t.Errorf("SIGKILL: %d dumps, want none", n)
	}
	pid = startSession(t, d, cfg.Marshal(), "t.pftrace")
	time.Sleep(300 * time.Millisecond)
	if _, e, code := execV2(t, d, nil, "kill", "-TERM", strconv.Itoa(pid)); code != 0 {
		t.Fatalf("kill -TERM: %s", e)
	}
	if !alive(t, d, pid) {
		t.Error("perfetto was gone at once after SIGTERM; it writes its last dump first")
	}
	if n := vms[0].HeapprofdTruth().Dumps; n != 0 {
		t.Errorf("the last dump came at once after SIGTERM")
	}
	stopSession(t, d, pid, "TERM")
	if n := vms[0].HeapprofdTruth().Dumps; n != 1 {
		t.Errorf("SIGTERM: %d dumps, want the last one", n)
	}
	if b, _ := d.TraceFile("t.pftrace"); len(decodeDumps(t, b)) != 1 {
		t.Errorf("the last dump is not in the file once perfetto is gone")
	}
}

// TestPerfettoRefusals: what perfetto's command line and the tracing
// service refuse. perfetto exits 1 on a config with output_path when -o is
// given; --background-wait exists from Android 13; the service allows 5
// sessions per uid and 15 in all, and refuses the others after
// --background has printed a pid and exited 0, the process being gone at
// once, while --background-wait exits 1.
func TestPerfettoRefusals(t *testing.T) {
	d, _ := newHeapprofdDevice(t, AppConfig{PID: 9001, Workload: DefaultWorkload()})
	withPath := perfetto.HeapprofdSession{WriteIntoFile: true, SamplingInterval: 4096, Heaps: []string{perfetto.ArtHeap},
		PIDs: []uint64{9001}, OutputPath: PerfettoTraceDir + "/o.pftrace"}
	if _, e, code := execV2(t, d, withPath.Marshal(), "perfetto", "--background", "-c", "-", "-o", PerfettoTraceDir+"/o.pftrace"); code != 1 || !strings.Contains(e, "Can't pass --out or --upload if output_path is set") {
		t.Errorf("output_path with -o: exit %d %q", code, e)
	}
	var pids []int
	for i := range MaxSessionsPerUID {
		pids = append(pids, startSession(t, d, sessionConfig("lim-"+strconv.Itoa(i), 4096, 9001), "lim"+strconv.Itoa(i)))
	}
	over := startSession(t, d, sessionConfig("lim-over", 4096, 9001), "over")
	if alive(t, d, over) || len(d.PerfettoSessions()) != MaxSessionsPerUID || d.RefusedSessions() != 1 {
		t.Errorf("a 6th session of uid 2000: alive %v, %d sessions, %d refused", alive(t, d, over), len(d.PerfettoSessions()), d.RefusedSessions())
	}
	_, e, code := execV2(t, d, sessionConfig("lim-wait", 4096, 9001), "perfetto", "--background-wait", "-c", "-", "-o", PerfettoTraceDir+"/w")
	if code != 1 || !strings.Contains(e, "Too many concurrent tracing sesions (5) for uid 2000") {
		t.Errorf("--background-wait over the limit: exit %d %q", code, e)
	}
	stopSession(t, d, pids[0], "TERM")
	out, e, code := execV2(t, d, sessionConfig("lim-wait", 4096, 9001), "perfetto", "-D", "-c", "-", "-o", PerfettoTraceDir+"/w")
	if p, err := strconv.Atoi(strings.TrimSpace(out)); code != 0 || err != nil || !alive(t, d, p) {
		t.Errorf("-D with room: exit %d %q %q", code, out, e)
	}

	// 15 in all, counting other uids' sessions.
	full := NewDevice(DeviceConfig{Serial: "full", API: 33, OtherUIDSessions: MaxSessions - 1})
	defer full.Close()
	full.AddVM(NewVM(AppConfig{PID: 9002, Workload: DefaultWorkload()}, 33))
	if p := startSession(t, full, sessionConfig("a", 4096, 9002), "a"); !alive(t, full, p) {
		t.Error("the 15th session on the device was refused")
	}
	if p := startSession(t, full, sessionConfig("b", 4096, 9002), "b"); alive(t, full, p) {
		t.Error("a 16th session on the device runs")
	}

	// Android 12's perfetto (v16..v21) has no --background-wait.
	s := NewDevice(DeviceConfig{Serial: "s", API: 31})
	defer s.Close()
	for _, flag := range []string{"--background-wait", "-D"} {
		if _, e, code := execV2(t, s, sessionConfig("x", 4096, 1), "perfetto", flag, "-c", "-", "-o", PerfettoTraceDir+"/x"); code != 1 || !strings.Contains(e, "option") {
			t.Errorf("%s on API 31: exit %d %q", flag, code, e)
		}
	}
}

// TestPerfettoDumpTailWaits: the periodic write copies only whole 4 KiB
// chunks, so the end of a dump reaches the file with the next dump or a
// flush; flush_period_ms brings it in time. A process with no sample has
// no ProcessHeapSamples (the rounds are empty ProfilePackets), and a
// process another session holds is listed as rejected only at the stop.
func TestPerfettoDumpTailWaits(t *testing.T) {
	w := DefaultWorkload()
	w.Rate, w.Sites = 0, 4
	d, vms := newHeapprofdDevice(t, AppConfig{PID: 9101, Workload: w}, AppConfig{PID: 9102, Workload: w}, AppConfig{PID: 9103, Workload: w})
	vms[2].SetFaults(Faults{ForeignProfiler: true})
	cfg := perfetto.HeapprofdSession{WriteIntoFile: true, FileWritePeriodMS: 100, SamplingInterval: 1,
		Heaps: []string{perfetto.ArtHeap}, PIDs: []uint64{9101, 9102, 9103}, DumpPhaseMS: 100, DumpIntervalMS: 400}
	read := func(name string) ([]*perfetto.Dump, perfetto.Stats) {
		b, _ := d.TraceFile(name)
		dec := perfetto.NewDecoder(bytes.NewReader(b), &perfetto.Options{Follow: true})
		var out []*perfetto.Dump
		for {
			dp, err := dec.Next()
			if err == io.EOF {
				return out, dec.Stats()
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, dp)
		}
	}
	pid := startSession(t, d, cfg.Marshal(), "held.pftrace")
	time.Sleep(50 * time.Millisecond)
	vms[0].Allocate(20) // a small dump: less than a chunk
	waitFor(t, func() bool { return vms[0].HeapprofdTruth().Dumps >= 1 })
	if dumps, _ := read("held.pftrace"); len(dumps) != 0 {
		t.Errorf("a dump smaller than a chunk is in the file before the next dump or a flush: %d dumps", len(dumps))
	}
	if n := vms[0].HeapprofdTruth().Dumps; n != 1 {
		t.Fatalf("the VM wrote %d dumps, want 1", n)
	}
	stopSession(t, d, pid, "TERM")
	dumps, st := read("held.pftrace")
	byPID := map[uint64]int{}
	for _, dp := range dumps {
		byPID[dp.PID]++
	}
	if byPID[9101] == 0 || byPID[9102] != 0 || byPID[9103] != 1 || st.ProfilePackets < 4 || st.MissingProfilePackets != 0 {
		t.Errorf("dumps by pid %v, stats %+v: want the busy app, none of the idle one, one rejection, and the idle rounds' packets", byPID, st)
	}

	cfg.FlushPeriodMS = 150
	pid = startSession(t, d, cfg.Marshal(), "flushed.pftrace")
	time.Sleep(50 * time.Millisecond)
	vms[0].Allocate(20)
	waitFor(t, func() bool { dumps, _ = read("flushed.pftrace"); return len(dumps) > 0 })
	if len(dumps) != 1 || dumps[0].PID != 9101 || dumps[0].RejectedConcurrent {
		t.Errorf("with flush_period_ms the first dump is in the file in time: %d dumps", len(dumps))
	}
	stopSession(t, d, pid, "TERM")

	// max_file_size_bytes ends the session.
	cfg.FlushPeriodMS, cfg.MaxFileSizeBytes = 100, 300
	pid = startSession(t, d, cfg.Marshal(), "full.pftrace")
	waitFor(t, func() bool {
		vms[0].Allocate(20)
		time.Sleep(100 * time.Millisecond)
		return !alive(t, d, pid)
	})
	if b, _ := d.TraceFile("full.pftrace"); len(b) > 300 {
		t.Errorf("the file holds %d bytes, past max_file_size_bytes 300", len(b))
	}
}

// TestPerfettoCommandLine: --txt configs, and what perfetto refuses.
func TestPerfettoCommandLine(t *testing.T) {
	w := DefaultWorkload()
	w.Rate = 5000
	d, vms := newHeapprofdDevice(t, AppConfig{PID: 8001, Package: "com.example.txt", Workload: w})
	txt := `
buffers { size_kb: 65536 fill_policy: DISCARD }
data_sources {
  config {
    name: "android.heapprofd"
    heapprofd_config {
      sampling_interval_bytes: 1024
      process_cmdline: "com.example.txt"
      heaps: "com.android.art"
      shmem_size_bytes: 8388608
      block_client: true
      continuous_dump_config { dump_phase_ms: 0 dump_interval_ms: 200 }
    }
  }
}
duration_ms: 700  # ends on its own
write_into_file: true
file_write_period_ms: 100
`
	out, e, code := execV2(t, d, []byte(txt), "perfetto", "--txt", "-c", "-", "-o", PerfettoTraceDir+"/txt.pftrace")
	if code != 0 {
		t.Fatalf("perfetto --txt in the foreground: %d %s %s", code, out, e)
	}
	if tr := vms[0].HeapprofdTruth(); tr.Dumps < 3 || tr.Interval != 1024 || tr.Sampled.Total.Allocations == 0 {
		t.Errorf("the --txt session by process name: %+v", tr)
	}
	for _, c := range []struct {
		stdin string
		argv  []string
		want  string
	}{
		{txt, []string{"perfetto", "--txt", "-c", "-"}, "Either --out or --upload is required"},
		{"bogus_field: 1", []string{"perfetto", "--txt", "-c", "-", "-o", PerfettoTraceDir + "/x"}, `no field named "bogus_field"`},
		{txt, []string{"perfetto", "--txt", "-c", "-", "-o", "/sdcard/x"}, "Permission denied"},
		{"", []string{"perfetto", "-c", "-", "-o", PerfettoTraceDir + "/x", "--background"}, "invalid"},
		{txt, []string{"perfetto", "--frobnicate"}, "unrecognized option"},
	} {
		_, e, code := execV2(t, d, []byte(c.stdin), c.argv...)
		if code == 0 || !strings.Contains(e, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want a failure saying %q", c.argv, code, e, c.want)
		}
	}
	if _, e, code := execV2(t, d, nil, "kill", "-TERM", "8001"); code == 0 || !strings.Contains(e, "Operation not permitted") {
		t.Errorf("the shell killed an app: %d %s", code, e)
	}
	nop := NewDevice(DeviceConfig{Serial: "old", API: 31, NoPerfetto: true})
	defer nop.Close()
	if _, e, code := execV2(t, nop, nil, "perfetto", "-c", "-", "-o", PerfettoTraceDir+"/x"); code != 127 || !strings.Contains(e, "not found") {
		t.Errorf("a device without perfetto: %d %s", code, e)
	}
}

// TestPerfettoDumpClocks: a dump's window ends at its newest sample's
// time in CLOCK_MONOTONIC_COARSE (whole ticks since the device booted),
// not at the dump's own time, and the trace's clock snapshot maps it to
// the device's REALTIME (the host's clock, as logcat's stamps) within one
// tick. Three batches are allocated, each taken by its own dump.
func TestPerfettoDumpClocks(t *testing.T) {
	d, vms := newHeapprofdDevice(t, AppConfig{PID: 5001, Package: "com.example.hp"})
	vm := vms[0]
	vm.Pause(true)
	pid := startSession(t, d, sessionConfig("t-clk", 1, 5001), "alloctrack-clk.pftrace")
	// Sampling is on once an allocation is sampled (interval 1: each is).
	waitFor(t, func() bool { vm.Allocate(1); return vm.HeapprofdPending() })
	waitFor(t, func() bool { return !vm.HeapprofdPending() })
	type batch struct{ before, after time.Time }
	var batches []batch
	for i := range 3 {
		b := batch{before: time.Now()}
		vm.Allocate(100 + i)
		b.after = time.Now()
		batches = append(batches, b)
		waitFor(t, func() bool { return !vm.HeapprofdPending() })
	}
	stopSession(t, d, pid, "TERM")
	trace, _, _ := execV2(t, d, nil, "cat", PerfettoTraceDir+"/alloctrack-clk.pftrace")
	found := 0
	for _, dp := range decodeDumps(t, []byte(trace)) {
		i := int(dp.Delta.Count) - 100
		if i < 0 || i >= len(batches) {
			continue
		}
		found++
		b := batches[i]
		if dp.Timestamp%uint64(coarseTick) != 0 {
			t.Errorf("batch %d: MONOTONIC_COARSE %d is not whole ticks", i, dp.Timestamp)
		}
		if mono := time.Duration(dp.Timestamp); mono > b.after.Sub(d.boot) || mono <= b.before.Sub(d.boot)-coarseTick {
			t.Errorf("batch %d: window ends at MONOTONIC_COARSE %v, allocated between %v and %v", i, mono, b.before.Sub(d.boot), b.after.Sub(d.boot))
		}
		real := time.Unix(0, int64(dp.RealTimestamp))
		if !dp.HasRealTime || real.Before(b.before.Add(-coarseTick)) || real.After(b.after.Add(coarseTick)) {
			t.Errorf("batch %d: window ends at REALTIME %v (known %v), allocated between %v and %v", i, real, dp.HasRealTime, b.before, b.after)
		}
	}
	if found != len(batches) {
		t.Errorf("%d of %d batches found alone in a dump", found, len(batches))
	}
}

// TestVMTimeDoesNotGoBack: a time read before the VM's lock was taken
// (a dump round's, say, while an Allocate held the lock) does not move
// the VM's time back, so the timed workload makes no allocation twice and
// heapprofd's windows do not end before their samples.
func TestVMTimeDoesNotGoBack(t *testing.T) {
	w := DefaultWorkload()
	w.Rate = 1000
	vm := NewVM(AppConfig{PID: 77, Workload: w}, 33)
	vm.mu.Lock()
	defer vm.mu.Unlock()
	t0 := vm.last
	vm.advanceLocked(t0.Add(time.Second))
	vm.advanceLocked(t0.Add(500 * time.Millisecond))
	vm.advanceLocked(t0.Add(1500 * time.Millisecond))
	if n := vm.stats.Allocations; n < 1499 || n > 1500 || !vm.last.Equal(t0.Add(1500*time.Millisecond)) {
		t.Errorf("%d allocations in 1.5 s at 1000/s, the VM at %v of 1.5 s", n, vm.last.Sub(t0))
	}
}

// TestPerfettoForeignRejectedOnlyAtStop: heapprofd rejects a process
// another session profiles when a data source is set up (or the process
// connects), and writes rejected_concurrent for it only when that data
// source stops (fact 14 of docs/heapprofd-devices.md's issue sheet:
// heapprofd_producer.cc SetupDataSource, StopDataSource). A session that
// already holds a process keeps it when a foreign profiler comes later:
// the next session is the one rejected. The foreign session and its file
// are not touched.
func TestPerfettoForeignRejectedOnlyAtStop(t *testing.T) {
	w := DefaultWorkload()
	w.Rate = 5000
	d, vms := newHeapprofdDevice(t, AppConfig{PID: 6101, Package: "a.held", Workload: w}, AppConfig{PID: 6102, Package: "a.later", Workload: w})
	foreign, err := d.StartForeignSession("studio.perfetto-trace", 4096, 6101)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) (byPID map[uint64]int, rejected []uint64) {
		b, _ := d.TraceFile(name)
		dec := perfetto.NewDecoder(bytes.NewReader(b), &perfetto.Options{Follow: true})
		byPID = map[uint64]int{}
		for {
			dp, err := dec.Next()
			if err == io.EOF {
				return byPID, rejected
			}
			if err != nil {
				t.Fatal(err)
			}
			if dp.RejectedConcurrent {
				rejected = append(rejected, dp.PID)
			}
			byPID[dp.PID]++
		}
	}
	// The foreign session holds a.held once it has dumped it (it attaches
	// after the device's start delay): only then does ours set up.
	waitFor(t, func() bool { n, _ := read("studio.perfetto-trace"); return n[6101] >= 1 })
	pid := startSession(t, d, sessionConfig("ours-1", 4096, 6101, 6102), "ours.pftrace")
	waitFor(t, func() bool { n, _ := read("ours.pftrace"); return n[6102] >= 1 })
	vms[1].SetFaults(Faults{ForeignProfiler: true})
	first, _ := read("ours.pftrace")
	waitFor(t, func() bool { n, _ := read("ours.pftrace"); return n[6102] >= first[6102]+2 })
	if n, rej := read("ours.pftrace"); len(rej) != 0 || n[6101] != 0 {
		t.Errorf("before the stop: rejections %v and %d dumps of the held app, want none of either", rej, n[6101])
	}
	stopSession(t, d, pid, "TERM")
	if _, rej := read("ours.pftrace"); !slices.Equal(rej, []uint64{6101}) {
		t.Errorf("at the stop: rejected %v, want the app the foreign session holds, once (the later profiler does not take an app held already)", rej)
	}

	// The next session sets up after the foreign profiler came: rejected.
	pid = startSession(t, d, sessionConfig("ours-2", 4096, 6102), "ours2.pftrace")
	waitFor(t, func() bool {
		for _, s := range d.PerfettoSessions() {
			if s.PID == pid && slices.Contains(s.Targets, 6102) {
				return true
			}
		}
		return false
	})
	if n, rej := read("ours2.pftrace"); len(rej) != 0 || len(n) != 0 {
		t.Errorf("a session rejected at setup wrote %v and rejections %v before its stop", n, rej)
	}
	stopSession(t, d, pid, "TERM")
	if _, rej := read("ours2.pftrace"); !slices.Equal(rej, []uint64{6102}) {
		t.Errorf("at the stop: rejected %v, want [6102]", rej)
	}
	live := false
	for _, s := range d.PerfettoSessions() {
		live = live || s.PID == foreign
	}
	if _, ok := d.TraceFile("studio.perfetto-trace"); !ok || !live {
		t.Errorf("the foreign session (running %v) or its file (%v) was touched", live, ok)
	}
}

// TestPerfettoOwnSessionRejectsSecond: heapprofd's check for a process
// profiled already looks at every data source, the shell's own included
// (heapprofd_producer.cc IsPidProfiled): a second session of ours for an
// idle app the first one holds is rejected as one of another tool would
// be. So a short side session cannot tell an idle app from a held one.
func TestPerfettoOwnSessionRejectsSecond(t *testing.T) {
	w := DefaultWorkload()
	w.Rate = 0
	d, _ := newHeapprofdDevice(t, AppConfig{PID: 6201, Package: "a.idle", Workload: w})
	set := func(pid int) bool {
		for _, s := range d.PerfettoSessions() {
			if s.PID == pid && slices.Contains(s.Targets, 6201) {
				return true
			}
		}
		return false
	}
	main := startSession(t, d, sessionConfig("ours-main", 4096, 6201), "main.pftrace")
	waitFor(t, func() bool { return set(main) })
	probe := startSession(t, d, sessionConfig("ours-probe", 4096, 6201), "probe.pftrace")
	waitFor(t, func() bool { return set(probe) })
	stopSession(t, d, probe, "TERM")
	b, _ := d.TraceFile("probe.pftrace")
	var rejected []uint64
	for _, dp := range decodeDumps(t, b) {
		if dp.RejectedConcurrent {
			rejected = append(rejected, dp.PID)
		}
	}
	if !slices.Equal(rejected, []uint64{6201}) {
		t.Errorf("the second session's stop rejected %v, want [6201]", rejected)
	}
	stopSession(t, d, main, "TERM")
	b, _ = d.TraceFile("main.pftrace")
	for _, dp := range decodeDumps(t, b) {
		if dp.RejectedConcurrent {
			t.Errorf("the session that held the app first says it was rejected")
		}
	}
}
