package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/ddms/hprof"
)

type heapdumpCmd struct {
	cmd      *kingpin.CmdClause
	in       *string
	out      *string
	shrink   *bool
	standard *bool
	appOnly  *bool

	adbAddr, serial, pkg *string
	pid, top             *int
	gc                   *bool
	bitmaps              *string
	timeout, reqTimeout  *time.Duration
	wait                 *time.Duration
	budget               *string
	gate                 *gateFlags // --allow-empty only: a dump is whole or fails
}

func newHeapdumpCmd(app *kingpin.Application) *heapdumpCmd {
	c := &heapdumpCmd{cmd: app.Command("heapdump", "Take a heap dump of a running app that is debuggable, or of any app on a userdebug or eng build (am dumpheap, pulled and removed from the device) into a capture directory (heap.hprof and summary.json), or, with --in, shrink an hprof file as Tencent Matrix does or convert an Android dump to the standard format as hprof-conv does.")}
	f := c.cmd.Flag
	c.in = f("in", "An hprof file to shrink or convert, instead of taking a dump.").String()
	c.out = f("out", "Taking a dump: the capture directory to create. With --in: the file to write (not the input).").Short('o').Required().String()
	c.adbAddr = f("adb.address", "adb server address host:port. Default: $ADB_SERVER_SOCKET (tcp:host:port), $ANDROID_ADB_SERVER_PORT, 127.0.0.1:5037.").String()
	c.serial = f("serial", "Device serial; may be left out when only one device is attached.").String()
	c.pkg = f("package", "App to dump, by package (process) name.").String()
	c.pid = f("pid", "App to dump, by process id (instead of --package).").Int()
	c.wait = waitFlag(c.cmd)
	c.gc = f("gc", "Collect garbage before the dump (am dumpheap -g, Android 8.1 and later).").Bool()
	c.bitmaps = f("bitmaps", "Put every Bitmap's pixels in the dump, compressed as png, jpg or webp (am dumpheap -b, Android 15 and later): duplicate Bitmaps are then found there too.").PlaceHolder("FORMAT").String()
	c.timeout = f("timeout", "How long the dump may take, from am dumpheap to the pulled file. The app is frozen while ART writes it.").Default("5m").Duration()
	c.reqTimeout = f("request.timeout", "Timeout of each lookup request (devices, processes, JDWP handshake).").Default("5s").Duration()
	c.top = f("top", "Classes per heap and duplicates listed in summary.json.").Default("20").Int()
	c.budget = f("budget", "Check the dump against a budget file's heap: limits; exit status 3 if it is exceeded, 4 if the dump holds no object, 5 if a rule matched nothing.").String()
	c.gate = &gateFlags{partial: new(bool), empty: f("allow-empty", "With --budget: judge a dump that holds no object, instead of exiting with status 4.").Bool()}
	c.shrink = f("shrink", "Drop every primitive array's values except Strings' and Bitmaps', and keep one copy of equal Bitmap buffers.").Bool()
	c.standard = f("standard", "Convert Android's JAVA PROFILE 1.0.3 to the standard 1.0.2, byte for byte as hprof-conv.").Bool()
	c.appOnly = f("app-only", "With --standard: leave out the zygote's and the boot image's objects (hprof-conv -z).").Bool()
	return c
}

func (c *heapdumpCmd) run(stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "alloctrack heapdump: "+format+"\n", args...)
		return code
	}
	if *c.appOnly && !*c.standard {
		return fail(exitUsage, "--app-only goes with --standard")
	}
	if *c.in == "" {
		return c.take(stderr)
	}
	switch {
	case !*c.shrink && !*c.standard:
		return fail(exitUsage, "give --shrink, --standard or both")
	case *c.pkg != "" || *c.pid != 0 || *c.serial != "" || *c.gc || *c.bitmaps != "" || *c.budget != "" || *c.gate.empty:
		return fail(exitUsage, "--in converts a file: --serial, --package, --pid, --gc, --bitmaps, --budget and --allow-empty are for taking a dump")
	}
	if a, b := filepath.Clean(*c.in), filepath.Clean(*c.out); a == b {
		return fail(exitUsage, "--out %s is the input", *c.out)
	}
	in, err := os.Open(*c.in)
	if err != nil {
		return fail(exitFailure, "%v", err) // the path and why: no such file, permission denied
	}
	defer in.Close()
	if !offline.IsHeapDump(*c.in) {
		return fail(exitFailure, "%s: not a heap dump (hprof)", *c.in)
	}
	if _, err := os.Lstat(*c.out); err == nil {
		return fail(exitUsage, "%s already exists; choose another --out", *c.out)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.transform(ctxFile{ctx, in}, nil, *c.out, stderr); ctx.Err() != nil {
		return fail(exitFailure, "interrupted; %s not written", *c.out)
	} else if err != nil {
		return fail(exitFailure, "%s: %v", *c.in, err)
	}
	inSt, _ := os.Stat(*c.in)
	outSt, _ := os.Stat(*c.out)
	fmt.Fprintf(stderr, "alloctrack heapdump: %s: %d bytes, %.1f%% of %s\n", *c.out, outSt.Size(), 100*float64(outSt.Size())/float64(max(1, inSt.Size())), *c.in)
	return exitOK
}

