package offline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
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
	// StillLimit is how long, on Android 9 and older, the file may stay
	// empty, or hold still short of complete, before the dump counts as
	// failed (DefaultStillLimit when zero).
	StillLimit time.Duration
}

// DefaultStillLimit is DumpRequest.StillLimit's default: ART (9 and
// older) writes a dump record by record once it has measured it, and
// empties the file when it fails (fact 12), so a file that holds still
// this long is not being written.
const DefaultStillLimit = 10 * time.Second

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
// pulls it into dst and removes it from the device, whatever happened
// (also the empty file am leaves from Android 8 when it refuses).
func TakeHeapDump(ctx context.Context, dev DumpDevice, req DumpRequest, dst *os.File) (*TakenDump, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	if req.Poll <= 0 {
		req.Poll = 200 * time.Millisecond
	}
	if req.StillLimit <= 0 {
		req.StillLimit = DefaultStillLimit
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
	switch {
	case err != nil && req.API >= APIDumpheapWait && deadlinePassed(ctx, err):
		return nil, fmt.Errorf("am dumpheap %d: %w", req.PID, ErrNoDumpDone)
	case err != nil:
		return nil, fmt.Errorf("am dumpheap: %w", err)
	}
	if err := ParseAmDumpheap(out, errOut, code); err != nil {
		return nil, fmt.Errorf("am dumpheap %d %s: %w", req.PID, req.Remote, err)
	}
	t := &TakenDump{}
	if req.API < APIDumpheapWait {
		t.Bytes, err = pollAndPull(ctx, dev, req, dst)
	} else {
		t.Bytes, err = pullWaited(ctx, dev, req.Remote, dst)
	}
	if err != nil {
		return nil, err
	}
	t.Took = time.Since(start)
	return t, nil
}

// deadlinePassed reports whether err came of ctx's deadline (a socket's
// deadline set from it may fire before the context's own timer).
func deadlinePassed(ctx context.Context, err error) bool {
	dl, ok := ctx.Deadline()
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || ok && !time.Now().Before(dl)
}

// pullWaited pulls the dump am waited for (Android 10 and later): it is
// whole, or the dump failed.
func pullWaited(ctx context.Context, dev DumpDevice, path string, dst *os.File) (int64, error) {
	n, complete, err := pull(ctx, dev, path, dst)
	switch {
	case err != nil:
		return 0, err
	case n == 0:
		return 0, fmt.Errorf("%s is empty: %w", path, ErrDumpEmpty)
	case !complete:
		return 0, fmt.Errorf("%s (%d bytes): %w", path, n, ErrDumpIncomplete)
	}
	return n, nil
}

// pollAndPull waits for the dump an app of Android 9 or older writes
// after am returned, and pulls it: until the file holds still, then again
// whenever the pulled copy is incomplete or the file grew during the pull
// (fact 12: ART writes it record by record, and empties it when it fails).
func pollAndPull(ctx context.Context, dev DumpDevice, req DumpRequest, dst *os.File) (int64, error) {
	p := &dumpPoll{dev: dev, path: req.Remote, poll: req.Poll, limit: req.StillLimit}
	var from int64
	for {
		if _, err := p.waitSize(ctx, from); err != nil {
			return 0, err
		}
		n, complete, err := pull(ctx, dev, req.Remote, dst)
		if err != nil {
			return 0, err
		}
		after, _, err := dev.Stat(ctx, req.Remote)
		if err != nil {
			return 0, err
		}
		if complete && after == n {
			return n, nil
		}
		from = n // wait for the file to differ from what was pulled
	}
}

// pull copies path into dst from its start and says whether the copy
// ends with HEAP DUMP END.
func pull(ctx context.Context, dev DumpDevice, path string, dst *os.File) (int64, bool, error) {
	if _, err := dst.Seek(0, io.SeekStart); err != nil {
		return 0, false, err
	}
	if err := dst.Truncate(0); err != nil {
		return 0, false, err
	}
	tail := &tailWriter{}
	n, err := dev.Pull(ctx, path, io.MultiWriter(dst, tail))
	return n, tail.endsDump(), err
}

// dumpPoll watches the size of the file an app of Android 9 or older
// writes its dump to.
type dumpPoll struct {
	dev         DumpDevice
	path        string
	poll, limit time.Duration
	grew        bool // the file was seen with bytes in it
}

// waitSize polls the file until two polls in a row agree on a size that
// is neither 0 nor from. It fails when the file goes back to 0 bytes
// after it had some (ART empties the file of a failed dump), when it
// stays empty for the limit (the dump failed, or the app's main thread,
// which writes it, is blocked), and when it holds still at from for the
// limit (the app stopped writing: it died).
func (p *dumpPoll) waitSize(ctx context.Context, from int64) (int64, error) {
	last, since := int64(-1), time.Now()
	for {
		size, ok, err := p.dev.Stat(ctx, p.path)
		if err != nil {
			return 0, err
		}
		if !ok {
			size = 0
		}
		switch {
		case size == 0 && p.grew:
			return 0, fmt.Errorf("%s went back to 0 bytes: %w", p.path, ErrDumpEmpty)
		case size > 0 && size != from && size == last:
			return size, nil
		case size != last:
			last, since = size, time.Now()
		case time.Since(since) < p.limit:
		case size == 0:
			return 0, fmt.Errorf("%s stayed empty for %v (the app's main thread, which writes the dump, may be blocked): %w", p.path, p.limit, ErrDumpEmpty)
		default:
			return 0, fmt.Errorf("%s stopped at %d bytes for %v (the app may have died while writing it): %w", p.path, size, p.limit, ErrDumpIncomplete)
		}
		p.grew = p.grew || size > 0
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for %s to be written: %w (%d bytes so far)", p.path, ctx.Err(), max(0, size))
		case <-time.After(p.poll):
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
