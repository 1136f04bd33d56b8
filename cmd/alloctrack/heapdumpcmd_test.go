package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/internal/hproftest"
)

// TestHeapdumpTakeFailuresLeaveNothing: a dump that fails anywhere (am
// dumpheap, a pulled file that does not parse, an incomplete one) leaves
// no file in --out, and no --out at all when heapdump made it; a
// directory that was there stays, empty. A dump that succeeds leaves
// heap.hprof and summary.json, shrunk or not.
func TestHeapdumpTakeFailuresLeaveNothing(t *testing.T) {
	end := []byte{0x2C, 0, 0, 0, 0, 0, 0, 0, 0} // HEAP DUMP END
	failing := map[string]scriptedDumpDevice{
		"am dumpheap fails": {amErr: errors.New("device offline")},
		"not a dump":        {pull: append([]byte("not an hprof file at all"), end...)},
		"truncated dump":    {pull: append(hproftest.LeakyDump()[:300], end...)},
		"incomplete":        {pull: hproftest.LeakyDump()[:300]},
	}
	req := offline.DumpRequest{PID: 123, API: 30, Remote: "/data/local/tmp/x.hprof"}
	meta := offline.CaptureMeta{Serial: "emulator-5554", API: 30, PID: 123}
	for _, shrink := range []string{"--no-shrink", "--shrink"} {
		for name, dev := range failing {
			parent := t.TempDir()
			made, there := filepath.Join(parent, "new"), filepath.Join(parent, "there")
			os.Mkdir(there, 0o755)
			for _, out := range []string{made, there} {
				c := parsedHeapdumpCmd(t, "--out", out, shrink)
				var stderr bytes.Buffer
				if code := c.dumpTo(context.Background(), dev, req, meta, nil, &stderr); code != exitFailure {
					t.Errorf("%s %s: exit %d, %s", name, shrink, code, stderr.String())
				}
			}
			if left := entries(t, parent); left != "there " {
				t.Errorf("%s %s: %s holds %s, want only the directory that was there", name, shrink, parent, left)
			}
			if left := entries(t, there); left != "" {
				t.Errorf("%s %s: left in --out: %s", name, shrink, left)
			}
		}
		out := filepath.Join(t.TempDir(), "ok")
		c := parsedHeapdumpCmd(t, "--out", out, shrink)
		var stderr bytes.Buffer
		if code := c.dumpTo(context.Background(), scriptedDumpDevice{pull: hproftest.LeakyDump()}, req, meta, nil, &stderr); code != exitOK {
			t.Fatalf("%s: exit %d, %s", shrink, code, stderr.String())
		}
		if left := entries(t, out); left != "heap.hprof summary.json " {
			t.Errorf("%s: --out holds %s", shrink, left)
		}
	}
}

// parsedHeapdumpCmd returns the heapdump command with args parsed.
func parsedHeapdumpCmd(t *testing.T, args ...string) *heapdumpCmd {
	t.Helper()
	app := kingpin.New("alloctrack", "")
	c := newHeapdumpCmd(app)
	if _, err := app.Parse(append([]string{"heapdump"}, args...)); err != nil {
		t.Fatal(err)
	}
	return c
}
