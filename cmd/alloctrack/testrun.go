package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/instrument"
)

// testRunSpec is one test run to record: `alloctrack test` (argv set) or
// `capture --tests` (a run someone else starts).
type testRunSpec struct {
	client              *adb.Client
	serial, model       string
	api                 int
	pkg, instr          string   // the app under test; PKG/RUNNER
	argv                []string // am instrument ...; nil: someone else runs it
	out                 string
	cfg                 ddm.Config
	timeout, settle     time.Duration
	top                 int
	junit               string
	pprof               bool
	budget              *offline.Budget
	gate                *gateFlags
	existing            bool   // track the app's processes already running
	shellV2             bool   // adbd lists shell_v2: streams through it
	hpInterval          uint64 // heapprofd's sampling interval (0: 4096)
	log                 *zap.Logger
	amStream            *adb.Stream
	logcatOut, instrOut *os.File
	build               *offline.AppBuild // --apk
}

// apiShellV2 is the first API level whose logcat prints the year and the
// zone (Android 7.0, sheet 4).
const apiShellV2 = 24

// A test run on heapprofd (Android 12+) dumps every 250 ms and reads the
// trace every second (docs/test-runs.md, "heapprofd: times and dumps").
const (
	testDumpInterval = 250 * time.Millisecond
	testReadWindow   = time.Second
)

// logcatArgs is the logcat command that follows the runner's lines from
// now on, with the options the device's version accepts (sheet 4, 5):
// -T 1 (from Android 5.0) skips what the buffers hold but the last entry;
// 4.4 prints them all (lines of older processes are left out by pid).
// From 7.0 the stamps carry the year and the zone; from 12 (heapprofd)
// they are read as seconds and nanoseconds since 1970 (-v epoch,nsec: the
// REALTIME of the log call, the clock the dumps' times are given in). The
// log is never cleared: other tools read it.
func logcatArgs(api int) []string {
	args := []string{"logcat", "-v", "threadtime"}
	switch {
	case api >= alloctrack.APIHeapprofd:
		args = []string{"logcat", "-v", "threadtime,epoch,nsec"}
	case api >= apiShellV2:
		args = append(args, "-v", "year", "-v", "zone")
	}
	if api >= 21 {
		args = append(args, "-T", "1")
	}
	return append(args, "-s", instrument.RunnerTag)
}

// record runs the test run and writes --out; it returns the exit status.
func (s *testRunSpec) record(ctx context.Context, who string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, who+": "+format+"\n", args...)
		return code
	}
	if err := s.readFeatures(ctx); err != nil {
		return fail(exitFailure, "%v", err)
	}
	start := time.Now()
	meta, err := withAppVersion(ctx, s.client, offline.CaptureMeta{Serial: s.serial, Model: s.model, API: s.api, Package: s.pkg}, s.build, stderr)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	w, err := offline.NewCaptureWriter(s.out, meta, start)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	if err := s.openRaw(); err != nil {
		return fail(exitFailure, "%v", err)
	}
	defer s.closeRaw()
	pc := pertest.Config{Serial: s.serial, Package: s.pkg, Instrumentation: s.instr, API: s.api, Backend: alloctrack.BackendDDM, Top: s.top}
	if s.heapprofd() {
		pc.Backend, pc.DumpInterval = alloctrack.BackendHeapprofd, testDumpInterval
	}
	attr := pertest.New(pc)
	tr := s.testRun(ctx, w, attr)
	stop, interrupted, release := s.stopOn(ctx, stderr, who)
	defer release()
	res, runErr := tr.Record(ctx, stop)
	if runErr != nil {
		w.Close(time.Now(), interrupted(), runErr, s.top)
		return fail(exitFailure, "%v", runErr)
	}
	return s.write(w, res, interrupted(), who, stdout, stderr)
}

// testRun wires a RunRecorder to the device.
func (s *testRunSpec) testRun(ctx context.Context, w *offline.CaptureWriter, attr *pertest.Attributor) *offline.RunRecorder {
	c, serial, v2 := s.client, s.serial, s.shellV2
	tr := &offline.RunRecorder{
		Serial: serial, API: s.api, Package: s.pkg,
		Logcat: func(ctx context.Context) (io.ReadCloser, error) {
			return c.StartShell(ctx, serial, v2, logcatArgs(s.api)...)
		},
		TrackJDWP: func(ctx context.Context, fn func([]int)) error { return c.TrackJDWP(ctx, serial, fn) },
		Open: func(ctx context.Context, pid int) (io.ReadWriteCloser, error) {
			return c.OpenJDWP(ctx, serial, pid)
		},
		Abort: func(ctx context.Context) error {
			_, err := c.Shell(ctx, serial, "am", "force-stop", s.pkg)
			return err
		},
		TrackExisting: s.existing,
		Location:      s.location(ctx),
		Config:        s.cfg,
		Settle:        s.settle,
		Attributor:    attr,
		Writer:        w,
		LogcatOut:     s.logcatOut,
		Log:           s.log,
	}
	if s.heapprofd() {
		tr.Heapprofd = &offline.RunHeapprofd{
			Exec: func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
				return c.Exec(ctx, serial, stdin, argv...)
			},
			Window: testReadWindow,
			Config: heapprofd.Config{SamplingInterval: s.hpInterval, DumpInterval: testDumpInterval},
		}
	}
	if s.argv != nil {
		tr.InstrumentOut = s.instrOut
		tr.Instrument = func(ctx context.Context) (io.ReadCloser, error) {
			st, err := c.StartShell(ctx, serial, v2, s.argv...)
			s.amStream = st
			return st, err
		}
	}
	return tr
}

