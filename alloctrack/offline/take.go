package offline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// DumpDevice is what taking a heap dump needs of a device: a command, and
// a file's size and contents (adb's sync protocol).
type DumpDevice interface {
	Exec(ctx context.Context, argv ...string) (stdout, stderr []byte, code int, err error)
	Stat(ctx context.Context, path string) (size int64, exists bool, err error)
	Pull(ctx context.Context, path string, w io.Writer) (int64, error)
}

// API levels of am dumpheap's behaviours (docs/heapdumps.md).
const (
	APIDumpheapGC   = 27 // -g: a GC before the dump (Android 8.1)
	APIDumpheapWait = 29 // am waits until the app has written the dump (Android 10)
	// -b FORMAT: every Bitmap's pixels, compressed, in the dump
	// (Bitmap.dumpData, Android 15)
	APIDumpheapBitmaps = 35
)

// DumpRequest says which app to dump and how.
type DumpRequest struct {
	PID int
	API int
	GC  bool // collect garbage first (am dumpheap -g)
	// Bitmaps, if set ("png", "jpg" or "webp"), puts every Bitmap's
	// pixels in the dump, compressed so (am dumpheap -b).
	Bitmaps string
	// Remote is the file on the device: under /data/local/tmp, which the
	// shell (which opens it) may write.
	Remote string
	// Poll is how often the file's size is checked while an app of
	// Android 9 or older writes it (am does not wait there).
	Poll time.Duration
}

// TakenDump is how a dump went.
type TakenDump struct {
	Bytes int64
	// Took is from am dumpheap's start until the dump was complete: how
	// long the app was frozen, at most (ART suspends every thread while
	// it writes; the rest is am's and the poll's time).
	Took time.Duration
}

// ErrDumpIncomplete is a pulled dump that does not end with HEAP DUMP END.
var ErrDumpIncomplete = errors.New("the dump does not end with a HEAP DUMP END record: incomplete")

// Check refuses what the device's am dumpheap cannot do: a GC first
// before Android 8.1, Bitmaps' pixels before Android 15, an unknown
// Bitmap format. Callers check before they tell anyone the app is about
// to freeze.
func (req DumpRequest) Check() error {
	switch req.Bitmaps {
	case "", "png", "jpg", "webp":
	default:
		return fmt.Errorf("bitmap format %q: want png, jpg or webp", req.Bitmaps)
	}
	switch {
	case req.GC && req.API < APIDumpheapGC:
		return fmt.Errorf("am dumpheap -g (a GC first) needs Android 8.1 (API %d); the device has API %d", APIDumpheapGC, req.API)
	case req.Bitmaps != "" && req.API < APIDumpheapBitmaps:
		return fmt.Errorf("am dumpheap -b (Bitmaps' pixels) needs Android 15 (API %d); the device has API %d", APIDumpheapBitmaps, req.API)
	}
	return nil
}

// TakeHeapDump dumps an app's Java heap with am dumpheap, waits until the
// file is complete (am waits from Android 10; before, the file's size is
// polled until it holds still and the dump ends with HEAP DUMP END),
// pulls it into dst and removes it from the device, whatever happened.
func TakeHeapDump(ctx context.Context, dev DumpDevice, req DumpRequest, dst *os.File) (*TakenDump, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	if req.Poll <= 0 {
		req.Poll = 200 * time.Millisecond
	}
	argv := []string{"am", "dumpheap"}
	if req.GC {
		argv = append(argv, "-g")
	}
	if req.Bitmaps != "" {
		argv = append(argv, "-b", req.Bitmaps)
	}
	argv = append(argv, strconv.Itoa(req.PID), req.Remote)
	defer func() {
		// A fresh context: the file goes even when ctx ended.
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dev.Exec(rctx, "rm", "-f", req.Remote)
	}()
	start := time.Now()
	out, errOut, code, err := dev.Exec(ctx, argv...)
	if err != nil {
		return nil, fmt.Errorf("am dumpheap: %w", err)
	}
	if msg := amError(out, errOut); code != 0 || msg != "" {
		return nil, fmt.Errorf("am dumpheap %d %s: exit status %d: %s", req.PID, req.Remote, code, msg)
	}
	t := &TakenDump{}
	for attempt := 0; ; attempt++ {
		if req.API < APIDumpheapWait {
			if err := waitStill(ctx, dev, req.Remote, req.Poll); err != nil {
				return nil, err
			}
		}
		t.Took = time.Since(start)
		if _, err := dst.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		if err := dst.Truncate(0); err != nil {
			return nil, err
		}
		tail := &tailWriter{}
		n, err := dev.Pull(ctx, req.Remote, io.MultiWriter(dst, tail))
		if err != nil {
			return nil, err
		}
		t.Bytes = n
		if tail.endsDump() {
			return t, nil
		}
		if req.API >= APIDumpheapWait || attempt == 2 {
			return nil, fmt.Errorf("%s (%d bytes): %w", req.Remote, n, ErrDumpIncomplete)
		}
	}
}

// amError returns what am printed about a failure: an exception or an
// error line (am's exit status is not always set).
func amError(out, errOut []byte) string {
	for _, b := range [][]byte{errOut, out} {
		s := strings.TrimSpace(string(b))
		if strings.Contains(s, "Exception") || strings.HasPrefix(s, "Error") || strings.Contains(s, "\nError") {
			return s
		}
	}
	return ""
}

// waitStill polls a file's size until it is not empty and two polls in a
// row see the same size.
func waitStill(ctx context.Context, dev DumpDevice, path string, poll time.Duration) error {
	last := int64(-1)
	for {
		size, ok, err := dev.Stat(ctx, path)
		if err != nil {
			return err
		}
		if ok && size > 0 && size == last {
			return nil
		}
		last = size
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to be written: %w (%d bytes so far)", path, ctx.Err(), max(0, size))
		case <-time.After(poll):
		}
	}
}

// tailWriter keeps the last 9 bytes written: where a dump's HEAP DUMP END
// record is.
type tailWriter struct{ b []byte }

func (w *tailWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p[max(0, len(p)-9):]...)
	if len(w.b) > 9 {
		w.b = w.b[len(w.b)-9:]
	}
	return len(p), nil
}

func (w *tailWriter) endsDump() bool {
	return len(w.b) == 9 && w.b[0] == hprof.TagHeapDumpEnd && bytes.Equal(w.b[5:], []byte{0, 0, 0, 0})
}
