package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

type captureCmd struct {
	session  *sessionFlags
	cmd      *kingpin.CmdClause
	log      *logFlags
	adbAddr  *string
	serial   *string
	pkg      *string
	pid      *int
	duration *time.Duration
	wait     *time.Duration
	out      *string
	top      *int
	budget   *string
	gate     *gateFlags
	tests    *bool
	testRun  *testRunFlags
}

func newCaptureCmd(app *kingpin.Application) *captureCmd {
	c := &captureCmd{cmd: app.Command("capture", "Record one app's allocations for a while: each window's report as <n>.alloc, then summary.json and profile.pb.gz, in a directory.")}
	f := c.cmd.Flag
	c.log = addLogFlags(c.cmd)
	c.session = addSessionFlags(c.cmd)
	c.adbAddr = f("adb.address", "adb server address host:port. Default: $ADB_SERVER_SOCKET (tcp:host:port), $ANDROID_ADB_SERVER_PORT, 127.0.0.1:5037.").String()
	c.serial = f("serial", "Device serial (as `adb devices` lists it); may be left out when only one device is attached.").String()
	c.pkg = f("package", "App to record, by package (process) name.").String()
	c.pid = f("pid", "App to record, by process id (instead of --package).").Int()
	c.duration = f("duration", "How long to record.").Default("30s").Duration()
	c.wait = waitFlag(c.cmd)
	c.out = f("out", "Directory to write into (created; must not hold a capture already).").Short('o').Required().String()
	c.top = f("top", "Classes and sites listed in summary.json.").Default("20").Int()
	c.budget = f("budget", "Check the capture against a budget file (YAML); exit status 3 if it is exceeded, 4 if the capture holds less than asked, 5 if a rule matched nothing.").String()
	c.gate = addGateFlags(c.cmd)
	c.tests = f("tests", "Record an instrumentation run someone else starts, per test (--package: the app under test): its runner's logcat lines and every fresh process of the app, until the run finished or --duration; tests.json, junit.xml, logcat.txt. Exit status 6 when a test failed.").Bool()
	c.testRun = addTestRunFlags(c.cmd, true)
	return c
}

