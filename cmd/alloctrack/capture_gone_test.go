package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/sim"
)

// TestHeapprofdCaptureOfAppThatDied: heapprofd goes on with a dead
// process as with an idle one, so a heapprofd capture whose app died ran
// its whole length and was judged as a whole run. The recorder now looks
// at the process when the capture ends: gone, the capture fails with
// ErrAppGone, its summary.json says so, and report --budget exits 4.
func TestHeapprofdCaptureOfAppThatDied(t *testing.T) {
	w := sim.DefaultWorkload()
	w.Rate = 2000
	f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, APIs: []int{31}, Workload: w})
	addr, _ := serveSimHost(t, f)
	vm := onlyVM(t, f, "sim-1", "com.example.app1")
	client := adb.NewClient(addr)
	dir := filepath.Join(t.TempDir(), "capture")
	cw, err := offline.NewCaptureWriter(dir, offline.CaptureMeta{Serial: "sim-1", API: 31, PID: vm.PID()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cw.SetPackage("com.example.app1")
	rec := &offline.HeapprofdRecorder{Serial: "sim-1", PID: vm.PID(), API: 31, Window: 500 * time.Millisecond,
		Exec: func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
			return client.Exec(ctx, "sim-1", stdin, argv...)
		},
		Config: heapprofd.Config{SamplingInterval: 2048}, Log: zap.NewNop()}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- rec.Record(context.Background(), stop, cw) }()
	// The app dies once heapprofd has dumped it twice (so that the
	// capture holds samples); then the capture ends.
	dev := f.Device("sim-1")
	for end := time.Now().Add(60 * time.Second); vm.HeapprofdTruth().Dumps < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("heapprofd did not dump the app twice in 60 s")
		}
	}
	vm.Kill()
	dev.RemoveVM(vm.PID())
	close(stop)
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the recorder did not end in 2 minutes after stop")
	}
	if !errors.Is(runErr, offline.ErrAppGone) {
		t.Errorf("Record: %v, want ErrAppGone", runErr)
	}
	if _, err := cw.Close(time.Now(), false, runErr, 20); err != nil {
		t.Fatal(err)
	}
	bud := writeBudget(t, "total: {max_allocations: 100000000000}\n")
	_, errOut, code := runCmd(t, "report", "--budget", bud, dir)
	if code != exitInsufficient || !strings.Contains(errOut, "the capture failed: the app's process ended during the capture") {
		t.Errorf("report --budget: exit %d, want %d; stderr:\n%s", code, exitInsufficient, errOut)
	}
}
