package supervisor_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	"github.com/alloctrack/alloctrack/internal/source"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// finishedRuns records the runs the daemon's attributors finished.
type finishedRuns struct {
	mu   sync.Mutex
	runs []*pertest.Run
}

type keptAttributor struct {
	*pertest.Attributor
	kept *finishedRuns
}

func (k keptAttributor) Finish() *pertest.Run {
	r := k.Attributor.Finish()
	k.kept.mu.Lock()
	defer k.kept.mu.Unlock()
	k.kept.runs = append(k.kept.runs, r)
	return r
}

func (f *finishedRuns) all() []*pertest.Run {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pertest.Run(nil), f.runs...)
}

// hpdMinBytes is the least a test must allocate, in sampling intervals of
// 4096 bytes, for its estimate to be held to 15 % (the bound).
const hpdMinBytes = 200 * 4096

// On Android 13 (heapprofd) the daemon follows a run: each test listed,
// estimated, with the boundary error of the tests' dump interval (the
// device's session switched to it when the run opened, from a dump
// interval of 2 s that would split no 2 s test well); each test of at
// least 200 sampling intervals within 15 % of what it allocated; and the
// run's tests plus between hold every sample heapprofd dumped of the
// process (each dump fed, and split without loss).
func TestDaemonFollowsTestsHeapprofd(t *testing.T) {
	w := sim.DefaultWorkload()
	w.Rate = 0 // the suite's allocations only
	farm := sim.NewFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{33}, Workload: w})
	t.Cleanup(func() { farm.Close() })
	const serial, pkg = "sim-1", "com.example.app1"
	suite := sim.SeededSuite(pkg+".test", pkg, sim.SeedSpec{Tests: 5, Seed: 34, Allocations: 12000, ObjectBytes: 2048, Duration: 2 * time.Second, Steps: 20, FailEvery: 4})
	suite.StartDelay = time.Second
	if err := farm.Device(serial).InstallSuite(suite); err != nil {
		t.Fatal(err)
	}
	a, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemonConfig()
	cfg.Backend = alloctrack.BackendAuto
	cfg.Heapprofd.DumpInterval = 2 * time.Second
	cfg.Tests = supervisor.TestsConfig{Follow: true, Grace: 200 * time.Millisecond, Refresh: 20 * time.Millisecond, DumpInterval: 250 * time.Millisecond}
	d := supervisor.NewDaemon(cfg, []supervisor.Source{source.New(a.String())}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	kept := &finishedRuns{}
	d.SetNewAttributor(func(c pertest.Config) supervisor.Attributor {
		return keptAttributor{pertest.New(c), kept}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r := &daemonRun{farm: farm, d: d, addr: a.String()}
	eventually(t, "the app profiled", func() bool {
		app, ok := r.app(serial, pkg)
		return ok && app.Backend == alloctrack.BackendHeapprofd && app.State == alloctrack.StateTracking
	})

	amDone := make(chan error, 1)
	go func() {
		_, err := adb.NewClient(a.String()).Shell(testwait.Context(t), serial, "am", "instrument", "-w", "-r", "-e", "delay_msec", "300", suite.Component())
		amDone <- err
	}()
	var vm *sim.VM // the run's process, whose heapprofd truth is read once it ended
	testwait.Until(t, 5*time.Millisecond, "the run's process", func() (bool, string) {
		if tr, ok := farm.Device(serial).RunTruth(-1); ok && len(tr.PIDs) > 0 {
			vm = farm.Device(serial).VM(tr.PIDs[0])
		}
		return vm != nil, "no process yet"
	})
	if err := <-amDone; err != nil {
		t.Fatalf("am instrument: %v", err)
	}
	truth, _ := farm.Device(serial).RunTruth(-1)
	eventually(t, "every test listed, the run over", func() bool {
		ts := testsOf(r, serial, pkg)
		return len(ts.Recent) == len(suite.Tests) && ts.Runs == 0 && len(kept.all()) == 1
	})
	ts := testsOf(r, serial, pkg)
	var partial []string
	for i, row := range ts.Recent {
		want := truth.Tests[i]
		if row.Name != want.Name || row.Outcome != string(want.Outcome) || !row.Estimated || row.BoundaryError != cfg.Tests.DumpInterval {
			t.Errorf("test %d: %s %s estimated %v boundary error %v; want %s %s, estimated, %v", i, row.Name, row.Outcome, row.Estimated, row.BoundaryError, want.Name, want.Outcome, cfg.Tests.DumpInterval)
		}
		if row.Partial {
			partial = append(partial, fmt.Sprintf("%s: %q", row.Name, row.Notes))
		}
		if row.Partial && i > 0 {
			t.Errorf("test %d partial: %q", i, row.Notes)
		}
		if allocated := want.Allocated.Total.Bytes; allocated >= hpdMinBytes && !row.Partial {
			if e := math.Abs(float64(row.Bytes)-float64(allocated)) / float64(allocated); e > 0.15 {
				t.Errorf("%s: %d bytes estimated, %d allocated (%.1f %% off)", row.Name, row.Bytes, allocated, 100*e)
			}
		}
	}
	t.Logf("partial: %v", partial)
	run := kept.all()[0]
	var sum pertest.Figures
	for _, tt := range run.Tests {
		sum.SampledAllocations += tt.SampledAllocations
		sum.SampledBytes += tt.SampledBytes
		sum.Bytes += tt.Bytes
	}
	sampled := vm.HeapprofdTruth().Sampled.Total
	got := fmt.Sprintf("%d samples, %d bytes", sum.SampledAllocations+run.Between.SampledAllocations, sum.SampledBytes+run.Between.SampledBytes)
	if want := fmt.Sprintf("%d samples, %d bytes", sampled.Allocations, sampled.Bytes); got != want || sampled.Allocations == 0 {
		t.Errorf("the tests plus between hold %s; heapprofd dumped %s of the process", got, want)
	}
	if sum.Bytes+run.Between.Bytes != run.Total.Bytes || ts.Bytes != sum.Bytes {
		t.Errorf("tests %d + between %d bytes, total %d; the app's tests counted %d", sum.Bytes, run.Between.Bytes, run.Total.Bytes, ts.Bytes)
	}
}
