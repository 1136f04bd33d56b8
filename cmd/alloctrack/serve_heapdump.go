package main

import (
	"context"
	"fmt"
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
	last    *prometheus.GaugeVec
}

func newServeDumper(d *supervisor.Daemon, dir string, timeout time.Duration, reg prometheus.Registerer) (*serveDumper, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--heapdump.dir: %w", err)
	}
	s := &serveDumper{d: d, dir: dir, timeout: timeout,
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "alloctrack_heapdump_duration_seconds",
			Help:    "Heap dumps taken from the web view, from am dumpheap until the dump was complete: how long the app was frozen, at most; by result (ok, failed).",
			Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160, 320},
		}, []string{"result"}),
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "alloctrack_heapdump_last_duration_seconds",
			Help: "The last heap dump of each app, from am dumpheap until the dump was complete (the app's freeze, at most).",
		}, []string{"serial", "package"}),
	}
	reg.MustRegister(s.seconds, s.last)
	return s, nil
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

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
	type target struct {
		server   string
		api, pid int
	}
	var app *target
	for _, dev := range snap.Devices {
		for _, a := range snap.Apps {
			if dev.Serial == serial && a.Serial == serial && a.Package == pkg && a.PID > 0 {
				app = &target{dev.Server, dev.API, a.PID}
			}
		}
	}
	if app == nil {
		return "", fmt.Errorf("%w %q on %q", webview.ErrNoApp, pkg, serial)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	id := unsafeID.ReplaceAllString(fmt.Sprintf("%s-%s-%s", start.UTC().Format("20060102T150405.000"), serial, pkg), "_")
	dir := filepath.Join(s.dir, id)
	result := "failed"
	took := time.Duration(0) // until the dump was complete
	defer func() {
		if result == "failed" {
			took = time.Since(start)
		}
		s.seconds.WithLabelValues(result).Observe(took.Seconds())
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	pulled, err := os.Create(filepath.Join(dir, offline.HeapDumpFile))
	if err != nil {
		return "", err
	}
	defer pulled.Close()
	req := offline.DumpRequest{PID: app.pid, API: app.api, GC: gc && app.api >= offline.APIDumpheapGC, Remote: fmt.Sprintf("/data/local/tmp/alloctrack-%d-%d.hprof", app.pid, start.UnixNano())}
	taken, err := offline.TakeHeapDump(ctx, adbDumpDevice{adb.NewClient(app.server), serial}, req, pulled)
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	took = taken.Took
	s.last.WithLabelValues(serial, pkg).Set(took.Seconds())
	if _, err := pulled.Seek(0, 0); err != nil {
		return "", err
	}
	g, err := heapdump.ReadGraph(pulled)
	if err != nil {
		return "", fmt.Errorf("the pulled dump: %w", err)
	}
	a, err := g.Analyze(pulled, 0)
	if err != nil {
		return "", fmt.Errorf("the pulled dump: %w", err)
	}
	sum := offline.NewHeapSummary(offline.CaptureMeta{Serial: serial, API: app.api, Package: pkg, PID: app.pid}, a, 20)
	sum.Start, sum.DumpSeconds, sum.DumpBytes, sum.FileBytes, sum.GC = start, took.Seconds(), taken.Bytes, taken.Bytes, req.GC
	if err := offline.WriteHeapSummary(dir, sum); err != nil {
		return "", err
	}
	result = "ok"
	return id, nil
}
