// Command alloctrack watches what Android apps allocate on the Java heap.
//
// Subcommands:
//
//	serve            the daemon: track apps through adb servers, export Prometheus metrics
//	sim              serve simulated devices and apps (to a real adb server or as one)
//	capture          record one app's allocations for a while into a directory
//	report INPUT...  summarise reports (.alloc files, capture directories); budgets
//	diff BASE NEW    compare two runs per class and site
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"
)

// errVersionShown ends parsing once --version has printed.
var errVersionShown = errors.New("version shown")

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // runtime failure, including a bad input file
	exitUsage   = 2 // bad flags or arguments, or a malformed budget file
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args and runs one subcommand, returning the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	app := kingpin.New("alloctrack", "Watches what Android apps allocate on the Java heap, headless and continuously.")
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
		fmt.Fprintf(stderr, "alloctrack: %v (see --help)\n", err)
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
	case "":
		// --help already printed.
		return exitOK
	}
	fmt.Fprintf(stderr, "alloctrack: unknown command %q\n", cmd)
	return exitUsage
}
