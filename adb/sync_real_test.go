package adb_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/sim"
)

// TestPullRealADB pulls files from a simulated device through a real adb
// server (Debian's 29.0.6): a file of several DATA packets arrives whole;
// a missing one is an error that says so; the real adb's own pull agrees.
func TestPullRealADB(t *testing.T) {
	srv := adbtest.StartServer(t)
	d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-p", API: 30})
	serial := attachADB(t, srv, d)
	data := make([]byte, 300_000)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	d.PutFile("/data/local/tmp/x.hprof", data)
	c := adb.NewClient(srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got bytes.Buffer
	n, err := c.Pull(ctx, serial, "/data/local/tmp/x.hprof", &got)
	if err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("pulled %d bytes, %v; want %d equal bytes", n, err, len(data))
	}
	if _, err := c.Pull(ctx, serial, "/data/local/tmp/none", &got); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
	// The real adb client pulls the same bytes through the same service.
	dst := filepath.Join(t.TempDir(), "y")
	if out, err := srv.Run(t, "-s", serial, "pull", "/data/local/tmp/x.hprof", dst); err != nil {
		t.Fatalf("adb pull: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, data) {
		t.Errorf("adb pull wrote %d bytes, not the file's %d", len(b), len(data))
	}
}
