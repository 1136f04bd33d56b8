package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/adb/transcript"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/doctor"
	"github.com/prometheus/common/version"
)

type doctorCmd struct {
	cmd                        *kingpin.CmdClause
	adbAddr, serial            *string
	pkgs                       *[]string
	format, record             *string
	heapdump, anonymize, noRun *bool
	reqTimeout, checkTimeout   *time.Duration
	checkLength                *time.Duration
}

func newDoctorCmd(app *kingpin.Application) *doctorCmd {
	c := &doctorCmd{cmd: app.Command("doctor", "Say what will work on each device and app, and why not: the device's facts, each app's backend (DDM, heapprofd, heap dumps or none) with the reason and what to change, then a short live check of each backend. Exit status 7 when something asked for cannot work.")}
	f := c.cmd.Flag
	c.adbAddr = f("adb.address", "adb server address host:port. Default: $ADB_SERVER_SOCKET (tcp:host:port), $ANDROID_ADB_SERVER_PORT, 127.0.0.1:5037.").String()
	c.serial = f("serial", "Only this device (default: every device attached).").String()
	c.pkgs = f("package", "Only this app, by package (process) name; may be given more than once (default: every app in the JDWP list or, on Android 12+, in track-app's list).").Strings()
	c.format = f("format", "Output: table (for people) or json (for machines).").Default("table").Enum("table", "json")
	c.heapdump = f("heapdump", "Also take one heap dump of each app that may be dumped (am dumpheap; the app is frozen while it is written).").Bool()
	c.noRun = f("no-live", "Skip the live checks: only what the device's facts decide.").Bool()
	c.record = f("record", "Write a transcript of every exchange with the adb server to FILE (see docs/doctor.md).").PlaceHolder("FILE").String()
	c.anonymize = f("anonymize", "With --record: replace serials and package names consistently in the transcript.").Bool()
	c.reqTimeout = f("request.timeout", "Timeout of each request (getprop, lists, JDWP handshake).").Default("5s").Duration()
	c.checkLength = f("check.length", "How long a heapprofd check waits for its first dump before it stops (an app that allocates nothing gives none).").Default("5s").Duration()
	c.checkTimeout = f("check.timeout", "How long each live check may take in all.").Default("30s").Duration()
	return c
}

// doctorReport is doctor's output, also its JSON.
type doctorReport struct {
	Devices []deviceReport `json:"devices"`
	// Works is false when something asked for cannot work (exit 7).
	Works bool `json:"works"`
}

type deviceReport struct {
	doctor.Device
	Apps []appReport `json:"apps"`
	// LeftBehind: alloctrack's files still on the device after the
	// checks (nil and LeftError empty: nothing).
	LeftBehind []string `json:"left_behind"`
	LeftError  string   `json:"left_error,omitempty"`
}

type appReport struct {
	doctor.App
	Verdict doctor.Verdict `json:"verdict"`
	Checks  []liveCheck    `json:"checks,omitempty"`
}

func (c *doctorCmd) run(stdout, stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "alloctrack doctor: "+format+"\n", args...)
		return code
	}
	for _, p := range *c.pkgs {
		if err := adb.CheckName(p); err != nil {
			return fail(exitUsage, "--package: %v", err)
		}
	}
	if *c.anonymize && *c.record == "" {
		return fail(exitUsage, "--anonymize needs --record")
	}
	if *c.anonymize && len(*c.pkgs) == 0 {
		// Serials are found in the exchange itself; package names are
		// replaced only when named (adb/transcript's Options.Packages).
		return fail(exitUsage, "--anonymize needs --package: the names to replace")
	}
	addr := *c.adbAddr
	if addr == "" {
		addr = adb.DefaultAddress()
	}
	if *c.record != "" {
		recAddr, stop, err := c.startRecord(addr)
		if err != nil {
			return fail(exitFailure, "--record %s: %v", *c.record, err)
		}
		defer stop()
		addr = recAddr
	}
	rep, err := c.examine(context.Background(), adb.NewClient(addr))
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	if err := writeDoctor(stdout, *c.format, rep); err != nil {
		return fail(exitFailure, "%v", err)
	}
	if !rep.Works {
		return exitCannotWork
	}
	return exitOK
}

// startRecord puts a recording proxy in front of the adb server at addr.
func (c *doctorCmd) startRecord(addr string) (string, func() error, error) {
	f, err := os.Create(*c.record)
	if err != nil {
		return "", nil, err
	}
	recAddr, stop, err := transcript.Record(addr, f, transcript.Options{
		Tool: "alloctrack " + version.Version + " doctor", Anonymize: *c.anonymize, Packages: *c.pkgs,
	})
	if err != nil {
		f.Close()
		os.Remove(*c.record)
		return "", nil, err
	}
	return recAddr, func() error {
		err := stop()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}, nil
}

