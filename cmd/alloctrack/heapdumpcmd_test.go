package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/ddms/hprof"
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

// TestReportDumpSaysTopOf: with more duplicate groups and classes than
// --top shows, report says how many there are ("top 3 of 19 groups"),
// and JSON carries the totals.
func TestReportDumpSaysTopOf(t *testing.T) {
	b := hproftest.NewBuilder("JAVA PROFILE 1.0.3")
	b.Class(0x100, 0, "java.lang.Object", nil, nil)
	b.Class(0x101, 0x100, "java.lang.String", []hproftest.Field{{Name: "value", Type: hprof.Object}, {Name: "hash", Type: hprof.Int}}, nil)
	b.Class(0x102, 0x100, "java.lang.Object[]", nil, nil)
	var held []uint32
	for i := range uint32(19) { // 19 values, each in two Strings with arrays of their own
		v := []byte{0, byte('a' + i)}
		for k := range uint32(2) {
			id := 0x1000 + 4*i + 2*k
			b.PrimitiveArray(id+1, hprof.Char, 1, v)
			b.Instance(id, 0x101, uint64(id+1), 0)
			held = append(held, id)
		}
	}
	b.ObjectArray(0x9000, 0x102, held...)
	b.Root(hprof.RootUnknown, 0x9000)
	in := filepath.Join(t.TempDir(), "dups.hprof")
	os.WriteFile(in, b.Bytes(), 0o644)
	out, errOut, code := runCmd(t, "report", "--top", "3", in)
	if code != exitOK {
		t.Fatalf("exit %d %s", code, errOut)
	}
	for _, want := range []string{"duplicate Strings: top 3 of 19 groups\n", "duplicate Bitmaps: 0 groups\n", ": top 3 of 4 classes\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, `"`); n != 2*3 {
		t.Errorf("%d duplicate rows, want 3:\n%s", n/2, out)
	}
	out, _, _ = runCmd(t, "report", "--top", "3", "--format", "json", in)
	var sum dumpSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.DuplicateStringGroups != 19 || len(sum.Analysis.DuplicateStrings) != 3 {
		t.Errorf("json: %d groups, %d listed (%v)", sum.DuplicateStringGroups, len(sum.Analysis.DuplicateStrings), err)
	}
}

// TestHeapdumpInInterrupted: a conversion stopped by Ctrl-C (its context
// ended) writes no --out and leaves no temporary file.
func TestHeapdumpInInterrupted(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.hprof")
	os.WriteFile(in, hproftest.LeakyDump(), 0o644)
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := parsedHeapdumpCmd(t, "--in", in, "--out", filepath.Join(dir, "out.hprof"), "--shrink", "--standard")
	if err := c.transform(ctxFile{ctx, f}, nil, *c.out, io.Discard); err == nil {
		t.Error("transform went on after Ctrl-C")
	}
	if left := entries(t, dir); left != "in.hprof " {
		t.Errorf("left: %s", left)
	}
}

// TestHeapdumpBudgetOfEmptyDump: heapdump --budget of a dump that holds no
// object exits 4, as report --budget of it does, instead of judging it
// within budget; --allow-empty judges it.
func TestHeapdumpBudgetOfEmptyDump(t *testing.T) {
	end := []byte{0x2C, 0, 0, 0, 0, 0, 0, 0, 0} // HEAP DUMP END
	empty := append(hproftest.NewBuilder("JAVA PROFILE 1.0.3").Bytes(), end...)
	req := offline.DumpRequest{PID: 123, API: 30, Remote: "/data/local/tmp/x.hprof"}
	meta := offline.CaptureMeta{Serial: "emulator-5554", API: 30, PID: 123}
	bud, err := offline.ParseBudget("b.yaml", []byte("heap: {max_leaked_activities: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flags []string
		want  int
		says  string
	}{
		{nil, exitInsufficient, "the heap dump holds no object; not judged (exit status 4; --allow-empty judges it anyway)"},
		{[]string{"--allow-empty"}, exitOK, "judged anyway (--allow-empty)"},
	} {
		cmd := parsedHeapdumpCmd(t, append([]string{"--out", filepath.Join(t.TempDir(), "d")}, c.flags...)...)
		var stderr bytes.Buffer
		if code := cmd.dumpTo(context.Background(), scriptedDumpDevice{pull: empty}, req, meta, bud, &stderr); code != c.want || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("%v: exit %d, want %d saying %q; stderr:\n%s", c.flags, code, c.want, c.says, stderr.String())
		}
	}
}
