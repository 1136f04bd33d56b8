package main

import (
	"context"
	"fmt"
	"io"
	"strings"

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
	apk                   *string
}

func newBaselineCmd(app *kingpin.Application) *baselineCmd {
	c := &baselineCmd{cmd: app.Command("baseline", "A store of the last runs per device model, API level and app version, for budgets relative to a baseline.")}
	c.add = c.cmd.Command("add", "Copy runs (capture or test run directories) into the store, each under its device model, API level and app version, and keep only the newest --keep of each.")
	c.store = c.add.Flag("store", "The store's directory (created if missing).").Required().String()
	c.keep = c.add.Flag("keep", "How many runs to keep per device model, API level and app version.").Default("10").Int()
	c.runs = c.add.Arg("run", "Capture or test run directories.").Required().ExistingDirs()
	c.apk = c.add.Flag("apk", apkHelp).String()
	c.list = c.cmd.Command("list", "List the store's baselines and their runs.")
	c.list.Flag("store", "The store's directory.").Required().StringVar(c.store)
	c.check = c.cmd.Command("check", "Judge runs against the budget's relative: rules, and its absolute limits, with the store's runs of the same device model, API level and app version as the baseline; exit status 3 for a significant breach.")
	c.checkStore = c.check.Flag("store", "The store's directory.").Required().String()
	c.budget = c.check.Flag("budget", "The budget file (YAML) with relative: rules.").Required().String()
	c.check.Flag("apk", apkHelp).StringVar(c.apk)
	c.newRuns = c.check.Arg("run", "The new runs: capture or test run directories, all of one device model, API level and app version.").Required().ExistingDirs()
	return c
}

// apkHelp is the help of --apk in baseline add and check.
const apkHelp = "The APK file of the app the runs are of: the app's version comes from it, and a run that recorded another app or version is refused."

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
	build, err := readAppBuild(*c.apk)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack baseline add: %v\n", err)
		return exitUsage
	}
	for _, run := range *c.runs {
		add := func() (string, []string, error) { return offline.AddBaseline(*c.store, *c.keep, run) }
		if build != nil {
			add = func() (string, []string, error) { return offline.AddBaselineAPK(*c.store, *c.keep, run, *build) }
		}
		added, pruned, err := add()
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

// readAppBuild reads the APK file named by --apk; nil when none is named.
func readAppBuild(path string) (*offline.AppBuild, error) {
	if path == "" {
		return nil, nil
	}
	b, err := offline.ReadAppBuild(path)
	if err != nil {
		return nil, fmt.Errorf("--apk: %w", err)
	}
	return &b, nil
}

// withAppVersion sets meta's app version from `dumpsys package` on the
// device (docs/gates.md), or from build, the APK named by --apk. An
// unknown version is a warning on stderr: the capture goes on, its
// summary.json without the version (or with the APK's). An installed app
// that is not build is an error: nothing is recorded.
func withAppVersion(ctx context.Context, client *adb.Client, meta offline.CaptureMeta, build *offline.AppBuild, stderr io.Writer) (offline.CaptureMeta, error) {
	if build != nil && meta.Package != build.Package {
		return meta, fmt.Errorf("--apk %s is %s, not the app under test %s", build.Path, build.Package, meta.Package)
	}
	if meta.Package == "" {
		return meta, nil
	}
	name, code, err := deviceAppVersion(ctx, client, meta.Serial, meta.Package)
	switch {
	case build == nil && err != nil:
		fmt.Fprintf(stderr, "warning: the app's version is unknown (%v); a baseline store will refuse this run\n", err)
		return meta, nil
	case build == nil:
		meta.AppVersion, meta.AppVersionCode, meta.AppVersionSource = name, code, offline.AppVersionSource
		return meta, nil
	case err != nil:
		fmt.Fprintf(stderr, "warning: the installed app's version is unknown (%v); recording the version of --apk %s unchecked\n", err, build.Path)
		meta.AppVersionSource = offline.AppVersionSourceAPK
	default:
		if d := build.Differs(meta.Package, name, code); d != nil {
			return meta, fmt.Errorf("the installed %s is not the one in --apk %s (installed ≠ APK: %s): install the APK, or name the one installed; nothing recorded", meta.Package, build.Path, strings.Join(d, ", "))
		}
		meta.AppVersionSource = offline.AppVersionSourceAPKDevice
	}
	meta.AppVersion, meta.AppVersionCode, meta.APK = build.Name, build.Code, build.Path
	return meta, nil
}

// deviceAppVersion asks the device `dumpsys package pkg` for the
// installed app's version.
func deviceAppVersion(ctx context.Context, client *adb.Client, serial, pkg string) (string, int64, error) {
	out, err := client.Shell(ctx, serial, "dumpsys", "package", pkg)
	if err != nil {
		return "", 0, err
	}
	return offline.ParseDumpsysVersion(pkg, []byte(out))
}
