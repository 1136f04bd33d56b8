package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	webview "github.com/alloctrack/alloctrack/web"
)

// serveDumper takes the heap dumps the web view asks for: one at a time
// in all (each freezes an app, and pulls a file as large as its heap), by
// am dumpheap through the adb server the app's device is on.
type serveDumper struct {
	d       *supervisor.Daemon
	dir     string
	timeout time.Duration
	one     sync.Mutex // held while a dump is taken
	busy    bool

	seconds *prometheus.HistogramVec
	last    *lastDumps
}

func newServeDumper(d *supervisor.Daemon, dir string, timeout time.Duration, reg prometheus.Registerer) (*serveDumper, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--heapdump.dir: %w", err)
	}
	if err := removePartial(dir); err != nil {
		return nil, fmt.Errorf("--heapdump.dir: dumps cut short: %w", err)
	}
	s := &serveDumper{d: d, dir: dir, timeout: timeout,
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "alloctrack_heapdump_duration_seconds",
			Help:    "Heap dumps taken from the web view, from am dumpheap until the dump was complete: how long the app was frozen, at most; by result (ok, failed).",
			Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160, 320},
		}, []string{"result"}),
		last: newLastDumps(d.Lists),
	}
	reg.MustRegister(s.seconds, s.last)
	return s, nil
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// partialPrefix starts the name of a dump's directory until its summary
// is written: the web view lists and serves only names that start with a
// letter or digit, and a failed dump's directory is removed whole.
const partialPrefix = ".partial-"

// removePartial removes what dumps cut short by a crash left in dir.
func removePartial(dir string) error {
	m, err := filepath.Glob(filepath.Join(dir, partialPrefix+"*"))
	for _, p := range m {
		if e := os.RemoveAll(p); err == nil {
			err = e
		}
	}
	return err
}

// dumpTarget is an app to dump and the adb server its device is on.
type dumpTarget struct {
	serial, pkg, server string
	api, pid            int
}

// take dumps one app's heap into a new capture directory and returns its
// name.
func (s *serveDumper) take(ctx context.Context, serial, pkg string, gc bool) (string, error) {
	s.one.Lock()
	if s.busy {
		s.one.Unlock()
		return "", fmt.Errorf("%w: one at a time", webview.ErrDumpBusy)
	}
	s.busy = true
	s.one.Unlock()
	defer func() {
		s.one.Lock()
		s.busy = false
		s.one.Unlock()
	}()
	snap := s.d.Snapshot()
	for _, dev := range snap.Devices {
		for _, a := range snap.Apps {
			if dev.Serial == serial && a.Serial == serial && a.Package == pkg && a.PID > 0 {
				t := dumpTarget{serial: serial, pkg: pkg, server: dev.Server, api: dev.API, pid: a.PID}
				return s.dump(ctx, adbDumpDevice{adb.NewClient(t.server), serial}, t, gc)
			}
		}
	}
	return "", fmt.Errorf("%w %q on %q", webview.ErrNoApp, pkg, serial)
}

// dump takes t's heap dump through dev into a directory of its own, and
// analyses it. The directory is named as the web view shows it only once
// it is complete; on any failure it is removed.
func (s *serveDumper) dump(ctx context.Context, dev offline.DumpDevice, t dumpTarget, gc bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	id := unsafeID.ReplaceAllString(fmt.Sprintf("%s-%s-%s", start.UTC().Format("20060102T150405.000"), t.serial, t.pkg), "_")
	result := "failed"
	took := time.Duration(0) // until the dump was complete
	defer func() {
		if result == "failed" {
			took = time.Since(start)
		}
		s.seconds.WithLabelValues(result).Observe(took.Seconds())
	}()
	tmp, err := os.MkdirTemp(s.dir, partialPrefix+id+"-")
	if err != nil {
		return "", err
	}
	defer func() {
		if result != "ok" {
			os.RemoveAll(tmp)
		}
	}()
	pulled, err := os.Create(filepath.Join(tmp, offline.HeapDumpFile))
	if err != nil {
		return "", err
	}
	defer pulled.Close()
	req := offline.DumpRequest{PID: t.pid, API: t.api, GC: gc && t.api >= offline.APIDumpheapGC, Remote: fmt.Sprintf("/data/local/tmp/alloctrack-%d-%d.hprof", t.pid, start.UnixNano())}
	taken, err := offline.TakeHeapDump(ctx, dev, req, pulled)
	if err != nil {
		return "", err
	}
	took = taken.Took
	s.last.set(t.serial, t.pkg, took.Seconds())
	a, err := analyzePulled(pulled)
	if err != nil {
		return "", fmt.Errorf("the pulled dump: %w", err)
	}
	sum := offline.NewHeapSummary(offline.CaptureMeta{Serial: t.serial, API: t.api, Package: t.pkg, PID: t.pid}, a, 20)
	sum.Start, sum.DumpSeconds, sum.DumpBytes, sum.FileBytes, sum.GC = start, took.Seconds(), taken.Bytes, taken.Bytes, req.GC
	if err := publishDump(tmp, filepath.Join(s.dir, id), sum); err != nil {
		return "", err
	}
	result = "ok"
	return id, nil
}

// analyzePulled reads and analyses a pulled dump from its start.
func analyzePulled(f *os.File) (*heapdump.Analysis, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	g, err := heapdump.ReadGraph(f)
	if err != nil {
		return nil, err
	}
	return g.Analyze(f, 0)
}

// publishDump writes the summary into the dump's temporary directory tmp
// and gives it its name, dir.
func publishDump(tmp, dir string, sum *offline.HeapSummary) error {
	if err := offline.WriteHeapSummary(tmp, sum); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it 0700
		return err
	}
	return os.Rename(tmp, dir)
}
