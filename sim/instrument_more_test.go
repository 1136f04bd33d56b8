package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/instrument"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/testwait"
)

// threadtimeText prints entries as logcat -v threadtime does (sheet 3): the
// header again on each line of a message.
func threadtimeText(entries []LogEntry) string {
	var b strings.Builder
	for _, e := range entries {
		for _, line := range strings.Split(strings.TrimSuffix(e.Msg, "\n"), "\n") {
			fmt.Fprintf(&b, "%s %5d %5d %c %-8s: %s\n", e.Time.Format("01-02 15:04:05.000"), e.PID, e.TID, e.Priority, e.Tag, line)
		}
	}
	return b.String()
}

func runnerEvents(t *testing.T, entries []LogEntry) []instrument.RunnerEvent {
	t.Helper()
	lr := instrument.NewLogReader(strings.NewReader(threadtimeText(entries)))
	var out []instrument.RunnerEvent
	for {
		rec, err := lr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("logcat: %v", err)
		}
		if rec.Kind == instrument.LogEntry && rec.Runner.Kind != instrument.NotRunner && rec.Runner.Kind != instrument.InException {
			out = append(out, rec.Runner)
		}
	}
}

func TestInstrumentLogcatAndTruth(t *testing.T) {
	for _, version := range []string{"1.5", "1.6"} {
		t.Run(version, func(t *testing.T) {
			s := SeededSuite("com.example.test", "com.example", SeedSpec{Tests: 12, Seed: 7, FailEvery: 4, IgnoreEvery: 5, AssumeEvery: 7, OddNames: true, Duration: 8 * time.Millisecond})
			s.RunnerVersion, s.StartDelay = version, -1
			d := suiteDevice(t, 29, s)
			out := shellAll(t, d, "am instrument -w -r com.example.test/androidx.test.runner.AndroidJUnitRunner")
			run, err := instrument.ParseAm(strings.NewReader(out))
			if err != nil || len(run.Events) != 24 {
				t.Fatalf("ParseAm: %d events, %v", len(run.Events), err)
			}
			rt, _ := d.RunTruth(-1)
			pid := rt.PIDs[0]
			var kinds []string
			exceptions := 0
			for _, ev := range runnerEvents(t, d.LogEntries()) {
				if ev.Kind == instrument.Exception {
					exceptions++
					if ev.Unterminated || !strings.Contains(ev.Trace, "\tat com.example.") {
						t.Errorf("exception of %s: %+v", ev.Name, ev)
					}
					continue
				}
				kinds = append(kinds, ev.Kind.String()+" "+ev.Name)
			}
			want, failed := wantRunnerLines(t, s, rt, run, pid)
			if !slices.Equal(kinds, want) {
				t.Fatalf("runner lines:\n%s\nwant\n%s", strings.Join(kinds, "\n"), strings.Join(want, "\n"))
			}
			if exceptions != failed+1 { // the assumption failure's too
				t.Errorf("%d exceptions, want %d", exceptions, failed+1)
			}
			checkEntries(t, d.LogEntries(), pid, version)
			checkTimes(t, d.LogEntries(), rt)
		})
	}
}

// wantRunnerLines checks each test's truth and status against the suite
// and returns the runner lines the run must log (sheet 8), and how many
// tests failed.
func wantRunnerLines(t *testing.T, s Suite, rt RunTruth, run instrument.Run, pid int) (want []string, failed int) {
	t.Helper()
	want = append(want, "run started ")
	for i, st := range s.Tests {
		tt := rt.Tests[i]
		if tt.Name != st.Name() || tt.PID != pid || tt.Outcome != st.Outcome {
			t.Errorf("truth of test %d: %+v", i+1, tt)
		}
		if w := st.Amount(); st.Outcome != pertest.Ignored && tt.Allocated.Total != w {
			t.Errorf("%s allocated %+v, want %+v", st.Name(), tt.Allocated.Total, w)
		}
		if ev := run.Events[2*i+1]; ev.Class+"#"+ev.Method != st.Class+"#"+st.Method {
			t.Errorf("status %d names %s#%s", i+1, ev.Class, ev.Method)
		}
		switch st.Outcome {
		case pertest.Ignored:
			want = append(want, "ignored "+st.Name())
		case pertest.Failed:
			want = append(want, "started "+st.Name(), "failed "+st.Name(), "finished "+st.Name())
			failed++
		case pertest.AssumptionFailed:
			want = append(want, "started "+st.Name(), "assumption failed "+st.Name(), "finished "+st.Name())
		default:
			want = append(want, "started "+st.Name(), "finished "+st.Name())
		}
	}
	return append(want, "run finished "), failed
}

