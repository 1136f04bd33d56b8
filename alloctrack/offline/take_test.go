package offline

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// dumpEnd is a HEAP DUMP END record.
var dumpEnd = []byte{0x2C, 0, 0, 0, 1, 0, 0, 0, 0}

// fakeDump is a device whose am dumpheap and dump file a test scripts.
type fakeDump struct {
	mu    sync.Mutex
	file  []byte
	there bool
	stats int
	// am answers am dumpheap; nil: exit 0, no output.
	am func(ctx context.Context) ([]byte, []byte, int, error)
	// onStat changes the file before the nth Stat answers (from 1).
	onStat func(f *fakeDump, n int)
	// afterPull changes the file once a pull has read it.
	afterPull func(f *fakeDump)
	removed   bool
}

func (f *fakeDump) Exec(ctx context.Context, argv ...string) ([]byte, []byte, int, error) {
	if argv[0] == "rm" {
		f.mu.Lock()
		f.file, f.there, f.removed = nil, false, true
		f.mu.Unlock()
		return nil, nil, 0, nil
	}
	f.set(nil)
	if f.am != nil {
		return f.am(ctx)
	}
	return nil, nil, 0, nil
}

func (f *fakeDump) set(b []byte) {
	f.mu.Lock()
	f.file, f.there = b, true
	f.mu.Unlock()
}

func (f *fakeDump) Stat(context.Context, string) (int64, bool, error) {
	f.mu.Lock()
	f.stats++
	n := f.stats
	f.mu.Unlock()
	if f.onStat != nil {
		f.onStat(f, n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.file)), f.there, nil
}

func (f *fakeDump) Pull(_ context.Context, _ string, w io.Writer) (int64, error) {
	f.mu.Lock()
	b := bytes.Clone(f.file)
	f.mu.Unlock()
	n, err := w.Write(b)
	if f.afterPull != nil {
		f.afterPull(f)
	}
	return int64(n), err
}

