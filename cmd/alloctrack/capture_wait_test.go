package main

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/alloctrack/alloctrack/sim"
)

// TestCaptureWaitsForServer: with --wait, a capture started before its
// adb server is up (a CI job that starts the simulator, or an emulator,
// just before) keeps trying and records once the server answers, rather
// than failing on its first try. Without --wait the first try decides.
func TestCaptureWaitsForServer(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, APIs: []int{30}, AppsPerDevice: 1, Workload: quietCaptureWorkload()})
	for _, wait := range []string{"0s", "2m"} {
		t.Run("wait="+wait, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			out := filepath.Join(t.TempDir(), "capture")
			type result struct {
				stderr string
				code   int
			}
			done := make(chan result, 1)
			go func() {
				_, stderr, code := runCmd(t, "capture", "--adb.address", addr, "--serial", "sim-1", "--package", "com.example.app1",
					"--duration", "2s", "--window", "500ms", "--window.min", "250ms", "--wait", wait, "--out", out)
				done <- result{stderr, code}
			}()
			// The first try reaches a port that closes it unanswered; the
			// server comes up on that port only after.
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			ln.Close()
			if wait == "0s" {
				if r := <-done; r.code != exitFailure {
					t.Fatalf("without --wait: exit %d, want %d; stderr:\n%s", r.code, exitFailure, r.stderr)
				}
				return
			}
			if _, err := f.ServeHost(addr); err != nil {
				t.Fatalf("serving on %s again: %v", addr, err)
			}
			if r := <-done; r.code != exitOK {
				t.Fatalf("with --wait %s: exit %d, want 0; stderr:\n%s", wait, r.code, r.stderr)
			}
		})
	}
}