// checkTimes: a test's truth starts and ends at its started: and
// finished: lines (ignored: both), the boundaries heapprofd attribution
// places by device time.
func checkTimes(t *testing.T, entries []LogEntry, rt RunTruth) {
	t.Helper()
	at := map[string]time.Time{}
	for _, e := range entries {
		at[e.Msg] = e.Time
	}
	for _, tt := range rt.Tests {
		start, end := at["started: "+tt.Name], at["finished: "+tt.Name]
		if tt.Outcome == pertest.Ignored {
			start, end = at["ignored: "+tt.Name], at["ignored: "+tt.Name]
		}
		if !tt.Start.Equal(start) || !tt.End.Equal(end) || start.IsZero() {
			t.Errorf("%s: truth from %v to %v, lines at %v and %v", tt.Name, tt.Start, tt.End, start, end)
		}
	}
}

// checkEntries: the runner logs on the instrumentation thread, with the
// exception in the runner version's style (sheet 8).
func checkEntries(t *testing.T, entries []LogEntry, pid int, version string) {
	t.Helper()
	begins, beginWithTrace := 0, 0
	for _, e := range entries {
		if e.Tag != tagRunner {
			continue
		}
		if e.PID != pid || e.TID != pid+instrTIDOffset {
			t.Fatalf("entry %+v: not the instrumentation thread of %d", e, pid)
		}
		if strings.HasPrefix(e.Msg, "----- begin exception -----") {
			begins++
			if strings.Contains(e.Msg, "\n") {
				beginWithTrace++
			}
		}
		if strings.HasPrefix(e.Msg, "started: ") && e.Priority != 'I' || strings.HasPrefix(e.Msg, "failed: ") && e.Priority != 'E' {
			t.Errorf("entry %q at priority %c", e.Msg, e.Priority)
		}
	}
	if version == "1.5" && beginWithTrace != 0 || version == "1.6" && beginWithTrace != begins || begins == 0 {
		t.Errorf("runner %s: %d begin markers, %d with the trace", version, begins, beginWithTrace)
	}
}

func TestInstrumentCrash(t *testing.T) {
	s := SeededSuite("com.example.test", "com.example", SeedSpec{Tests: 4, Seed: 3, CrashAt: 2, Steps: 4})
	s.StartDelay = -1
	d := suiteDevice(t, 30, s)
	trackFromStart(d)
	out := shellAll(t, d, "am instrument -w -r com.example.test/androidx.test.runner.AndroidJUnitRunner")
	run, err := instrument.ParseAm(strings.NewReader(out))
	if err != nil || !run.Result.Crashed() || run.Result.Code != 0 || len(run.Events) != 4 || !run.Events[3].Crashed {
		t.Fatalf("ParseAm of a crashed run: %+v %v\n%s", run, err, out)
	}
	rt, _ := d.RunTruth(-1)
	if !rt.Done || len(rt.Tests) != 2 || rt.Tests[1].Outcome != pertest.Crashed {
		t.Fatalf("truth %+v", rt)
	}
	half := s.Tests[1].Allocs
	var want uint64
	for _, a := range half {
		want += uint64(a.Count*2/4) * uint64(a.Size) // 2 of its 4 steps ran
	}
	if rt.Tests[1].Allocated.Total.Bytes != want || want == 0 {
		t.Errorf("the crashed test allocated %+v, want %d bytes", rt.Tests[1].Allocated.Total, want)
	}
	var fatal, runFinished bool
	for _, e := range d.LogEntries() {
		fatal = fatal || e.Buffer == "crash" && strings.HasPrefix(e.Msg, "FATAL EXCEPTION: ") && e.PID == rt.PIDs[0]
		runFinished = runFinished || strings.HasPrefix(e.Msg, "run finished")
	}
	if !fatal || runFinished {
		t.Errorf("FATAL EXCEPTION in the crash buffer %v, run finished logged %v", fatal, runFinished)
	}
	if len(d.PIDs()) != 0 {
		t.Errorf("processes after the crash: %v", d.PIDs())
	}
}

