package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"

	"github.com/alloctrack/alloctrack/internal/testwait"
)

// TestCapturePackageByShellFlavour records an app by --package on
// simulated devices of every shell flavour: Android 4.4 and 5.x (no pidof;
// toolbox ps lists every process), 6.0 and 7.x (pidof; toolbox ps), 8.0
// and later (pidof; toybox ps needs -A). Each device also runs a process
// of the same name that is not debuggable, and processes whose names start
// with the app's: the capture must record the debuggable one, say which
// it took, and run nothing but lookups on the device.
func TestCapturePackageByShellFlavour(t *testing.T) {
	apis := []int{19, 21, 22, 23, 25, 26, 30}
	const app = "com.example.app1"
	for _, be := range captureBackends {
		t.Run(be.name, func(t *testing.T) {
			f := newCaptureFarm(t, sim.FarmConfig{Devices: len(apis), APIs: apis, AppsPerDevice: 1, Workload: quietCaptureWorkload()})
			for i, d := range f.Devices() {
				d.SetAppVersion(app, sim.AppVersion{Name: fmt.Sprintf("2.%d", apis[i]), Code: int64(apis[i])})
				d.AddProcess(500+i, app)           // same name, not debuggable
				d.AddProcess(600+i, app+":remote") // toolbox's name filter would match these
				if _, err := f.AddApp(d.Serial(), sim.AppConfig{Package: app + "0", Workload: quietCaptureWorkload()}); err != nil {
					t.Fatal(err)
				}
			}
			addr, serials := be.serve(t, f)
			for i, d := range f.Devices() {
				api := apis[i]
				t.Run(fmt.Sprintf("API_%d", api), func(t *testing.T) {
					vm := onlyVM(t, f, d.Serial(), app)
					dir := filepath.Join(t.TempDir(), "capture")
					_, stderr, code := runCmd(t, "capture", "--adb.address", addr, "--serial", serials[d.Serial()], "--package", app,
						"--duration", "400ms", "--window", "200ms", "--window.min", "100ms", "--out", dir)
					if code != exitOK {
						t.Fatalf("API %d: exit %d; stderr:\n%s\nshell log %q", api, code, stderr, d.ShellLog())
					}
					cf := checkCaptureDir(t, dir)
					if cf.summary.PID != vm.PID() || cf.summary.Package != app || cf.summary.API != api {
						t.Errorf("summary.json: %+v; want pid %d, API %d", cf.summary.CaptureMeta, vm.PID(), api)
					}
					if m := cf.summary.CaptureMeta; m.AppVersion != fmt.Sprintf("2.%d", api) || m.AppVersionCode != int64(api) || m.AppVersionSource != "dumpsys package" {
						t.Errorf("summary.json: app version %q (%d) from %q; want 2.%d (%d) from dumpsys package", m.AppVersion, m.AppVersionCode, m.AppVersionSource, api, api)
					}
					want := fmt.Sprintf("%s runs on %s as pids %d, %d; recording pid %d, the one in the device's JDWP list", app, serials[d.Serial()], 500+i, vm.PID(), vm.PID())
					if !strings.Contains(stderr, want) {
						t.Errorf("stderr does not say %q:\n%s", want, stderr)
					}
					var cmds []string
					for _, c := range d.ShellLog() {
						cmds = append(cmds, strings.Join(c, " "))
					}
					wantCmds := map[bool]string{true: "getprop ro.build.version.sdk|pidof " + app, false: "getprop ro.build.version.sdk|ps"}[api >= 23] + "|dumpsys package " + app
					if got := strings.Join(cmds, "|"); got != wantCmds {
						t.Errorf("the device's shell ran %q, want %q", got, wantCmds)
					}
					if vm.Tracking() {
						t.Error("tracking still on")
					}
				})
			}
		})
	}
}

