// Command alloctrack watches what Android apps allocate on the Java heap.
//
// Subcommands:
//
//	report FILE...   summarise saved allocation reports (.alloc / REAL payloads)
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kingpin/v2"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // runtime failure, including a bad input file
	exitUsage   = 2 // bad flags or arguments
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args and runs one subcommand, returning the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	app := kingpin.New("alloctrack", "Watches what Android apps allocate on the Java heap, headless and continuously.")
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	app.Terminate(nil)
	app.HelpFlag.Short('h')

	rep := newReportCmd(app)

	cmd, err := app.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack: %v (see --help)\n", err)
		return exitUsage
	}
	switch cmd {
	case rep.cmd.FullCommand():
		return rep.run(stdout, stderr)
	case "":
		// --help or --version already printed.
		return exitOK
	}
	fmt.Fprintf(stderr, "alloctrack: unknown command %q\n", cmd)
	return exitUsage
}