// takeFake takes a dump of API api from f, within a minute.
func takeFake(t *testing.T, f *fakeDump, api int, timeout time.Duration) (*TakenDump, []byte, error) {
	t.Helper()
	dst, err := os.Create(filepath.Join(t.TempDir(), "pulled"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req := DumpRequest{PID: 42, API: api, Remote: "/data/local/tmp/x.hprof", Poll: 5 * time.Millisecond, StillLimit: 300 * time.Millisecond}
	taken, err := TakeHeapDump(ctx, f, req, dst)
	b, _ := os.ReadFile(dst.Name())
	if !f.removed {
		t.Errorf("the file was not removed from the device")
	}
	return taken, b, err
}

// A whole dump: something, then HEAP DUMP END.
func wholeDump() []byte {
	return append(append([]byte("JAVA PROFILE 1.0.3\x00"), bytes.Repeat([]byte{7}, 200)...), dumpEnd...)
}

// TestTakeOldDumpFailuresEarly: up to Android 9, a file that stays empty,
// one that goes back to 0 bytes, and one that stops short are failed
// dumps, reported once the file has held still for StillLimit, not at the
// timeout (fact 12).
func TestTakeOldDumpFailuresEarly(t *testing.T) {
	half := wholeDump()[:100]
	for name, c := range map[string]struct {
		onStat func(f *fakeDump, n int)
		want   error
		says   string
	}{
		"stays empty": {nil, ErrDumpEmpty, "stayed empty"},
		"emptied": {func(f *fakeDump, n int) {
			if n == 3 {
				f.set(half)
			} else if n == 6 {
				f.set(nil)
			}
		}, ErrDumpEmpty, "went back to 0 bytes"},
		"stops": {func(f *fakeDump, n int) {
			if n == 3 {
				f.set(half)
			}
		}, ErrDumpIncomplete, "stopped at 100 bytes"},
	} {
		_, _, err := takeFake(t, &fakeDump{onStat: c.onStat}, 28, 30*time.Second)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTakeOldDumpPullsAgain: up to Android 9, a file that grows during
// the pull is pulled again, even when the part pulled happened to end in
// bytes that look like HEAP DUMP END; and a file that pauses half-way,
// longer than a few polls, is waited for.
func TestTakeOldDumpPullsAgain(t *testing.T) {
	whole := wholeDump()
	fake := append(bytes.Clone(whole[:100]), dumpEnd...) // looks complete
	grows := &fakeDump{onStat: func(f *fakeDump, n int) {
		if n == 2 {
			f.set(fake)
		}
	}}
	pulls := 0
	grows.afterPull = func(f *fakeDump) {
		if pulls++; pulls == 1 {
			f.set(whole)
		}
	}
	taken, got, err := takeFake(t, grows, 28, time.Hour)
	if err != nil || !bytes.Equal(got, whole) || taken.Bytes != int64(len(whole)) || pulls != 2 {
		t.Errorf("grew during the pull: %v, %d bytes in %d pulls", err, len(got), pulls)
	}
	pauses := &fakeDump{onStat: func(f *fakeDump, n int) {
		switch n {
		case 2:
			f.set(whole[:100])
		case 40: // 40 polls of 5 ms: far more than two, less than StillLimit
			f.set(whole)
		}
	}}
	if _, got, err := takeFake(t, pauses, 28, time.Hour); err != nil || !bytes.Equal(got, whole) {
		t.Errorf("paused half-way: %v, %d bytes", err, len(got))
	}
}

// TestTakeWaitedDumpFailures: from Android 10, am that never returns ends
// at the timeout with a message that says why it may not (fact 12), and
// an empty file after am returned is a failed dump.
func TestTakeWaitedDumpFailures(t *testing.T) {
	never := &fakeDump{am: func(ctx context.Context) ([]byte, []byte, int, error) {
		<-ctx.Done()
		return nil, nil, 0, ctx.Err()
	}}
	_, _, err := takeFake(t, never, 29, 200*time.Millisecond)
	if !errors.Is(err, ErrNoDumpDone) || !strings.Contains(err.Error(), "may have died") || !strings.Contains(err.Error(), "main thread") {
		t.Errorf("no callback: %v", err)
	}
	empty := &fakeDump{am: func(context.Context) ([]byte, []byte, int, error) {
		return []byte("File: /data/local/tmp/x.hprof\nWaiting for dump to finish...\n"), nil, 0, nil
	}}
	if _, _, err := takeFake(t, empty, 30, time.Hour); !errors.Is(err, ErrDumpEmpty) {
		t.Errorf("empty dump on API 30: %v", err)
	}
}

// TestParseAmDumpheap: each version's text (fact 11), on stdout and
// stderr apart (shell v2) or in one stream with CRLF (shell v1), with the
// exit status or without it (-1).
func TestParseAmDumpheap(t *testing.T) {
	const trace = "\tat com.android.server.am.ActivityManagerService.dumpHeap(ActivityManagerService.java)\n"
	for _, c := range []struct {
		name string
		text string
		code int
		want error // nil: a failure of no known kind
		line string
	}{
		{"7.x unknown", "usage: am [subcommand] [options]\n       am dumpheap [-n] <PROCESS> <FILE>\n\nError: Unknown process: 999\n", 0, ErrUnknownProcess, "Error: Unknown process: 999"},
		{"7.x not debuggable", "java.lang.SecurityException: Process not debuggable: ProcessRecord{a1b2c3d 42:com.x/u0a57}\n\tat android.os.Parcel.readException(Parcel.java)\n", 1, ErrNotDebuggable, "java.lang.SecurityException: Process not debuggable: ProcessRecord{a1b2c3d 42:com.x/u0a57}"},
		{"9 not debuggable", "Security exception: Process not debuggable: ProcessRecord{a1b2c3d 42:com.x/u0a57}\n\njava.lang.SecurityException: Process not debuggable: ProcessRecord{a1b2c3d 42:com.x/u0a57}\n" + trace, 255, ErrNotDebuggable, "Security exception: Process not debuggable: ProcessRecord{a1b2c3d 42:com.x/u0a57}"},
		{"9 unknown", "\nException occurred while executing:\njava.lang.IllegalArgumentException: Unknown process: 999\n" + trace, 255, ErrUnknownProcess, "java.lang.IllegalArgumentException: Unknown process: 999"},
		{"11 not debuggable", "\nException occurred while executing 'dumpheap':\njava.lang.SecurityException: Process not debuggable: ProcessRecord{a1b2c3d 42:com.x/u0a57}\n" + trace, 255, ErrNotDebuggable, "java.lang.SecurityException: Process not debuggable: ProcessRecord{a1b2c3d 42:com.x/u0a57}"},
		{"15 not debuggable", "\nException occurred while executing 'dumpheap':\njava.lang.SecurityException: Process not debuggable: com.x\n" + trace, 255, ErrNotDebuggable, "java.lang.SecurityException: Process not debuggable: com.x"},
		{"11 other", "\nException occurred while executing 'dumpheap':\njava.lang.IllegalStateException: boom\n" + trace, 255, nil, "java.lang.IllegalStateException: boom"},
		{"open file", "Error: Unable to open file: /sdcard/x\nConsider using a file under /data/local/tmp/\n", 255, nil, "Error: Unable to open file: /sdcard/x"},
		{"status only", "", 3, nil, "no output"},
	} {
		for _, v1 := range []bool{false, true} {
			var out, errOut []byte
			code := c.code
			if v1 { // one stream, a pty's CRLF, no status unless it failed
				out = []byte(strings.ReplaceAll(c.text, "\n", "\r\n"))
				if code == 0 {
					code = -1
				}
			} else {
				errOut = []byte(c.text)
			}
			err := ParseAmDumpheap(out, errOut, code)
			var ae *AmError
			if !errors.As(err, &ae) || ae.Line != c.line || c.want != nil && !errors.Is(err, c.want) || c.want == nil && ae.Err != nil {
				t.Errorf("%s (one stream %v): %#v", c.name, v1, err)
			}
		}
	}
	for _, ok := range []string{"", "File: /data/local/tmp/x.hprof\nWaiting for dump to finish...\n"} {
		if err := ParseAmDumpheap([]byte(ok), nil, 0); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
		if err := ParseAmDumpheap([]byte(ok), nil, -1); err != nil {
			t.Errorf("%q, no status: %v", ok, err)
		}
	}
}

// TestTakeRemovesRefusedFile: the empty file am leaves from Android 8
// when it refuses is removed, and the refusal says am dumpheap's rule.
func TestTakeRemovesRefusedFile(t *testing.T) {
	f := &fakeDump{am: func(context.Context) ([]byte, []byte, int, error) {
		return nil, []byte("\nException occurred while executing 'dumpheap':\njava.lang.SecurityException: Process not debuggable: com.x\n"), 255, nil
	}}
	_, _, err := takeFake(t, f, 34, time.Minute)
	if !errors.Is(err, ErrNotDebuggable) || !strings.Contains(err.Error(), "ro.debuggable=1") || f.there {
		t.Errorf("%v; file still there %v", err, f.there)
	}
}
