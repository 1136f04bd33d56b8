// Command alloctrack watches what Android apps allocate on the Java heap.
//
// Subcommands:
//
//	serve            the daemon: track apps through adb servers, export Prometheus metrics
//	sim              serve simulated devices and apps (to a real adb server or as one)
//	capture          record one app's allocations for a while into a directory
//	test -- am ...   run an instrumentation suite and record each test's allocations
//	report INPUT...  summarise reports (.alloc files, capture directories); budgets
//	diff BASE NEW    compare two runs per class and site
//	doctor           what will work on each device and app, and why not
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"
)

// errVersionShown ends parsing once --version has printed.
var errVersionShown = errors.New("version shown")

// Exit statuses: the one list, also in the usage text (exitStatuses) and
// docs/offline.md.
const (
	exitOK           = 0
	exitFailure      = 1 // runtime failure, including a bad input file
	exitUsage        = 2 // bad flags or arguments, a malformed budget file, or an --apk file that is no APK
	exitBudget       = 3 // over budget
	exitInsufficient = 4 // an input holds less than a whole run: not judged
	exitUnmatched    = 5 // a budget rule matched nothing (and is not optional)
	// exitTestsFailed: a test failed, errored or crashed, or am's run
	// failed (alloctrack test decides it). Precedence: 4, 6, 3, 5.
	exitTestsFailed = 6
	// exitCannotWork: doctor found something asked for that cannot work
	// (an app with no backend, a failed live check, a device that did not
	// answer, something left on the device).
	exitCannotWork = 7
)

const exitStatuses = "Exit statuses: 0 ok; 1 runtime failure (a device, a file); 2 bad flags, arguments, budget file or --apk file; " +
	"3 over budget; 4 insufficient data: a capture that failed, was interrupted, ran short or holds nothing, not judged " +
	"(--allow-partial, --allow-empty); 5 a budget rule matched nothing (unless optional: true); " +
	"6 tests failed (a test failed, errored or crashed, or the instrumentation run failed); " +
	"7 doctor: something asked for cannot work (an app with no backend, a failed live check, a device that did not answer, files left on it). When several apply: 4, then 6, then 3, then 5."

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args and runs one subcommand, returning the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	// The logger and the commands' own messages write to stderr from
	// several goroutines: one lock for both keeps lines whole (and keeps a
	// test's buffer free of races).
	stderr = &lockedWriter{w: stderr}
	app := kingpin.New("alloctrack", "Watches what Android apps allocate on the Java heap, headless and continuously. "+exitStatuses)
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	// --help prints and asks to terminate; kingpin would then go on parsing
	// and complain that no command was given, so remember that it asked.
	helped := false
	app.Terminate(func(int) {
		// kingpin runs the help flag's action more than once: print it once.
		helped = true
		app.UsageWriter(io.Discard)
	})
	app.HelpFlag.Short('h')

	rep := newReportCmd(app)
	srv := newServeCmd(app)
	sm := newSimCmd(app)
	df := newDiffCmd(app)
	cp := newCaptureCmd(app)
	hd := newHeapdumpCmd(app)
	dr := newDoctorCmd(app)
	ts := newTestCmd(app)
	bl := newBaselineCmd(app)
	// Not app.Version: kingpin would print to the usage writer and then go
	// on to complain that no command was given.
	app.Flag("version", "Show the version and exit.").Action(func(*kingpin.ParseContext) error {
		fmt.Fprintln(stdout, version.Print("alloctrack"))
		return errVersionShown
	}).Bool()

	cmd, err := app.Parse(args)
	if errors.Is(err, errVersionShown) || (helped && len(args) > 0) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack: %s%s (see --help)\n", flagError(app, args, err), didYouMean(app, args, err))
		return exitUsage
	}
	switch cmd {
	case rep.cmd.FullCommand():
		return rep.run(stdout, stderr)
	case srv.cmd.FullCommand():
		return srv.run(stderr)
	case sm.cmd.FullCommand():
		return sm.run(stdout, stderr)
	case df.cmd.FullCommand():
		return df.run(stdout, stderr)
	case cp.cmd.FullCommand():
		return cp.run(stdout, stderr)
	case hd.cmd.FullCommand():
		return hd.run(stderr)
	case dr.cmd.FullCommand():
		return dr.run(stdout, stderr)
	case ts.cmd.FullCommand():
		return ts.run(stdout, stderr)
	case bl.add.FullCommand(), bl.list.FullCommand(), bl.check.FullCommand():
		return bl.run(cmd, stdout, stderr)
	case "":
		// --help already printed.
		return exitOK
	}
	fmt.Fprintf(stderr, "alloctrack: unknown command %q\n", cmd)
	return exitUsage
}

// flagError says which flag a parse error is about: kingpin passes on the
// value's own error (strconv's, time's, units'), which names the value but
// not the flag. The flag is the one whose value the error quotes (or ends
// with), the longest such value when several match.
func flagError(app *kingpin.Application, args []string, err error) string {
	ctx, perr := app.ParseContext(args)
	if perr != nil || ctx == nil {
		return err.Error()
	}
	msg := err.Error()
	var flag *kingpin.FlagClause
	value := ""
	for _, el := range ctx.Elements {
		f, ok := el.Clause.(*kingpin.FlagClause)
		if !ok || el.Value == nil || *el.Value == "" || len(*el.Value) < len(value) {
			continue
		}
		if strings.Contains(msg, strconv.Quote(*el.Value)) || strings.HasSuffix(msg, " "+*el.Value) {
			flag, value = f, *el.Value
		}
	}
	if flag == nil {
		return msg
	}
	why := msg
	if _, ok := errors.AsType[*strconv.NumError](err); ok {
		why = "not a number"
	} else if strings.HasPrefix(msg, "time: ") {
		why = "not a duration (such as 500ms, 10s, 5m or 1h)"
	} else if strings.HasPrefix(msg, "units: ") {
		why = "not a size (such as 64KiB, 256MiB or 1GiB)"
	}
	return fmt.Sprintf("--%s %s: %s", flag.Model().Name, strconv.Quote(value), why)
}

// lockedWriter serialises the writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