// TestInstrumentForceStops: am instrument stops the target's running
// process and starts a fresh one, and stops that right after the run
// (sheet 12); --no-restart (14+) does neither.
func TestInstrumentForceStops(t *testing.T) {
	s := calcSuite()
	d := suiteDevice(t, 34, s)
	old := NewVM(AppConfig{PID: 4321, Package: "com.example"}, 34)
	d.AddVM(old)
	shellAll(t, d, "am instrument -w com.example.test/androidx.test.runner.AndroidJUnitRunner")
	rt, _ := d.RunTruth(-1)
	if old.Alive() || rt.PIDs[0] == 4321 || len(d.PIDs()) != 0 {
		t.Fatalf("after the run: old process alive %v, run pids %v, processes %v", old.Alive(), rt.PIDs, d.PIDs())
	}
	// The stopped process's tracker ring is freed: a run keeps its
	// processes for their truth, an orchestrated run one per test.
	stopped := d.TestRuns()[0].procs[0].truth.vm
	stopped.mu.Lock()
	ring := len(stopped.ring)
	stopped.mu.Unlock()
	if ring > 1 {
		t.Errorf("a stopped test process keeps a ring of %d records", ring)
	}
	shellAll(t, d, "am instrument -w --no-restart com.example.test/androidx.test.runner.AndroidJUnitRunner")
	first, _ := d.RunTruth(-1)
	if pids := d.PIDs(); !slices.Equal(pids, first.PIDs) {
		t.Fatalf("--no-restart: processes %v after the run of %v", pids, first.PIDs)
	}
	shellAll(t, d, "am instrument -w --no-restart com.example.test/androidx.test.runner.AndroidJUnitRunner")
	second, _ := d.RunTruth(-1)
	if !slices.Equal(second.PIDs, first.PIDs) || second.Tests[0].Allocated.Total != s.Tests[0].Amount() {
		t.Fatalf("--no-restart again: pids %v (before %v), first test %+v", second.PIDs, first.PIDs, second.Tests[0].Allocated.Total)
	}
	shellAll(t, d, "am force-stop com.example")
	if len(d.PIDs()) != 0 {
		t.Fatalf("am force-stop left %v", d.PIDs())
	}
	if out := shellAll(t, suiteDevice(t, 33, s), "am instrument -w --no-restart com.example.test/androidx.test.runner.AndroidJUnitRunner"); out != "Error: Unknown option: --no-restart\n" {
		t.Fatalf("--no-restart on API 33: %q", out)
	}
}

func TestInstrumentDelayMsec(t *testing.T) {
	s := calcSuite()
	d := suiteDevice(t, 30, s)
	shellAll(t, d, "am instrument -w -r -e delay_msec 150 com.example.test/androidx.test.runner.AndroidJUnitRunner")
	var at []time.Time
	var msgs []string
	for _, e := range d.LogEntries() {
		if e.Tag == tagRunner && (strings.HasPrefix(e.Msg, "run started") || strings.HasPrefix(e.Msg, "started:") || strings.HasPrefix(e.Msg, "finished:") || strings.HasPrefix(e.Msg, "ignored:")) {
			at, msgs = append(at, e.Time), append(msgs, e.Msg)
		}
	}
	// run started, started and finished 1 and 2, ignored 3, started and finished 4
	if len(at) != 8 {
		t.Fatalf("runner lines %q", msgs)
	}
	for _, k := range []int{0, 2, 4} { // each followed by a sleep
		if gap := at[k+1].Sub(at[k]); gap < 150*time.Millisecond {
			t.Errorf("%q then %q after %v, want at least the 150 ms delay", msgs[k], msgs[k+1], gap)
		}
	}
}

