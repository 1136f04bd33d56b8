package main

import (
	"context"
	"fmt"
	"io"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// baselineCmd is `alloctrack baseline add|list|check`: the baseline
// store (docs/gates.md).
type baselineCmd struct {
	cmd, add, list, check *kingpin.CmdClause
	store                 *string
	keep                  *int
	runs                  *[]string
	budget                *string
	checkStore            *string
	newRuns               *[]string
}

func newBaselineCmd(app *kingpin.Application) *baselineCmd {
	c := &baselineCmd{cmd: app.Command("baseline", "A store of the last runs per device model, API level and app version, for budgets relative to a baseline.")}
	c.add = c.cmd.Command("add", "Copy runs (capture or test run directories) into the store, each under its device model, API level and app version, and keep only the newest --keep of each.")
	c.store = c.add.Flag("store", "The store's directory (created if missing).").Required().String()
	c.keep = c.add.Flag("keep", "How many runs to keep per device model, API level and app version.").Default("10").Int()
	c.runs = c.add.Arg("run", "Capture or test run directories.").Required().ExistingDirs()
	c.list = c.cmd.Command("list", "List the store's baselines and their runs.")
	c.list.Flag("store", "The store's directory.").Required().StringVar(c.store)
	c.check = c.cmd.Command("check", "Judge runs against the budget's relative: rules, and its absolute limits, with the store's runs of the same device model, API level and app version as the baseline; exit status 3 for a significant breach.")
	c.checkStore = c.check.Flag("store", "The store's directory.").Required().String()
	c.budget = c.check.Flag("budget", "The budget file (YAML) with relative: rules.").Required().String()
	c.newRuns = c.check.Arg("run", "The new runs: capture or test run directories, all of one device model, API level and app version.").Required().ExistingDirs()
	return c
}

// run runs the subcommand cmd.
func (c *baselineCmd) run(cmd string, stdout, stderr io.Writer) int {
	switch cmd {
	case c.add.FullCommand():
		return c.runAdd(stdout, stderr)
	case c.list.FullCommand():
		return c.runList(stdout, stderr)
	}
	return c.runCheck(stdout, stderr)
}

func (c *baselineCmd) runAdd(stdout, stderr io.Writer) int {
	if *c.keep < 1 {
		fmt.Fprintf(stderr, "alloctrack baseline add: --keep %d: keep at least 1 run\n", *c.keep)
		return exitUsage
	}
	for _, run := range *c.runs {
		added, pruned, err := offline.AddBaseline(*c.store, *c.keep, run)
		if err != nil {
			fmt.Fprintf(stderr, "alloctrack baseline add: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "added %s as %s\n", run, added)
		for _, p := range pruned {
			fmt.Fprintf(stdout, "pruned %s\n", p)
		}
	}
	return exitOK
}

func (c *baselineCmd) runList(stdout, stderr io.Writer) int {
	sets, err := offline.ListBaselines(*c.store)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack baseline list: %v\n", err)
		return exitFailure
	}
	for _, s := range sets {
		fmt.Fprintf(stdout, "%s: %d runs\n", s.Key, len(s.Runs))
		for _, r := range s.Runs {
			fmt.Fprintf(stdout, "  %s\n", r)
		}
	}
	return exitOK
}

// withAppVersion sets meta's app version from `dumpsys package` on the
// device (docs/gates.md). A failure is a warning on stderr: the capture
// goes on, its summary.json without the version.
func withAppVersion(ctx context.Context, client *adb.Client, meta offline.CaptureMeta, stderr io.Writer) offline.CaptureMeta {
	if meta.Package == "" {
		return meta
	}
	out, err := client.Shell(ctx, meta.Serial, "dumpsys", "package", meta.Package)
	if err == nil {
		meta.AppVersion, meta.AppVersionCode, err = offline.ParseDumpsysVersion(meta.Package, []byte(out))
	}
	if err != nil {
		fmt.Fprintf(stderr, "warning: the app's version is unknown (%v); a baseline store will refuse this run\n", err)
		return meta
	}
	meta.AppVersionSource = offline.AppVersionSource
	return meta
}
