package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/doctor"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// liveCheck is what a short run of a backend measured.
type liveCheck struct {
	Backend string  `json:"backend"`
	OK      bool    `json:"ok"`
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
	// DDM: records in the report and the REAL round trip.
	Records int64   `json:"records,omitempty"`
	RTTMs   float64 `json:"rtt_ms,omitempty"`
	// TrackerOff: asked again after, the VM said its tracker is off.
	TrackerOff *bool `json:"tracker_off,omitempty"`
	// heapprofd: sessions, trace bytes, dumps and samples, and the app's
	// state at the end.
	Sessions   uint64 `json:"sessions,omitempty"`
	TraceBytes uint64 `json:"trace_bytes,omitempty"`
	Dumps      uint64 `json:"dumps,omitempty"`
	Samples    uint64 `json:"samples,omitempty"`
	State      string `json:"state,omitempty"`
	Note       string `json:"note,omitempty"`
	// heap dump: bytes of the dump file on the device.
	DumpBytes int64 `json:"dump_bytes,omitempty"`
}

// ddmCheck tracks one window of the app and stops: the report's records
// and its round trip. Then it asks the VM whether its tracker is off.
func ddmCheck(ctx context.Context, client *adb.Client, d doctor.Device, pid int, cfg ddm.Config) liveCheck {
	lc := liveCheck{Backend: doctor.BackendDDM}
	start := time.Now()
	stop := make(chan struct{})
	got := false
	cfg.Window, cfg.MinWindow, cfg.RTTFloor = time.Second, time.Second, 1
	s := &ddm.Session{
		Serial: d.Serial, PID: pid, API: d.API,
		Open: func(ctx context.Context) (io.ReadWriteCloser, error) { return client.OpenJDWP(ctx, d.Serial, pid) },
		Bind: func(string) (*alloctrack.Counters, *alloctrack.AppStats) {
			return alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 1, TopSites: 1}), alloctrack.NewAppStats(d.Serial, pid)
		},
		OnWindow: func(c *ddm.Cycle, w *alloctrack.Window) {
			if got || w == nil {
				return
			}
			got = true
			lc.Records, lc.RTTMs = int64(w.Total.Allocations), float64(c.RTT.Microseconds())/1000
			close(stop)
		},
		Stop:   stop,
		Config: cfg,
	}
	err := s.Run(ctx)
	lc.Seconds = time.Since(start).Seconds()
	switch {
	case err != nil:
		lc.Error = err.Error()
	case !got:
		lc.Error = "no report came"
	}
	_, on, herr := heldCheck(ctx, client, d, pid, cfg)
	if herr == nil {
		off := !on
		lc.TrackerOff = &off
	}
	lc.OK = lc.Error == "" && lc.TrackerOff != nil && *lc.TrackerOff
	if lc.Error == "" && !lc.OK {
		lc.Error = "the tracker was left on"
	}
	return lc
}

// heapprofdCheck runs one heapprofd session until its first dump.
func heapprofdCheck(ctx context.Context, client *adb.Client, d doctor.Device, a doctor.App, length, timeout time.Duration) liveCheck {
	lc := liveCheck{Backend: doctor.BackendHeapprofd}
	start := time.Now()
	dir, err := os.MkdirTemp("", "alloctrack-doctor-")
	if err != nil {
		lc.Error = err.Error()
		return lc
	}
	defer os.RemoveAll(dir)
	w, err := offline.NewCaptureWriter(dir+"/c", offline.CaptureMeta{Serial: d.Serial, API: d.API, Package: a.Package, PID: a.PID}, start)
	if err != nil {
		lc.Error = err.Error()
		return lc
	}
	w.SetPackage(a.Package)
	stop := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(stop) }) }
	rec := &offline.HeapprofdRecorder{
		Serial: d.Serial, PID: a.PID, API: d.API, Window: time.Second,
		Exec: func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
			return client.Exec(ctx, d.Serial, stdin, argv...)
		},
		Progress: func(st *alloctrack.AppStats) {
			if st.Snapshot().Heapprofd.Dumps > 0 {
				end()
			}
		},
	}
	// An app that allocates nothing gives no dump (fact 6): stop after
	// length, its session having run.
	timer := time.AfterFunc(length, end)
	defer timer.Stop()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = rec.Record(rctx, stop, w)
	w.Close(time.Now(), false, err, 1)
	lc.Seconds = time.Since(start).Seconds()
	if rec.Stats != nil {
		st := rec.Stats.Snapshot().Heapprofd
		lc.Dumps, lc.Samples, lc.Sessions, lc.TraceBytes = st.Dumps, st.Samples, st.Sessions, st.TraceBytes
		lc.State, _ = rec.Stats.State()
	}
	switch {
	case err != nil:
		lc.Error = err.Error()
	case lc.Sessions == 0 || lc.TraceBytes == 0:
		lc.Error = "the heapprofd session wrote nothing"
	case lc.Samples == 0:
		lc.Note = "no sample: the app allocated nothing during the check, or another profiler holds it (docs/heapprofd-devices.md facts 6 and 13)"
	}
	lc.OK = lc.Error == ""
	return lc
}

// heapdumpCheck takes one heap dump (am dumpheap), pulls it into a
// temporary file and removes it on both sides.
func heapdumpCheck(ctx context.Context, client *adb.Client, d doctor.Device, pid int, timeout time.Duration) liveCheck {
	lc := liveCheck{Backend: doctor.BackendHeapdump}
	start := time.Now()
	f, err := os.CreateTemp("", "alloctrack-doctor-*.hprof")
	if err != nil {
		lc.Error = err.Error()
		return lc
	}
	defer os.Remove(f.Name())
	defer f.Close()
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := offline.DumpRequest{PID: pid, API: d.API, Remote: fmt.Sprintf("/data/local/tmp/alloctrack-doctor-%d-%d.hprof", pid, time.Now().UnixNano())}
	_, err = offline.TakeHeapDump(dctx, adbDumpDevice{client, d.Serial}, req, f)
	lc.Seconds = time.Since(start).Seconds()
	if err != nil {
		lc.Error = err.Error()
		return lc
	}
	if st, err := f.Stat(); err == nil {
		lc.DumpBytes = st.Size()
	}
	lc.OK = lc.DumpBytes > 0
	if !lc.OK {
		lc.Error = "the dump is empty"
	}
	return lc
}

// leftBehind lists what alloctrack left in the directories it writes on
// the device (/data/local/tmp; the trace directory from Android 9).
func leftBehind(ctx context.Context, client *adb.Client, d doctor.Device) ([]string, error) {
	dirs := []string{"/data/local/tmp"}
	if d.API >= 28 {
		dirs = append(dirs, heapprofd.TraceDir)
	}
	var left []string
	for _, dir := range dirs {
		out, errOut, code, err := client.Run(ctx, d.Serial, nil, "ls", dir)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit status %d: %s", code, strings.TrimSpace(string(errOut)+string(out)))
		}
		if err != nil {
			return nil, fmt.Errorf("ls %s: %w", dir, err)
		}
		for _, name := range strings.Fields(string(out)) {
			if strings.HasPrefix(name, heapprofd.Prefix) {
				left = append(left, dir+"/"+name)
			}
		}
	}
	return left, nil
}
