package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/perfetto"
	"github.com/alloctrack/alloctrack/sim"
)

// TestCaptureHeapprofd captures an Android 12 app (--backend auto, the
// default, picks heapprofd) through the real adb server and the simulated
// one: trace.perfetto-trace holds the device's trace, whose samples equal
// what the VM sampled, exactly; summary.json and profile.pb.gz say the
// same, marked as estimates; report reads the capture back; and the
// device is left with no session or trace file of ours.
func TestCaptureHeapprofd(t *testing.T) {
	for _, be := range captureBackends {
		t.Run(be.name, func(t *testing.T) {
			w := sim.DefaultWorkload()
			w.Rate = 5000
			f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, APIs: []int{31}, Workload: w})
			addr, serials := be.serve(t, f)
			const pkg = "com.example.app1"
			vm := onlyVM(t, f, "sim-1", pkg)
			dir := filepath.Join(t.TempDir(), "capture")
			stdout, stderr, code := runCmd(t, "capture", "--adb.address", addr, "--serial", serials["sim-1"], "--package", pkg,
				"--duration", "3s", "--window", "500ms", "--heapprofd.sampling-interval", "2048", "--out", dir)
			if code != exitOK {
				t.Fatalf("capture exited %d: %s %s", code, stdout, stderr)
			}
			truth := vm.HeapprofdTruth()
			if truth.Interval != 2048 || truth.Dumps < 4 {
				t.Fatalf("the VM saw interval %d and %d dumps", truth.Interval, truth.Dumps)
			}
			raw, err := os.ReadFile(filepath.Join(dir, offline.TraceFile))
			if err != nil {
				t.Fatal(err)
			}
			dec := perfetto.NewDecoder(bytes.NewReader(raw), nil)
			var samples, sampledBytes uint64
			dumps := 0
			for {
				d, err := dec.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("the capture's trace: %v", err)
				}
				dumps++
				samples += d.Delta.Count
				sampledBytes += d.Delta.Allocated
			}
			if samples != truth.Sampled.Total.Allocations || sampledBytes != truth.Sampled.Total.Bytes || dumps != truth.Dumps {
				t.Errorf("trace: %d dumps, %d samples, %d bytes; the VM dumped %d, sampled %+v", dumps, samples, sampledBytes, truth.Dumps, truth.Sampled.Total)
			}
			var sum offline.Summary
			b, _ := os.ReadFile(filepath.Join(dir, "summary.json"))
			if err := json.Unmarshal(b, &sum); err != nil {
				t.Fatalf("summary.json: %v", err)
			}
			if sum.Backend != "heapprofd" || !sum.Estimated || sum.SampledAllocations != samples || sum.SampledBytes != sampledBytes ||
				sum.SamplingInterval != 2048 || sum.Dumps != dumps || len(sum.TopClasses) != 0 || sum.Allocations <= samples {
				t.Errorf("summary.json: %s", b)
			}
			pb, err := os.ReadFile(filepath.Join(dir, "profile.pb.gz"))
			if err != nil {
				t.Fatal(err)
			}
			p, err := profile.Parse(bytes.NewReader(pb))
			if err != nil {
				t.Fatal(err)
			}
			var ps int64
			for _, s := range p.Sample {
				ps += s.Value[0]
			}
			if p.SampleType[0].Type != alloctrack.SampleTypeSamples || uint64(ps) != samples {
				t.Errorf("profile.pb.gz: %v samples of type %s, want %d", ps, p.SampleType[0].Type, samples)
			}
			out, errOut, code := runCmd(t, "report", dir)
			if code != exitOK || !strings.Contains(strings.ToLower(out), "estimate") {
				t.Errorf("report of the capture: exit %d, %s %s", code, out, errOut)
			}
			d := f.Device("sim-1")
			if s, fl := d.PerfettoSessions(), d.TraceFiles(); len(s) != 0 || len(fl) != 0 {
				t.Errorf("left on the device: sessions %+v, files %v", s, fl)
			}
			if vm.Tracking() || vm.Stats().Chunks["REAQ"] != 0 {
				t.Errorf("the DDM tracker was touched")
			}
		})
	}
}