func isTerminal(w io.Writer) bool {
	if l, ok := w.(*lockedWriter); ok {
		w = l.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (c *captureCmd) run(stdout, stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "alloctrack capture: "+format+"\n", args...)
		return code
	}
	if msg := c.check(); msg != "" {
		return fail(exitUsage, "%s", msg)
	}
	if *c.tests {
		return c.runTests(stdout, stderr)
	}
	var bud *offline.Budget
	if *c.budget != "" {
		var err error
		if bud, err = offline.ReadBudget(*c.budget); err != nil {
			return fail(exitUsage, "%v", err)
		}
	}
	build, err := readAppBuild(*c.testRun.apk)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	log, _, err := c.log.newLogger(stderr)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	defer log.Sync()

	addr := cmp.Or(*c.adbAddr, adb.DefaultAddress())
	client := adb.NewClient(addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serial, model, api, pid, code, msg := c.lookup(ctx, client, addr, stderr)
	if code != exitOK {
		return fail(code, "%s", msg)
	}
	start := time.Now()
	meta := offline.CaptureMeta{Serial: serial, Model: model, API: api, Package: *c.pkg, PID: pid}
	if meta, err = withAppVersion(ctx, client, meta, build, stderr); err != nil {
		return fail(exitFailure, "%v", err)
	}
	w, err := offline.NewCaptureWriter(*c.out, meta, start)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	w.SetRequested(*c.duration)
	stop, interrupted, release := c.stopOn(ctx, cancel, stderr)
	defer release()
	rec, msg := c.recorder(ctx, client, meta, w, log, c.progress(stderr, start))
	if rec == nil {
		return fail(exitFailure, "%s", msg)
	}
	runErr := rec.Record(ctx, stop, w)
	if isTerminal(stderr) {
		fmt.Fprintln(stderr)
	}
	sum, err := w.Close(time.Now(), interrupted(), runErr, *c.top)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	if code, msg := c.outcome(rec, sum, runErr, serial, pid, api, stdout); code != exitOK {
		return fail(code, "%s", msg)
	} else if msg != "" {
		fmt.Fprintf(stderr, "alloctrack capture: %s\n", msg)
	}
	return checkCaptureBudget(stderr, *c.out, bud, c.gate)
}

// check says what is wrong with capture's flags, "" if nothing.
func (c *captureCmd) check() string {
	switch {
	case (*c.pkg == "") == (*c.pid == 0):
		return "give exactly one of --package and --pid"
	case *c.pid < 0:
		return fmt.Sprintf("--pid %d is not a process id", *c.pid)
	case *c.pkg != "" && adb.CheckName(*c.pkg) != nil:
		return fmt.Sprintf("--package: %v", adb.CheckName(*c.pkg))
	case *c.testRun.apk != "" && *c.pkg == "":
		return "--apk names the app's build: give --package (not --pid)"
	case *c.duration <= 0:
		return "--duration must be positive"
	case *c.top < 1:
		return "--top must be at least 1"
	}
	if err := c.session.validate(); err != nil {
		return err.Error()
	}
	return ""
}

// stopOn returns the channel that ends the capture: --duration, or
// Ctrl-C once (finish the window under way, turn tracking off, write what
// was collected); twice cancels at once (tracking is still turned off).
func (c *captureCmd) stopOn(ctx context.Context, cancel context.CancelFunc, stderr io.Writer) (<-chan struct{}, func() bool, func()) {
	stop := make(chan struct{})
	var interrupted atomic.Bool
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	timer := time.NewTimer(*c.duration)
	go func() {
		select {
		case <-timer.C:
		case <-sigs:
			interrupted.Store(true)
			fmt.Fprintln(stderr, "\nalloctrack capture: interrupted; fetching the last window and turning tracking off (Ctrl-C again to stop at once)")
		case <-ctx.Done():
			return
		}
		close(stop)
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return stop, interrupted.Load, func() { timer.Stop(); signal.Stop(sigs) }
}

// progress returns how the capture shows its progress on a terminal, nil
// elsewhere.
func (c *captureCmd) progress(stderr io.Writer, start time.Time) func(string) {
	if !isTerminal(stderr) {
		return nil
	}
	return func(s string) { fmt.Fprintf(stderr, "\r%s, %s", s, time.Since(start).Round(time.Second)) }
}

// recorder is the capture's backend for the device: heapprofd or DDM; nil
// and why when heapprofd cannot start.
func (c *captureCmd) recorder(ctx context.Context, client *adb.Client, meta offline.CaptureMeta, w *offline.CaptureWriter, log *zap.Logger, progress func(string)) (offline.Recorder, string) {
	serial, pid, api := meta.Serial, meta.PID, meta.API
	if c.session.heapprofdFor(api) {
		hp, msg := c.heapprofdRecorder(ctx, client, serial, pid, api, w, log, progress)
		if hp == nil {
			return nil, msg
		}
		return hp, ""
	}
	dr := &offline.DDMRecorder{
		Serial: serial, PID: pid, API: api, Package: *c.pkg,
		Open:   func(ctx context.Context) (io.ReadWriteCloser, error) { return client.OpenJDWP(ctx, serial, pid) },
		Config: c.session.ddmConfig(),
		Log:    log,
	}
	if progress != nil {
		dr.Progress = func(w *offline.CaptureWriter) {
			t := w.Total()
			progress(fmt.Sprintf("%d windows, %d allocations, %d bytes", w.Windows(), t.Allocations, t.Bytes))
		}
	}
	return dr, ""
}

// outcome prints what a capture recorded and says how it ended: a
// non-zero exit status with its message, or a warning to print.
func (c *captureCmd) outcome(rec offline.Recorder, sum *offline.Summary, runErr error, serial string, pid, api int, stdout io.Writer) (int, string) {
	switch r := rec.(type) {
	case *offline.HeapprofdRecorder:
		var st alloctrack.HeapprofdStatus
		if r.Stats != nil {
			st = r.Stats.Snapshot().Heapprofd
		}
		fmt.Fprintf(stdout, "%s: %d heapprofd dumps, %d samples (%d bytes), about %d allocations and %d bytes (estimates) in %.1fs\n",
			*c.out, st.Dumps, st.Samples, st.SampledBytes, sum.Allocations, sum.Bytes, sum.DurationSeconds)
		switch {
		case errors.Is(runErr, alloctrack.ErrPerfettoRefused):
			return exitFailure, fmt.Sprintf("the tracing service of %s refused the perfetto session: it runs 5 sessions of adb shell's uid at once (Android Studio's and other people's count too); stop one and retry (%v)", serial, runErr)
		case runErr != nil:
			return exitFailure, runErr.Error()
		case r.Rejected && st.Dumps == 0:
			return exitFailure, fmt.Sprintf("another profiler held pid %d on %s the whole time (heapprofd rejected our session): stop it and retry", pid, serial)
		case st.Dumps == 0:
			return exitOK, fmt.Sprintf("heapprofd wrote no sample of pid %d on %s: the app allocated nothing it sampled, or it is neither debuggable nor profileable (Android 12+)", pid, serial)
		}
		return exitOK, ""
	case *offline.DDMRecorder:
		fmt.Fprintf(stdout, "%s: %d windows (%d overflowed), %d allocations, %d bytes in %.1fs\n",
			*c.out, sum.Windows, sum.Overflowed, sum.Allocations, sum.Bytes, sum.DurationSeconds)
		switch {
		case runErr == nil:
			return exitOK, ""
		case errors.Is(runErr, alloctrack.ErrFiltered):
			return exitFailure, fmt.Sprintf("pid %d on %s is %q by its VM's own account, not %s", pid, serial, r.Named, *c.pkg)
		case errors.Is(runErr, alloctrack.ErrHeld):
			return exitFailure, fmt.Sprintf("another debugger (Android Studio?) holds pid %d on %s: close it and retry", pid, serial)
		case errors.Is(runErr, alloctrack.ErrWaiting):
			return exitFailure, fmt.Sprintf("pid %d on %s waits for a debugger (started with \"wait for debugger\"), and DDM does not count as one: attach a debugger or start the app without waiting, then retry", pid, serial)
		case errors.Is(runErr, alloctrack.ErrUnsupported):
			return exitFailure, fmt.Sprintf("pid %d on %s does not answer the allocation tracker (Android 12 and later, API %d): allocation tracking over DDM is not available there; try --backend heapprofd", pid, serial, api)
		case errors.Is(runErr, adb.ErrServiceClosed):
			return exitFailure, fmt.Sprintf("the device refused jdwp:%d on %s: the app died, is not debuggable, or is frozen", pid, serial)
		}
		return exitFailure, runErr.Error()
	}
	return exitFailure, fmt.Sprintf("capture: no outcome for %T", rec)
}

// lookup finds the device and the process to record: the one device or
// --serial's, and --pid or the debuggable process of --package. A non-zero
// code comes with a message.
func (c *captureCmd) lookup(ctx context.Context, client *adb.Client, addr string, stderr io.Writer) (serial, model string, api, pid, code int, msg string) {
	return lookupWaiting(ctx, *c.wait, func() (string, string, int, int, int, string) {
		return lookupApp(ctx, client, addr, *c.serial, *c.pkg, *c.pid, c.session.ddmConfig(), stderr)
	})
}

// lookupRetry is how long lookupWaiting waits between tries.
const lookupRetry = 250 * time.Millisecond

// waitFlag is --wait, of the commands that look an app up.
func waitFlag(cmd *kingpin.CmdClause) *time.Duration {
	return cmd.Flag("wait", "Keep trying to reach the adb server and find the device and the app for up to this long, for a job that starts them just before (0: try once).").Default("0s").Duration()
}

// lookupWaiting runs lookup until it finds the app, fails for a reason
// trying again cannot change (a usage error), or wait has passed; the last
// try's outcome is returned.
func lookupWaiting(ctx context.Context, wait time.Duration, lookup func() (string, string, int, int, int, string)) (serial, model string, api, pid, code int, msg string) {
	deadline := time.Now().Add(wait)
	for {
		serial, model, api, pid, code, msg = lookup()
		if code != exitFailure || !time.Now().Before(deadline) {
			return serial, model, api, pid, code, msg
		}
		select {
		case <-ctx.Done():
			return serial, model, api, pid, code, msg
		case <-time.After(lookupRetry):
		}
	}
}

// lookupApp finds the device (serial, or the only one attached) and the
// debuggable app on it (by package, or pid), as capture does.
func lookupApp(ctx context.Context, client *adb.Client, addr, wantSerial, pkg string, wantPID int, cfg ddm.Config, stderr io.Writer) (serial, model string, api, pid, code int, msg string) {
	lookup, lcancel := context.WithTimeout(ctx, 2*cfg.RequestTimeout)
	defer lcancel()
	serial, model, api, code, msg = lookupDevice(lookup, client, addr, wantSerial)
	if code != exitOK {
		return "", "", 0, 0, code, msg
	}
	// The process: the device's JDWP list says which pids can be tracked;
	// with --package the shell narrows them to the processes of that name
	// and each VM's own HELO/APNM name decides.
	jdwpPIDs, msg := jdwpList(lookup, client, serial)
	if msg != "" {
		return "", "", 0, 0, exitFailure, msg
	}
	pid = wantPID
	if pid == 0 {
		pid, code, msg = findApp(ctx, client, serial, pkg, api, jdwpPIDs, cfg, stderr)
		return serial, model, api, pid, code, msg
	}
	if !slices.Contains(jdwpPIDs, pid) {
		return "", "", 0, 0, exitFailure, fmt.Sprintf("pid %d on %s is not a debuggable process (not in the device's JDWP list; is the app built debuggable?)", pid, serial)
	}
	return serial, model, api, pid, exitOK, ""
}

// lookupDevice finds the device (wantSerial, or the only one attached)
// and its API level. A non-zero code comes with a message.
func lookupDevice(lookup context.Context, client *adb.Client, addr, wantSerial string) (serial, model string, api, code int, msg string) {
	devs, err := client.Devices(lookup)
	if err != nil {
		return "", "", 0, exitFailure, fmt.Sprintf("listing devices at the adb server %s: %v", addr, err)
	}
	var serials []string
	for _, d := range devs {
		serials = append(serials, d.Serial)
		if d.Serial == wantSerial {
			model = d.Model
		}
	}
	serial = wantSerial
	switch {
	case serial == "" && len(devs) == 1:
		serial, model = devs[0].Serial, devs[0].Model
	case serial == "":
		return "", "", 0, exitUsage, fmt.Sprintf("%d devices are attached (%s): choose one with --serial", len(devs), strings.Join(serials, ", "))
	case !slices.Contains(serials, serial):
		return "", "", 0, exitFailure, fmt.Sprintf("no such device %q at the adb server %s (attached: %s)", serial, addr, strings.Join(serials, ", "))
	}
	// The API level picks the backend and how the app is asked: a failed
	// read is no level (it once ran Android 12 with DDM as API 0).
	v, err := client.Prop(lookup, serial, "ro.build.version.sdk")
	if err == nil {
		api, err = strconv.Atoi(v)
	}
	if err != nil || api <= 0 {
		return "", "", 0, exitFailure, fmt.Sprintf("reading the API level of %s (getprop ro.build.version.sdk gave %q): %v; nothing was captured, try again (a slow link: raise --request.timeout)", serial, v, err)
	}
	return serial, model, api, exitOK, ""
}

// jdwpList is the device's first JDWP list (track-jdwp), or a message
// saying why there is none.
func jdwpList(lookup context.Context, client *adb.Client, serial string) ([]int, string) {
	var pids []int
	tctx, tcancel := context.WithCancel(lookup)
	terr := client.TrackJDWP(tctx, serial, func(p []int) {
		pids = p
		tcancel() // the first list is all we need
	})
	tcancel()
	if pids == nil && lookup.Err() != nil {
		return nil, fmt.Sprintf("listing debuggable processes on %s: no answer from the adb server (%v)", serial, terr)
	}
	return pids, ""
}

// checkCaptureBudget checks the capture in dir against bud (nil: none).
func checkCaptureBudget(stderr io.Writer, dir string, bud *offline.Budget, gate *gateFlags) int {
	if bud == nil {
		return exitOK
	}
	in, err := offline.ReadInput(dir)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack capture: %v\n", err)
		return exitFailure
	}
	if !gate.admit(stderr, "alloctrack capture", in.Shortfall()) {
		return exitInsufficient
	}
	t := alloctrack.NewTally()
	if err := in.AddTo(t); err != nil {
		fmt.Fprintf(stderr, "alloctrack capture: %v\n", err)
		return exitFailure
	}
	return checkBudget(stderr, "alloctrack capture", bud, t, in.Duration)
}

// findApp picks the process of app pkg to record: the shell lists the
// pids of that name (pidof, or ps where there is no pidof), the JDWP list
// keeps the debuggable ones, and when several are left each VM is asked
// its name (HELO, APNM) and the first, by pid, that calls itself pkg is
// taken. When several pids matched it says on w which was taken and why.
// A non-zero code comes with a message.
func findApp(ctx context.Context, client *adb.Client, serial, pkg string, api int, jdwpPIDs []int, cfg ddm.Config, w io.Writer) (pid, code int, msg string) {
	sctx, cancel := context.WithTimeout(ctx, 2*cfg.RequestTimeout)
	pids, err := client.PIDsOf(sctx, serial, pkg, api)
	cancel()
	if err != nil {
		return 0, exitFailure, fmt.Sprintf("looking up %s on %s: %v", pkg, serial, err)
	}
	if len(pids) == 0 {
		return 0, exitFailure, fmt.Sprintf("app %s is not running on %s", pkg, serial)
	}
	slices.Sort(pids)
	var debuggable []int
	for _, p := range pids {
		if slices.Contains(jdwpPIDs, p) {
			debuggable = append(debuggable, p)
		}
	}
	switch len(debuggable) {
	case 0:
		return 0, exitFailure, fmt.Sprintf("app %s runs on %s as pid %s, which is not a debuggable process (not in the device's JDWP list; is the app built debuggable?)", pkg, serial, joinInts(pids))
	case 1:
		if len(pids) > 1 {
			fmt.Fprintf(w, "alloctrack capture: %s runs on %s as pids %s; recording pid %d, the one in the device's JDWP list\n", pkg, serial, joinInts(pids), debuggable[0])
		}
		return debuggable[0], exitOK, ""
	}
	// Several debuggable processes of that name: ask each VM its name.
	var notes []string
	for _, p := range debuggable {
		name, err := vmName(ctx, client, serial, p, api, cfg)
		switch {
		case err != nil:
			notes = append(notes, fmt.Sprintf("pid %d: %v", p, err))
		case name != pkg:
			notes = append(notes, fmt.Sprintf("pid %d calls itself %q", p, name))
		default:
			fmt.Fprintf(w, "alloctrack capture: %s runs on %s as debuggable pids %s; recording pid %d, whose VM calls itself %s%s\n",
				pkg, serial, joinInts(debuggable), p, pkg, strings.Join(append([]string{""}, notes...), "; "))
			return p, exitOK, ""
		}
	}
	return 0, exitFailure, fmt.Sprintf("app %s runs on %s as debuggable pids %s, but none could be confirmed by its VM: %s", pkg, serial, joinInts(debuggable), strings.Join(notes, "; "))
}

// vmName asks the VM of pid its app name (HELO, or APNM while it is not
// yet named) and leaves again before anything is tracked.
func vmName(ctx context.Context, client *adb.Client, serial string, pid, api int, cfg ddm.Config) (string, error) {
	var name string
	s := &ddm.Session{
		Serial: serial, PID: pid, API: api,
		Open:   func(ctx context.Context) (io.ReadWriteCloser, error) { return client.OpenJDWP(ctx, serial, pid) },
		Accept: func(app string) bool { name = app; return false },
		Config: cfg,
	}
	err := s.Run(ctx)
	switch {
	case errors.Is(err, alloctrack.ErrFiltered):
		return name, nil
	case errors.Is(err, alloctrack.ErrHeld):
		return "", errors.New("another debugger holds it")
	case errors.Is(err, alloctrack.ErrWaiting):
		return "", errors.New("it waits for a debugger")
	case err == nil:
		return "", ctx.Err()
	}
	return "", err
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// heapprofdRecorder names the app when only its pid was given and returns
// the recorder of a heapprofd capture, or nil and why not.
func (c *captureCmd) heapprofdRecorder(ctx context.Context, client *adb.Client, serial string, pid, api int, w *offline.CaptureWriter,
	log *zap.Logger, progress func(string)) (*offline.HeapprofdRecorder, string) {
	name := *c.pkg
	if name == "" {
		nctx, ncancel := context.WithTimeout(ctx, *c.session.requestTimeout)
		n, err := client.ProcessName(nctx, serial, pid, api)
		ncancel()
		if err != nil || n == "" {
			return nil, fmt.Sprintf("naming pid %d on %s from its process list: %v", pid, serial, err)
		}
		name = n
	}
	w.SetPackage(name)
	rec := &offline.HeapprofdRecorder{
		Serial: serial, PID: pid, API: api, Window: *c.session.window,
		Exec: func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
			return client.Exec(ctx, serial, stdin, argv...)
		},
		Config: heapprofd.Config{SamplingInterval: *c.session.hpInterval},
		Log:    log,
	}
	if progress != nil {
		rec.Progress = func(stats *alloctrack.AppStats) {
			st := stats.Snapshot().Heapprofd
			progress(fmt.Sprintf("%d dumps, %d samples, %d sampled bytes", st.Dumps, st.Samples, st.SampledBytes))
		}
	}
	return rec, ""
}
