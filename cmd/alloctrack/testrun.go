package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
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
	existing            bool // track the app's processes already running
	log                 *zap.Logger
	amStream            *adb.Stream
	logcatOut, instrOut *os.File
}

// apiShellV2 is the first API level whose adbd runs commands without a
// PTY, with shell protocol v2 (Android 7.0, sheet 1).
const apiShellV2 = 24

// logcatArgs is the logcat command that follows the runner's lines from
// now on, with the options the device's version accepts (sheet 4, 5):
// -T 1 (from Android 5.0) skips what the buffers hold but the last entry;
// 4.4 prints them all (lines of older processes are left out by pid).
// From 7.0 the stamps carry the year and the zone. The log is never
// cleared: other tools read it.
func logcatArgs(api int) []string {
	args := []string{"logcat", "-v", "threadtime"}
	if api >= apiShellV2 {
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
	if s.api >= alloctrack.APIHeapprofd {
		// TODO(issue 34, branch hpd): heapprofd dumps with device times.
		return fail(exitFailure, "%s runs Android 12+ (API %d): per-test figures through heapprofd are not built yet; only DDM devices (API 19-30) are", s.serial, s.api)
	}
	start := time.Now()
	meta := withAppVersion(ctx, s.client, offline.CaptureMeta{Serial: s.serial, Model: s.model, API: s.api, Package: s.pkg}, stderr)
	w, err := offline.NewCaptureWriter(s.out, meta, start)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	if err := s.openRaw(); err != nil {
		return fail(exitFailure, "%v", err)
	}
	defer s.closeRaw()
	attr := pertest.New(pertest.Config{Serial: s.serial, Package: s.pkg, Instrumentation: s.instr, API: s.api, Backend: alloctrack.BackendDDM, Top: s.top})
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
	c, serial, v2 := s.client, s.serial, s.api >= apiShellV2
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

// location is the device's time zone, for logcat stamps without one
// (before Android 7.0); UTC when it cannot be read or is not known here.
func (s *testRunSpec) location(ctx context.Context) *time.Location {
	if s.api >= apiShellV2 {
		return nil // the stamps carry their zone (-v zone)
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
