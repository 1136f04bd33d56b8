package heapprofd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// timedDump is one dump as OnDump gives it.
type timedDump struct {
	pid      int
	from, to time.Time
	est      float64 // estimated bytes
}

// splitByTime gives each span [bounds[i], bounds[i+1]) the part of every
// dump's estimated bytes in proportion to the overlap of the dump's
// (from, to] with the span; a dump with no length goes whole to the span
// holding its to. What falls outside every span is returned apart. (The
// simple split issue 34's per-test attribution makes for heapprofd.)
func splitByTime(dumps []timedDump, bounds []time.Time) (spans []float64, outside float64) {
	spans = make([]float64, len(bounds)-1)
	for _, d := range dumps {
		length := d.to.Sub(d.from)
		placed := 0.0
		for i := range spans {
			lo, hi := bounds[i], bounds[i+1]
			if length <= 0 {
				if !d.to.Before(lo) && d.to.Before(hi) {
					spans[i] += d.est
					placed = d.est
				}
				continue
			}
			ov := earliest(hi, d.to).Sub(latest(lo, d.from))
			if ov > 0 {
				part := d.est * float64(ov) / float64(length)
				spans[i] += part
				placed += part
			}
		}
		outside += d.est - placed
	}
	return spans, outside
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestHeapprofdAttributionByTime: an app allocates at different rates in
// adjacent spans of 1 to 2 s (tests, as a runner runs them one after
// another) while heapprofd dumps every 250 ms; each dump's device time
// (OnDump's from, to) splits its estimated bytes between the spans in
// proportion to the overlap, and every span's estimate comes within 15 %
// of what the app allocated in it (each span allocates about 1300
// sampling intervals, at least 200; the boundary error is at most a
// quarter of a dump interval's worth of the difference between two spans'
// rates).
func TestHeapprofdAttributionByTime(t *testing.T) {
	h := newHPDevice(t, 33, 1, 3000, nil)
	vm := h.dev.VMs()[0]
	vm.Pause(true)
	s, byPID := h.session(time.Second)
	s.Config.DumpInterval = 250 * time.Millisecond
	var mu sync.Mutex
	var dumps []timedDump
	s.OnDump = func(pid int, w *alloctrack.Window, from, to time.Time) {
		mu.Lock()
		defer mu.Unlock()
		dumps = append(dumps, timedDump{pid, from, to, w.Estimated.Bytes})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	defer stop()
	testwait.Until(t, 10*time.Millisecond, "heapprofd sampling the app", func() (bool, string) {
		vm.Allocate(1)
		return vm.HeapprofdPending(), "no sample yet"
	})
	waitDumped(t, vm)

	// Allocations per 10 ms tick and span lengths: slow, fast, slow, fast.
	spans := []struct {
		perTick int
		d       time.Duration
	}{{20, 2 * time.Second}, {40, time.Second}, {20, 2 * time.Second}, {40, 1500 * time.Millisecond}}
	bounds := []time.Time{time.Now()}
	truth := []alloctrack.Count{}
	last := vm.HeapprofdAllocated()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for _, sp := range spans {
		// The app's allocations over time: a device-side pace, not a wait.
		for end := time.Now().Add(sp.d); time.Now().Before(end); <-tick.C {
			vm.Allocate(sp.perTick)
		}
		bounds = append(bounds, time.Now())
		c := vm.HeapprofdAllocated()
		truth = append(truth, alloctrack.Count{Allocations: c.Allocations - last.Allocations, Bytes: c.Bytes - last.Bytes})
		last = c
	}
	waitDumped(t, vm)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	interval := float64(byPID[vm.PID()].Stats.Snapshot().Heapprofd.SamplingInterval)
	got, outside := splitByTime(dumps, bounds)
	for i, want := range truth {
		if float64(want.Bytes) < 200*interval {
			t.Fatalf("span %d allocated %d bytes, fewer than 200 sampling intervals of %v", i, want.Bytes, interval)
		}
		e := (got[i] - float64(want.Bytes)) / float64(want.Bytes)
		t.Logf("span %d (%v): allocated %d bytes, estimated %.0f (%+.1f %%)", i, spans[i].d, want.Bytes, got[i], 100*e)
		if e < -0.15 || e > 0.15 {
			t.Errorf("span %d: estimated %.0f bytes, allocated %d: %+.1f %%, beyond 15 %%", i, got[i], want.Bytes, 100*e)
		}
	}
	var est, all float64
	for i := range truth {
		est, all = est+got[i], all+float64(truth[i].Bytes)
	}
	t.Logf("all spans: allocated %.0f bytes, estimated %.0f (%+.1f %%: the estimator's own error, no boundary in it)", all, est, 100*(est-all)/all)
	if tot := float64(last.Bytes); outside > 0.02*tot {
		t.Errorf("%.0f estimated bytes fell outside the spans (%.1f %% of all)", outside, 100*outside/tot)
	}
}

// waitDumped waits until a dump took every sample the VM holds.
func waitDumped(t *testing.T, vm *sim.VM) {
	t.Helper()
	testwait.Until(t, 10*time.Millisecond, "a dump of every sample", func() (bool, string) {
		return !vm.HeapprofdPending(), "samples not dumped yet"
	})
}