// heapprofd tells whether the run's processes are profiled with
// heapprofd: on Android 12+, where DDM's tracker does not answer.
func (s *testRunSpec) heapprofd() bool { return s.api >= alloctrack.APIHeapprofd }

// readFeatures asks adbd whether it speaks shell protocol v2 (feature
// shell_v2), for the run's streams: asked, not guessed from the version.
func (s *testRunSpec) readFeatures(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	feats, err := s.client.Features(fctx, s.serial)
	if err != nil {
		return fmt.Errorf("asking adbd of %s for its features: %w", s.serial, err)
	}
	s.shellV2 = slices.Contains(feats, "shell_v2")
	return nil
}

// location is the device's time zone, for logcat stamps without one
// (before Android 7.0); UTC when it cannot be read or is not known here.
func (s *testRunSpec) location(ctx context.Context) *time.Location {
	if s.api >= apiShellV2 {
		return nil // the stamps carry their zone (-v zone), or are seconds (-v epoch)
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	tz, err := s.client.Prop(pctx, s.serial, "persist.sys.timezone")
	if err != nil {
		s.log.Warn("device time zone not read; logcat times taken as UTC", zap.Error(err))
		return nil
	}
	if tz == "" {
		return nil // none set: Android keeps GMT
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		s.log.Warn("device time zone not known here; logcat times taken as UTC", zap.String("zone", tz), zap.Error(err))
		return nil
	}
	return loc
}

// openRaw creates logcat.txt and, when we run am, instrument.txt.
func (s *testRunSpec) openRaw() error {
	var err error
	if s.logcatOut, err = os.Create(filepath.Join(s.out, "logcat.txt")); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	if s.argv != nil {
		if s.instrOut, err = os.Create(filepath.Join(s.out, "instrument.txt")); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
	}
	return nil
}

func (s *testRunSpec) closeRaw() {
	for _, f := range []*os.File{s.logcatOut, s.instrOut} {
		if f != nil {
			f.Close()
		}
	}
}

// timeoutFlag is the flag that bounds the run: capture's --duration, or
// test's --timeout.
func (s *testRunSpec) timeoutFlag() string {
	if s.argv == nil {
		return "--duration"
	}
	return "--timeout"
}

// stopOn returns the channel that stops the run: --timeout, or Ctrl-C
// once (twice: at once, tracking still turned off).
func (s *testRunSpec) stopOn(ctx context.Context, stderr io.Writer, who string) (<-chan struct{}, func() bool, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	var interrupted bool
	done := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	timer := time.NewTimer(s.timeout)
	go func() {
		defer close(done)
		select {
		case <-timer.C:
			fmt.Fprintf(stderr, "%s: the run has not finished after %s %v; reading what is left and stopping it\n", who, s.timeoutFlag(), s.timeout)
		case <-sigs:
			interrupted = true
			fmt.Fprintf(stderr, "\n%s: interrupted; reading what is left and turning tracking off\n", who)
		case <-ctx.Done():
			return
		}
		close(stop)
		<-ctx.Done()
	}()
	return stop, func() bool { return interrupted }, func() {
		cancel()
		<-done
		timer.Stop()
		signal.Stop(sigs)
	}
}

// write writes what the run gave into --out and says how it ended.
func (s *testRunSpec) write(w *offline.CaptureWriter, res *offline.RunRecord, interrupted bool, who string, stdout, stderr io.Writer) int {
	run := res.Run
	if err := offline.WriteTests(s.out, run); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", who, err)
		return exitFailure
	}
	if s.amStream != nil {
		if e := strings.TrimSpace(string(s.amStream.Stderr())); e != "" {
			fmt.Fprintf(stderr, "%s: am instrument said on stderr: %s\n", who, e)
		}
	}
	for _, n := range res.Notes {
		fmt.Fprintf(stderr, "%s: %s\n", who, n)
	}
	ts := offline.SummarizeTests(run)
	w.SetTests(ts)
	why := s.insufficient(res)
	var runErr error
	if why != "" {
		runErr = errors.New(why)
	}
	sum, err := w.Close(time.Now(), interrupted, runErr, s.top)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", who, err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "%s: %d tests (%d passed, %d failed, %d errored, %d crashed, %d ignored, %d partial), %d allocations, %d bytes in %.1fs; pids %s\n",
		s.out, ts.Total, ts.Passed, ts.Failed, ts.Errored, ts.Crashed, ts.Ignored, ts.Partial, sum.Allocations, sum.Bytes, sum.DurationSeconds, joinInts(res.Tracked))
	if len(res.Tracked) == 0 && ts.Total > 0 {
		fmt.Fprintf(stderr, "%s: no process of %s was tracked: is the app built debuggable (in the device's JDWP list)? The tests have no figures\n", who, s.pkg)
	}
	for _, p := range run.Problems {
		fmt.Fprintf(stderr, "%s: %s\n", who, p)
	}
	if !s.testOutputs(run, who, stderr) {
		return exitFailure
	}
	return s.exitStatus(res, why, who, stderr)
}