// TestCaptureSeveralDebuggable: two debuggable processes carry the app's
// name; the first is held by another debugger, so its VM cannot confirm
// its name. The capture records the second and says why.
func TestCaptureSeveralDebuggable(t *testing.T) {
	const app = "com.example.twice"
	f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, APIs: []int{21}, Workload: quietCaptureWorkload()})
	held, err := f.AddApp("sim-1", sim.AppConfig{PID: 7001, Package: app, Workload: quietCaptureWorkload()})
	if err != nil {
		t.Fatal(err)
	}
	held.SetFaults(sim.Faults{DebuggerAttached: true})
	free, err := f.AddApp("sim-1", sim.AppConfig{PID: 7008, Package: app, Workload: quietCaptureWorkload()})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serveSimHost(t, f)
	dir := filepath.Join(t.TempDir(), "capture")
	_, stderr, code := runCmd(t, "capture", "--adb.address", addr, "--package", app,
		"--duration", "400ms", "--window", "200ms", "--window.min", "100ms", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if cf := checkCaptureDir(t, dir); cf.summary.PID != free.PID() {
		t.Errorf("recorded pid %d, want %d", cf.summary.PID, free.PID())
	}
	want := fmt.Sprintf("%s runs on sim-1 as debuggable pids 7001, 7008; recording pid 7008, whose VM calls itself %s; pid 7001: another debugger holds it", app, app)
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	if st := free.Stats(); st.Connections != 2 {
		t.Errorf("pid 7008 served %d connections, want 2 (asked its name, then recorded)", st.Connections)
	}
}

// TestCapturePackageRejected: a --package that is not an Android package
// or process name is a usage error (exit 2) that names the flag, and
// nothing reaches the device: before, `--package 'x; reboot'` ran reboot.
func TestCapturePackageRejected(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, APIs: []int{30}, Workload: quietCaptureWorkload()})
	addr, _ := serveSimHost(t, f)
	d := f.Device("sim-1")
	for _, tc := range []struct{ pkg, want string }{
		{"x; reboot", `character ';' at byte 1`},
		{"com.example.app1 && reboot", `character ' ' at byte 16`},
		{"$(reboot)", `character '$' at byte 0`},
		{"com.example.app1`reboot`", "character '`' at byte 16"},
		{"com.example.app1|reboot", `character '|' at byte 16`},
		{"-A", `character '-' at byte 0`},
		{"com..app", "empty segment"},
		{"com.example.app1:", "empty segment"},
		{"1com.example", "segment starts with '1'"},
	} {
		t.Run(strconv.Quote(tc.pkg), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "capture")
			// A capture that went on instead of refusing the name would
			// run for its duration, well past testwait.Bound.
			start := time.Now()
			_, stderr, code := runCmd(t, "capture", "--adb.address", addr, "--serial", "sim-1", "--package="+tc.pkg,
				"--duration", "3m", "--window", "200ms", "--out", dir)
			if code != exitUsage || !strings.Contains(stderr, "--package") || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d naming --package and saying %q", code, stderr, exitUsage, tc.want)
			}
			if d := time.Since(start); d > testwait.Bound {
				t.Errorf("took %v", d)
			}
		})
	}
	if n := d.Reboots(); n != 0 {
		t.Errorf("the device ran reboot %d times", n)
	}
	if log := d.ShellLog(); len(log) != 0 {
		t.Errorf("the device's shell ran %q; a rejected name must not reach it", log)
	}
	// A process suffix is a valid name: looked up, and not running.
	_, stderr, code := runCmd(t, "capture", "--adb.address", addr, "--serial", "sim-1", "--package", "com.example.app1:remote",
		"--duration", "400ms", "--out", filepath.Join(t.TempDir(), "capture"))
	if code != exitFailure || !strings.Contains(stderr, "app com.example.app1:remote is not running on sim-1") {
		t.Errorf("com.example.app1:remote: exit %d, stderr %q", code, stderr)
	}
}