// examine asks every device (or --serial's) and its apps.
func (c *doctorCmd) examine(ctx context.Context, client *adb.Client) (*doctorReport, error) {
	lctx, cancel := context.WithTimeout(ctx, *c.reqTimeout)
	devs, err := client.Devices(lctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("listing devices at the adb server %s: %w", client.Addr(), err)
	}
	states := deviceStates(ctx, client, *c.reqTimeout)
	rep := &doctorReport{Works: true}
	for _, info := range devs {
		if *c.serial != "" && info.Serial != *c.serial {
			continue
		}
		var dr deviceReport
		if why := doctor.StateReason(states[info.Serial]); why != "" {
			dr = deviceReport{Device: doctor.Device{Serial: info.Serial, Model: info.Model, Error: why}}
		} else {
			dr = c.examineDevice(ctx, client, info)
		}
		rep.Devices = append(rep.Devices, dr)
		rep.Works = rep.Works && deviceWorks(dr)
	}
	if len(rep.Devices) == 0 {
		if *c.serial != "" {
			return nil, fmt.Errorf("no device %q at the adb server %s", *c.serial, client.Addr())
		}
		return nil, fmt.Errorf("no device at the adb server %s", client.Addr())
	}
	return rep, nil
}

// deviceWorks: the device answered, every app has a backend and every
// live check passed, and nothing was left behind.
func deviceWorks(dr deviceReport) bool {
	if dr.Error != "" || dr.LeftError != "" || len(dr.LeftBehind) > 0 {
		return false
	}
	for _, a := range dr.Apps {
		if !a.Verdict.Works() {
			return false
		}
		for _, lc := range a.Checks {
			if !lc.OK {
				return false
			}
		}
	}
	return true
}

func (c *doctorCmd) ddmConfig() ddm.Config {
	cfg := ddm.Config{RequestTimeout: *c.reqTimeout, ReportTimeout: *c.checkTimeout}
	cfg.Fill()
	return cfg
}

func (c *doctorCmd) examineDevice(ctx context.Context, client *adb.Client, info adb.DeviceInfo) deviceReport {
	rctx, cancel := context.WithTimeout(ctx, 4**c.reqTimeout)
	dr := deviceReport{Device: deviceFacts(rctx, client, info)}
	cancel()
	if dr.Error != "" {
		return dr
	}
	lctx, cancel := context.WithTimeout(ctx, 4**c.reqTimeout)
	l, err := listApps(lctx, client, dr.Device)
	cancel()
	if err != nil {
		dr.Error = err.Error()
		return dr
	}
	for _, a := range l.appsOfInterest(*c.pkgs) {
		actx, cancel := context.WithTimeout(ctx, *c.reqTimeout)
		l.appFacts(actx, client, dr.Device, &a)
		cancel()
		dr.Apps = append(dr.Apps, c.examineApp(ctx, client, dr.Device, a))
	}
	lctx, cancel = context.WithTimeout(ctx, 2**c.reqTimeout)
	dr.LeftBehind, err = leftBehind(lctx, client, dr.Device)
	cancel()
	if err != nil {
		dr.LeftError = err.Error()
	}
	return dr
}

func (c *doctorCmd) examineApp(ctx context.Context, client *adb.Client, d doctor.Device, a doctor.App) appReport {
	if a.InJDWP {
		hctx, cancel := context.WithTimeout(ctx, 3**c.reqTimeout)
		held, _, err := heldCheck(hctx, client, d, a.PID, c.ddmConfig())
		cancel()
		a.Held, a.HeldKnown = held, err == nil
	}
	ar := appReport{App: a, Verdict: doctor.Decide(d, a)}
	if *c.noRun {
		return ar
	}
	switch ar.Verdict.Backend {
	case doctor.BackendDDM:
		cctx, cancel := context.WithTimeout(ctx, *c.checkTimeout)
		ar.Checks = append(ar.Checks, ddmCheck(cctx, client, d, a.PID, c.ddmConfig()))
		cancel()
	case doctor.BackendHeapprofd:
		ar.Checks = append(ar.Checks, heapprofdCheck(ctx, client, d, a, *c.checkLength, *c.checkTimeout))
	}
	if *c.heapdump && ar.Verdict.Works() && doctor.MayDump(d, a) {
		ar.Checks = append(ar.Checks, heapdumpCheck(ctx, client, d, a.PID, *c.checkTimeout))
	}
	return ar
}

// deviceStates is the adb server's first device list: each serial's
// state (empty when the list did not come).
func deviceStates(ctx context.Context, client *adb.Client, timeout time.Duration) map[string]string {
	states := map[string]string{}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client.TrackDevices(tctx, func(l []adb.DeviceState) {
		for _, d := range l {
			states[d.Serial] = d.State
		}
		cancel()
	})
	return states
}