// ctxFile reads a file until its context ends (Ctrl-C): a conversion then
// stops with an error and removes its temporary files.
type ctxFile struct {
	ctx context.Context
	f   *os.File
}

func (r ctxFile) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, fmt.Errorf("interrupted: %w", err)
	}
	return r.f.Read(p)
}

func (r ctxFile) Seek(off int64, whence int) (int64, error) { return r.f.Seek(off, whence) }

// adbDumpDevice is a device of an adb server, as TakeHeapDump needs it.
// Its commands go through shell v2 where the device lists shell_v2, and
// through shell: before Android 7.0 (adb.Client.Run).
type adbDumpDevice struct {
	c      *adb.Client
	serial string
}

func (d adbDumpDevice) Exec(ctx context.Context, argv ...string) ([]byte, []byte, int, error) {
	return d.c.Run(ctx, d.serial, nil, argv...)
}

func (d adbDumpDevice) Stat(ctx context.Context, path string) (int64, bool, error) {
	return d.c.Stat(ctx, d.serial, path)
}

func (d adbDumpDevice) Pull(ctx context.Context, path string, w io.Writer) (int64, error) {
	return d.c.Pull(ctx, d.serial, path, w)
}

// take dumps an app's heap into a capture directory: heap.hprof (shrunk or
// converted if asked) and summary.json, analysed from the whole dump.
func (c *heapdumpCmd) take(stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "alloctrack heapdump: "+format+"\n", args...)
		return code
	}
	switch {
	case (*c.pkg == "") == (*c.pid == 0):
		return fail(exitUsage, "give exactly one of --package and --pid (or --in FILE to convert a file)")
	case *c.pid < 0:
		return fail(exitUsage, "--pid %d is not a process id", *c.pid)
	case *c.pkg != "" && adb.CheckName(*c.pkg) != nil:
		return fail(exitUsage, "--package: %v", adb.CheckName(*c.pkg))
	case *c.timeout <= 0 || *c.reqTimeout <= 0:
		return fail(exitUsage, "--timeout and --request.timeout must be positive")
	case *c.top < 1:
		return fail(exitUsage, "--top must be at least 1")
	case (offline.DumpRequest{Bitmaps: *c.bitmaps, API: offline.APIDumpheapBitmaps}).Check() != nil:
		return fail(exitUsage, "--bitmaps %q: want png, jpg or webp", *c.bitmaps)
	}
	var bud *offline.Budget
	if *c.budget != "" {
		var err error
		if bud, err = offline.ReadBudget(*c.budget); err != nil {
			return fail(exitUsage, "%v", err)
		}
		if !bud.HasHeapLimits() {
			return fail(exitUsage, "%s has no heap limits (heap:)", *c.budget)
		}
	}
	if err := offline.CheckHeapCaptureDir(*c.out); err != nil {
		return fail(exitUsage, "%v", err)
	}
	addr := *c.adbAddr
	if addr == "" {
		addr = adb.DefaultAddress()
	}
	client := adb.NewClient(addr)
	ctx, cancel := context.WithTimeout(context.Background(), *c.timeout)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
			cancel() // the file on the device is removed all the same
		case <-ctx.Done():
		}
	}()
	cfg := ddm.Config{RequestTimeout: *c.reqTimeout}
	serial, model, api, pid, code, msg := lookupWaiting(ctx, *c.wait, func() (string, string, int, int, int, string) {
		return lookupDumpApp(ctx, client, addr, *c.serial, *c.pkg, *c.pid, cfg, stderr)
	})
	if code != exitOK {
		return fail(code, "%s", msg)
	}
	req := offline.DumpRequest{PID: pid, API: api, GC: *c.gc, Bitmaps: *c.bitmaps, Remote: fmt.Sprintf("/data/local/tmp/alloctrack-%d-%d.hprof", pid, time.Now().UnixNano())}
	if err := req.Check(); err != nil {
		return fail(exitFailure, "%s pid %d: %v", serial, pid, err)
	}
	meta := offline.CaptureMeta{Serial: serial, Model: model, API: api, Package: *c.pkg, PID: pid}
	return c.dumpTo(ctx, adbDumpDevice{client, serial}, req, meta, bud, stderr)
}

