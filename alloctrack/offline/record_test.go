package offline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/internal/source"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// TestHeapprofdRecorderOnDump: the recorder gives each dump of its
// process, at the dump interval asked for (not the read window), with the
// device time it covers: one dump's window starts where the last ended,
// in the device's REALTIME (the simulator's is the host clock), and every
// window the capture took is among them.
func TestHeapprofdRecorderOnDump(t *testing.T) {
	w := sim.DefaultWorkload()
	w.Rate, w.Sites = 3000, 20
	farm := sim.NewFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{31}, Workload: w,
		Device: func(_ int, c *sim.DeviceConfig) { c.HeapprofdStartDelay = 20 * time.Millisecond }})
	t.Cleanup(func() { farm.Close() })
	addr, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src := source.New(addr.String())
	dev := farm.Devices()[0]
	vm := dev.VMs()[0]
	cw, err := offline.NewCaptureWriter(t.TempDir(), offline.CaptureMeta{Serial: dev.Serial(), API: 31, PID: vm.PID()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cw.SetPackage(vm.ProcessName())
	type dump struct {
		pid      int
		from, to time.Time
	}
	var mu sync.Mutex
	var dumps []dump
	windows := 0 // taken by the capture
	begin := time.Now()
	rec := &offline.HeapprofdRecorder{Serial: dev.Serial(), PID: vm.PID(), API: 31, Window: time.Second,
		Exec: func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
			return src.Exec(ctx, dev.Serial(), stdin, argv...)
		},
		Config: heapprofd.Config{DumpInterval: 200 * time.Millisecond, StopTimeout: 5 * time.Second, StartCheck: 200 * time.Millisecond},
		Log:    zap.NewNop(),
		Progress: func(*alloctrack.AppStats) {
			mu.Lock()
			defer mu.Unlock()
			windows++
		},
		OnDump: func(pid int, _ *alloctrack.Window, from, to time.Time) {
			mu.Lock()
			defer mu.Unlock()
			dumps = append(dumps, dump{pid, from, to})
		},
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- rec.Record(context.Background(), stop, cw) }()
	testwait.Until(t, 20*time.Millisecond, "10 dumps", func() (bool, string) {
		return vm.HeapprofdTruth().Dumps >= 10, "fewer dumps"
	})
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	mu.Lock()
	defer mu.Unlock()
	if len(dumps) < 10 || len(dumps) != windows {
		t.Fatalf("%d dumps given, %d windows in the capture; want the same, at least 10", len(dumps), windows)
	}
	for i, d := range dumps {
		switch {
		case d.pid != vm.PID():
			t.Errorf("dump %d of pid %d", i, d.pid)
		case d.from.After(d.to) || d.from.Before(begin.Add(-time.Second)) || d.to.After(end):
			t.Errorf("dump %d covers (%v, %v], outside the capture's %v to %v", i, d.from, d.to, begin, end)
		case i > 0 && !d.from.Equal(dumps[i-1].to):
			t.Errorf("dump %d starts at %v, the last ended at %v", i, d.from, dumps[i-1].to)
		case i > 0 && i < len(dumps)-1 && d.to.Sub(d.from) > 400*time.Millisecond:
			t.Errorf("dump %d covers %v, more than twice the dump interval", i, d.to.Sub(d.from))
		}
	}
}