func TestInstrumentLogOnly(t *testing.T) {
	d := suiteDevice(t, 29, calcSuite())
	out := shellAll(t, d, "am instrument -w -r -e log true com.example.test/androidx.test.runner.AndroidJUnitRunner")
	run, err := instrument.ParseAm(strings.NewReader(out))
	if err != nil || len(run.Events) != 8 {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, e := range d.LogEntries() {
		if e.Tag == tagRunner {
			t.Fatalf("-e log true logged %+v", e)
		}
	}
	rt, _ := d.RunTruth(-1)
	if rt.Tests[1].Outcome != pertest.Passed || rt.Tests[0].Allocated.Total.Allocations != 0 {
		t.Errorf("log-only run ran its tests: %+v", rt.Tests[:2])
	}
}

func TestInstrumentOptionsAndErrors(t *testing.T) {
	d := suiteDevice(t, 30, calcSuite())
	for _, c := range []struct{ cmd, out string }{
		{"am instrument -w -x com.example.test/androidx.test.runner.AndroidJUnitRunner", "Error: Unknown option: -x\n"},
		{"am instrument -w -e class", "Error: Argument expected after \"-e\"\n"},
		{"am instrument -w com.example.test/.Nope", "INSTRUMENTATION_STATUS: Error=Unable to find instrumentation info for: ComponentInfo{com.example.test/com.example.test.Nope}\nINSTRUMENTATION_STATUS: id=ActivityManagerService\nINSTRUMENTATION_STATUS_CODE: -1\nandroid.util.AndroidException: INSTRUMENTATION_FAILED: com.example.test/com.example.test.Nope\n"},
		{"pm list instrumentation", "instrumentation:com.example.test/androidx.test.runner.AndroidJUnitRunner (target=com.example)\n"},
		{"pm list instrumentation com.other", ""},
	} {
		if out := shellAll(t, d, c.cmd); !strings.HasPrefix(out, c.out) || c.out == "" && out != "" {
			t.Errorf("%s: %q, want %q", c.cmd, out, c.out)
		}
	}
	// Without -r only the streams: class headers, dots, failures.
	out := shellAll(t, d, "am instrument -w -e class com.example.CalcTest com.example.test/androidx.test.runner.AndroidJUnitRunner")
	if !strings.HasPrefix(out, "\ncom.example.CalcTest:.\nError in subtract(com.example.CalcTest):\n"+calcTrace+"\n\nTime: ") {
		t.Errorf("-w without -r: %q", out)
	}
	out = shellAll(t, d, "am instrument -w -r -e class com.example.OtherTest#net,com.example.CalcTest#add com.example.test/androidx.test.runner.AndroidJUnitRunner")
	if run, err := instrument.ParseAm(strings.NewReader(out)); err != nil || len(run.Events) != 4 || run.Events[0].Method != "add" || run.Events[3].Method != `net[0: a(b), "c"]` {
		t.Errorf("-e class C#m,C#m: %v\n%s", err, out)
	}
	if code := d.amInstrument([]string{"am", "instrument", "-w", "--abi", "x86"}, io.Discard, io.Discard); code != 0 {
		t.Errorf("--abi on API 30: exit %d", code)
	}
}

// TestInstrumentStreams: statuses come while the run goes on, not at its
// end.
func TestInstrumentStreams(t *testing.T) {
	s := calcSuite()
	s.Tests[0].Duration = time.Hour // the device's test never ends
	d := suiteDevice(t, 30, s)
	c, err := d.OpenService("shell,v2,raw:am instrument -w -r com.example.test/androidx.test.runner.AndroidJUnitRunner")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []byte
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(testwait.AtLeast(30 * time.Second)))
	for !strings.Contains(string(got), "INSTRUMENTATION_STATUS_CODE: 1\n") {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read %q: %v", got, err)
		}
		got = append(got, buf[:n]...)
	}
	if got[0] != 1 || d.TestRuns()[0].Truth().Done {
		t.Fatalf("first frame %q, run done %v", got, d.TestRuns()[0].Truth().Done)
	}
	d.forceStop("com.example") // ends the run: its process is gone
	<-d.TestRuns()[0].Done()
}

