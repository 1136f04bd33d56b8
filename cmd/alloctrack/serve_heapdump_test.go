package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/alloctrack/alloctrack/internal/hproftest"
)

// scriptedDumpDevice answers am dumpheap with amErr (if set), and a pull
// with pull.
type scriptedDumpDevice struct {
	amErr error
	pull  []byte
}

func (d scriptedDumpDevice) Exec(_ context.Context, argv ...string) ([]byte, []byte, int, error) {
	if argv[0] == "am" && d.amErr != nil {
		return nil, nil, 0, d.amErr
	}
	return nil, nil, 0, nil
}

func (d scriptedDumpDevice) Stat(context.Context, string) (int64, bool, error) {
	return int64(len(d.pull)), true, nil
}

func (d scriptedDumpDevice) Pull(_ context.Context, _ string, w io.Writer) (int64, error) {
	n, err := w.Write(d.pull)
	return int64(n), err
}

// TestServeDumpFailuresLeaveNothing: a web-view dump that fails anywhere
// (am dumpheap, a dump that does not parse, an incomplete one) leaves
// nothing in --heapdump.dir; one that succeeds leaves its directory with
// heap.hprof and summary.json; directories of dumps a crash cut short
// are removed when serve starts.
func TestServeDumpFailuresLeaveNothing(t *testing.T) {
	dir := t.TempDir()
	crashed := filepath.Join(dir, partialPrefix+"20260101T000000.000-x-y-123")
	os.MkdirAll(crashed, 0o755)
	os.WriteFile(filepath.Join(crashed, "heap.hprof"), []byte("half"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644) // not ours: kept
	s, err := newServeDumper(nil, dir, time.Minute, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(crashed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dump cut short by a crash is still there: %v", err)
	}
	end := []byte{hprof.TagHeapDumpEnd, 0, 0, 0, 0, 0, 0, 0, 0}
	target := dumpTarget{serial: "emulator-5554", pkg: "com.example", api: 30, pid: 123}
	for name, dev := range map[string]scriptedDumpDevice{
		"am dumpheap fails": {amErr: errors.New("device offline")},
		"not a dump":        {pull: append([]byte("not an hprof file at all"), end...)},
		"truncated dump":    {pull: append(hproftest.LeakyDump()[:300], end...)},
		"incomplete":        {pull: hproftest.LeakyDump()[:300]},
	} {
		if id, err := s.dump(context.Background(), dev, target, false); err == nil {
			t.Errorf("%s: dump %s taken", name, id)
		}
		if left := entries(t, dir); left != "notes.txt " {
			t.Errorf("%s: left in the dump directory: %s", name, left)
		}
	}
	id, err := s.dump(context.Background(), scriptedDumpDevice{pull: hproftest.LeakyDump()}, target, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"heap.hprof", "summary.json"} {
		if st, err := os.Stat(filepath.Join(dir, id, f)); err != nil || st.Size() == 0 {
			t.Errorf("dump %s: %s: %v", id, f, err)
		}
	}
	if st, _ := os.Stat(filepath.Join(dir, id)); st == nil || st.Mode().Perm() != 0o755 {
		t.Errorf("dump directory %v, want mode 0755", st)
	}
	if left := entries(t, dir); left != id+" notes.txt " {
		t.Errorf("dump directory holds %s", left)
	}
}

// entries lists dir's names, each followed by a space.
func entries(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, e := range ents {
		s += e.Name() + " "
	}
	return s
}