// dumpTo takes the dump req asks for from dev into the capture directory
// --out. On failure it removes what it wrote, and the directory if it
// made it; a dump over budget is kept.
func (c *heapdumpCmd) dumpTo(ctx context.Context, dev offline.DumpDevice, req offline.DumpRequest, meta offline.CaptureMeta, bud *offline.Budget, stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "alloctrack heapdump: "+format+"\n", args...)
		return code
	}
	_, statErr := os.Stat(*c.out)
	made := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(*c.out, 0o755); err != nil {
		return fail(exitFailure, "%v", err)
	}
	dst := filepath.Join(*c.out, offline.HeapDumpFile)
	done := false
	defer func() {
		if !done {
			os.Remove(dst)
			if made {
				os.Remove(*c.out)
			}
		}
	}()
	pulled, err := os.CreateTemp(*c.out, ".pulled-*.hprof")
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	defer os.Remove(pulled.Name())
	defer pulled.Close()
	start := time.Now()
	fmt.Fprintf(stderr, "alloctrack heapdump: dumping pid %d on %s (API %d); the app is frozen while it is written\n", meta.PID, meta.Serial, meta.API)
	taken, err := offline.TakeHeapDump(ctx, dev, req, pulled)
	if errors.Is(err, offline.ErrNoDumpDone) {
		return fail(exitFailure, "%s pid %d: %v (--timeout %v)", meta.Serial, meta.PID, err, *c.timeout)
	} else if err != nil {
		return fail(exitFailure, "%s pid %d: %v", meta.Serial, meta.PID, err)
	}
	sum, a, err := c.analyseAndKeep(pulled, dst, meta, req, taken, stderr)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	sum.Start = start
	if err := offline.WriteHeapSummary(*c.out, sum); err != nil {
		return fail(exitFailure, "%v", err)
	}
	done = true
	fmt.Fprintf(stderr, "alloctrack heapdump: %s: %d bytes dumped in %.1fs; %d objects, %d leaked Activities and Fragments, %d groups of duplicate Strings, %d of Bitmaps\n",
		*c.out, taken.Bytes, taken.Took.Seconds(), a.Histogram.Objects, len(a.Leaks), len(a.DuplicateStrings), len(a.DuplicateBitmaps))
	switch {
	case bud == nil:
		return exitOK
	case !c.gate.admit(stderr, "alloctrack heapdump", offline.DumpShortfall(*c.out, a)):
		return exitInsufficient
	}
	return judge(stderr, "alloctrack heapdump", bud.MeasureDump(a))
}

// analyseAndKeep analyses the pulled dump, keeps it at dst as asked
// (keep) and returns its summary and analysis.
func (c *heapdumpCmd) analyseAndKeep(pulled *os.File, dst string, meta offline.CaptureMeta, req offline.DumpRequest, taken *offline.TakenDump, stderr io.Writer) (*offline.HeapSummary, *heapdump.Analysis, error) {
	if _, err := pulled.Seek(0, io.SeekStart); err != nil {
		return nil, nil, err
	}
	g, err := heapdump.ReadGraph(pulled)
	if err != nil {
		return nil, nil, fmt.Errorf("the pulled dump: %w", err)
	}
	a, err := g.Analyze(pulled, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("the pulled dump: %w", err)
	}
	sum := offline.NewHeapSummary(meta, a, *c.top)
	sum.DumpSeconds, sum.DumpBytes, sum.GC, sum.Bitmaps, sum.Shrunk = taken.Took.Seconds(), taken.Bytes, req.GC, req.Bitmaps, *c.shrink
	if err := c.keep(pulled, g, dst, stderr); err != nil {
		return nil, nil, err
	}
	if st, err := os.Stat(dst); err == nil {
		sum.FileBytes = st.Size()
	}
	return sum, a, nil
}

// keep writes the pulled dump, whose graph is g, to dst as asked: as it
// is, shrunk, or converted to the standard format (or both).
func (c *heapdumpCmd) keep(pulled *os.File, g *heapdump.Graph, dst string, stderr io.Writer) error {
	if _, err := pulled.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if !*c.shrink && !*c.standard {
		pulled.Close()
		return os.Rename(pulled.Name(), dst)
	}
	return c.transform(pulled, g, dst, stderr)
}

// transform writes src to dst shrunk, converted to the standard format,
// or both, through temporary files in dst's directory; g is src's graph,
// or nil when it was not read.
func (c *heapdumpCmd) transform(src io.ReadSeeker, g *heapdump.Graph, dst string, stderr io.Writer) error {
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	if err := out.Chmod(0o644); err != nil { // CreateTemp makes it 0600
		return err
	}
	var in io.ReadSeeker = src
	if *c.shrink {
		w := out
		if *c.standard {
			if w, err = os.CreateTemp(filepath.Dir(dst), ".shrunk-*.hprof"); err != nil {
				return err
			}
			defer os.Remove(w.Name())
			defer w.Close()
		}
		shrink := heapdump.Shrink
		if g != nil { // src's graph, read already
			shrink = g.Shrink
		}
		st, err := shrink(in, w)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "alloctrack heapdump: shrunk: %d arrays emptied (%d bytes of values), %d duplicate Bitmap buffers left out\n", st.Emptied, st.EmptiedBytes, st.DuplicateBuffers)
		if w != out {
			if _, err := w.Seek(0, io.SeekStart); err != nil {
				return err
			}
			in = w
		}
	}
	if *c.standard {
		if err := hprof.ConvertStandard(in, out, *c.appOnly); err != nil {
			return err
		}
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(out.Name(), dst)
}