func TestInstrumentOrchestrator(t *testing.T) {
	s := SeededSuite("com.example.test", "com.example", SeedSpec{Tests: 5, Seed: 11, CrashAt: 3, FailEvery: 4})
	s.StartDelay = -1
	d := suiteDevice(t, 28, s, OrchestratorSuite())
	out := shellAll(t, d, "am instrument -w -r -e targetInstrumentation com.example.test/androidx.test.runner.AndroidJUnitRunner androidx.test.orchestrator/.AndroidTestOrchestrator")
	run, err := instrument.ParseAm(strings.NewReader(out))
	if err != nil || len(run.Events) != 10 || run.Result.Code != -1 {
		t.Fatalf("ParseAm: %d events, %+v, %v\n%s", len(run.Events), run.Result, err, out)
	}
	if ev := run.Events[5]; ev.Outcome != instrument.Failed || !strings.Contains(ev.Stack, "Test instrumentation process crashed") {
		t.Errorf("the crashed test's relayed status: %+v", ev)
	}
	if ev := run.Events[9]; ev.Outcome != instrument.Passed || ev.Values["id"] != "AndroidTestOrchestrator" || ev.Current != 5 {
		t.Errorf("the last test after the crash: %+v", ev)
	}
	rt, _ := d.RunTruth(-1)
	if len(rt.PIDs) != 6 || rt.ListPID != rt.PIDs[0] || len(rt.Tests) != 5 {
		t.Fatalf("pids %v, list pid %d, %d tests", rt.PIDs, rt.ListPID, len(rt.Tests))
	}
	started := map[int]int{}
	for _, e := range d.LogEntries() {
		if strings.HasPrefix(e.Msg, "started: ") {
			started[e.PID]++
		}
	}
	for i, tt := range rt.Tests {
		if tt.PID != rt.PIDs[i+1] || started[tt.PID] != 1 {
			t.Errorf("test %d ran in %d (pids %v), which logged %d started:", i+1, tt.PID, rt.PIDs, started[tt.PID])
		}
		if w := s.Tests[i].Amount(); i != 2 && tt.Allocated.Total != w {
			t.Errorf("test %d allocated %+v, want %+v", i+1, tt.Allocated.Total, w)
		}
	}
	if started[rt.ListPID] != 5 || rt.Tests[2].Outcome != pertest.Crashed {
		t.Errorf("the listing logged %d started:, the crashed test's outcome %q", started[rt.ListPID], rt.Tests[2].Outcome)
	}
	if len(d.PIDs()) != 0 || len(d.processes()) != 5 {
		t.Errorf("after the run: debuggable %v, processes %v", d.PIDs(), d.processes())
	}
}

// TestInstrumentHeapprofdSamplesTests: on Android 12+ the test process's
// allocations go through the VM's heapprofd sampler as they are made.
func TestInstrumentHeapprofdSamplesTests(t *testing.T) {
	d := suiteDevice(t, 34, calcSuite())
	cmd := "am instrument -w --no-restart com.example.test/androidx.test.runner.AndroidJUnitRunner"
	shellAll(t, d, cmd)
	vm := d.VMs()[0]
	owner := &perfettoProc{d: d}
	if vm.attachHeapprofd(owner, 1, 0, time.Now()) != hpAttached {
		t.Fatal("heapprofd could not attach")
	}
	shellAll(t, d, cmd)
	vm.heapprofdDump(owner, time.Now())
	rt, _ := d.RunTruth(-1)
	want := rt.Between.Total
	for _, tt := range rt.Tests {
		want.Allocations += tt.Allocated.Total.Allocations
		want.Bytes += tt.Allocated.Total.Bytes
	}
	if got := vm.HeapprofdTruth().Sampled.Total; got != want || want.Allocations == 0 {
		t.Fatalf("heapprofd sampled %+v of the run, which allocated %+v", got, want)
	}
}

func TestInstrumentThroughAdb(t *testing.T) {
	srv := adbtest.StartServer(t)
	for _, api := range []int{23, 30} {
		t.Run(fmt.Sprint("API", api), func(t *testing.T) {
			r := newADBRig(t, srv, api)
			if err := r.d.InstallSuite(calcSuite()); err != nil {
				t.Fatal(err)
			}
			out, err := r.adb(t, "shell", "am", "instrument", "-w", "-r", "com.example.test/androidx.test.runner.AndroidJUnitRunner")
			if err != nil {
				t.Fatalf("%v: %q", err, out)
			}
			run, err := instrument.ParseAm(strings.NewReader(out))
			if err != nil || len(run.Events) != 8 || run.Result.Code != -1 {
				t.Fatalf("ParseAm: %d events, %+v, %v\n%q", len(run.Events), run.Result, err, out)
			}
			first := "INSTRUMENTATION_STATUS: class=" // keys sorted from 8.0
			if api < 26 {
				first = "INSTRUMENTATION_STATUS: numtests=" // Bundle hash order
			}
			if !strings.HasPrefix(out, first) {
				t.Errorf("API %d: output starts %q", api, out[:min(len(out), 60)])
			}
			if ev := run.Events[7]; ev.Method != `net[0: a(b), "c"]` || ev.Outcome != instrument.AssumptionFailed {
				t.Errorf("the last status: %+v", ev)
			}
		})
	}
}
