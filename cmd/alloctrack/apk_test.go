package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/internal/apktest"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// writeAPK writes an APK of pkg, version name (code).
func writeAPK(t *testing.T, pkg, name string, code uint32) string {
	t.Helper()
	return apktest.Write(t, "app-release.apk", apktest.Manifest{Package: pkg, VersionName: name, VersionCode: code})
}

// notAPK writes a file that is not an APK.
func notAPK(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "broken.apk")
	if err := os.WriteFile(p, []byte("not a zip\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTestCommandAPK: `alloctrack test --apk` records the APK's version
// when the installed app is that build; an installed app of another
// version, or an APK of another app, is refused before the run starts
// (exit 1, nothing written), and a file that is no APK is exit 2.
func TestTestCommandAPK(t *testing.T) {
	_, addr, serial := suiteFarm(t, 29, captureBackends[1], sim.SeedSpec{Tests: 3, Seed: 5})
	testWith := func(apk string) (*captureRun, string) {
		out := filepath.Join(t.TempDir(), "run")
		c := testRunOf("--adb.address", addr, "--serial", serial, "--out", out, "--apk", apk, "--",
			"am", "instrument", "-w", "-r", "-e", "delay_msec", "50", suiteComp)
		c.wait(t, testwait.Bound)
		return c, out
	}
	good := writeAPK(t, suiteApp, sim.DefaultAppVersion.Name, uint32(sim.DefaultAppVersion.Code))
	c, out := testWith(good)
	if c.code != exitOK {
		t.Fatalf("the installed build: %s", c.say())
	}
	if m := readSummary(t, out).CaptureMeta; m.AppVersion != "1.0" || m.AppVersionCode != 1 || m.AppVersionSource != "apk, dumpsys package" || m.APK != good {
		t.Errorf("summary.json: %q (%d) from %q, apk %q; want 1.0 (1) from the APK %s, checked on the device", m.AppVersion, m.AppVersionCode, m.AppVersionSource, m.APK, good)
	}
	for _, bad := range []struct {
		apk  string
		code int
		want string
	}{
		{writeAPK(t, suiteApp, "1.1", 2), exitFailure, "the installed com.example.app1 is not the one in --apk "},
		{writeAPK(t, suitePkg, "1.0", 1), exitFailure, "is com.example.app1.test, not the app under test com.example.app1"},
		{notAPK(t), exitUsage, "not an APK (a zip archive)"},
	} {
		c, out := testWith(bad.apk)
		if e := c.stderr.String(); c.code != bad.code || !strings.Contains(e, bad.want) || !strings.Contains(e, bad.apk) {
			t.Errorf("--apk %s: %s\nwant exit %d saying %q", bad.apk, c.say(), bad.code, bad.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("--apk %s: %s was written", bad.apk, out)
		}
	}
	c, _ = testWith(writeAPK(t, suiteApp, "1.1", 2))
	if e := c.stderr.String(); !strings.Contains(e, "installed ≠ APK: app version 1.0 ≠ 1.1, app version code 1 ≠ 2") {
		t.Errorf("the refusal does not say what differs:\n%s", e)
	}
}

// TestCaptureAPK: capture --apk records the APK's version of the app it
// records, refuses an installed app of another version, and needs
// --package.
func TestCaptureAPK(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{30}, Workload: quietCaptureWorkload()})
	d := f.Devices()[0]
	app := d.VMs()[0].ProcessName()
	d.SetAppVersion(app, sim.AppVersion{Name: "2.0", Code: 20})
	addr, serials := captureBackends[1].serve(t, f)
	capture := func(apk string, args ...string) (string, string, int) {
		if len(args) == 0 {
			args = []string{"--package", app}
		}
		return runCmd(t, append([]string{"capture", "--adb.address", addr, "--serial", serials[d.Serial()], "--apk", apk,
			"--duration", "300ms", "--window", "100ms", "--window.min", "100ms", "--out", filepath.Join(t.TempDir(), "c")}, args...)...)
	}
	good := writeAPK(t, app, "2.0", 20)
	if _, stderr, code := capture(good); code != exitOK {
		t.Fatalf("the installed build: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := capture(writeAPK(t, app, "2.1", 21)); code != exitFailure || !strings.Contains(stderr, "app version 2.0 ≠ 2.1") {
		t.Errorf("another build: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := capture(good, "--pid", "1"); code != exitUsage || !strings.Contains(stderr, "--apk names the app's build: give --package") {
		t.Errorf("--pid: exit %d\n%s", code, stderr)
	}
	bad := notAPK(t)
	if _, stderr, code := capture(bad); code != exitUsage || !strings.Contains(stderr, "--apk: apk: "+bad+": not an APK") {
		t.Errorf("no APK: exit %d\n%s", code, stderr)
	}
}

// TestBaselineAPK: baseline add and check --apk key runs by the APK's
// version: a run that recorded none takes it, one that recorded the same
// is accepted; a run of another version is refused by add (exit 1) and
// not judged by check (exit 4), naming the run and the APK; a file that
// is no APK is exit 2.
func TestBaselineAPK(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	m := offline.CaptureMeta{Model: "Pixel 7", API: 30, Package: "com.example", AppVersion: "1.4", AppVersionCode: 14}
	unknown := m
	unknown.AppVersion, unknown.AppVersionCode = "", 0
	apk14, apk15 := writeAPK(t, "com.example", "1.4", 14), writeAPK(t, "com.example", "1.5", 15)
	add := func(apk string, runs ...string) (string, string, int) {
		return runCmd(t, append([]string{"baseline", "add", "--store", store, "--apk", apk}, runs...)...)
	}
	if out, stderr, code := add(apk14, append(gateRuns(t, m, 10000, 5000)[:3], gateRuns(t, unknown, 10000, 5000)[:2]...)...); code != exitOK || strings.Count(out, "added ") != 5 {
		t.Fatalf("add: exit %d\n%s%s", code, out, stderr)
	}
	run15 := gateRuns(t, m, 10000, 5000)[0]
	if _, stderr, code := add(apk15, run15); code != exitFailure || !strings.Contains(stderr, run15+" is a run of com.example 1.4 (14), not of the APK "+apk15) {
		t.Errorf("add of another version: exit %d\n%s", code, stderr)
	}
	budget := filepath.Join(dir, "budget.yaml")
	os.WriteFile(budget, []byte("tests:\n  - match: '.*'\n    relative: {increase: 10%}\n"), 0o644)
	check := func(apk string, runs []string) (string, string, int) {
		return runCmd(t, append([]string{"baseline", "check", "--store", store, "--budget", budget, "--apk", apk}, runs...)...)
	}
	if out, stderr, code := check(apk14, gateRuns(t, unknown, 10000, 5000)); code != exitOK || !strings.Contains(out, "baseline: 5 runs of Pixel 7, API 30, com.example 1.4 (14)") {
		t.Errorf("check of runs without a version: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code := check(apk15, gateRuns(t, m, 10000, 5000))
	if code != exitInsufficient || strings.Contains(out, "relative:") || !strings.Contains(stderr, "not of the APK "+apk15+" (app version 1.4 ≠ 1.5") {
		t.Errorf("check of runs of another version than the APK: exit %d\n%s%s", code, out, stderr)
	}
	bad := notAPK(t)
	for _, args := range [][]string{{"baseline", "add", "--store", store, "--apk", bad, run15}, {"baseline", "check", "--store", store, "--budget", budget, "--apk", bad, run15}} {
		if _, stderr, code := runCmd(t, args...); code != exitUsage || !strings.Contains(stderr, "--apk: apk: "+bad+": not an APK (a zip archive)") {
			t.Errorf("%s: exit %d\n%s", args[1], code, stderr)
		}
	}
}
