package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/sim"
)

// buildFarm is a farm through Debian's adb server of one device per
// (api, build), with no app.
func buildFarm(t *testing.T, prefix string, apis []int, builds []string) (*sim.Farm, string, map[string]string) {
	t.Helper()
	f := newCaptureFarm(t, sim.FarmConfig{Devices: len(apis), AppsPerDevice: 0, APIs: apis, SerialPrefix: prefix,
		Device: func(i int, c *sim.DeviceConfig) { c.Build = builds[i] }})
	addr, serials := serveRealADB(t, f)
	return f, addr, serials
}

func addQuietApp(t *testing.T, f *sim.Farm, serial string, a sim.AppConfig) *sim.VM {
	t.Helper()
	a.Workload = quietCaptureWorkload()
	vm, err := f.AddApp(serial, a)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// TestHeapdumpWhoMayBeDumped, through Debian's adb server: heapdump
// follows am dumpheap's rule (fact 4), not the JDWP list. On an Android
// 14 userdebug build without persist.debug.dalvik.vm.jdwp.enabled, a
// release app is not in the JDWP list (fact 5) and is dumped, by package
// and by pid. On a user build a release app and a profileable one are
// refused before the app is touched, the profileable one with a word on
// why profileable is not enough; nothing is made or left behind.
func TestHeapdumpWhoMayBeDumped(t *testing.T) {
	f, addr, serials := buildFarm(t, "rule", []int{34, 31}, []string{sim.BuildUserdebug, sim.BuildUser})
	ud, user := f.Devices()[0], f.Devices()[1]
	rel := addQuietApp(t, f, ud.Serial(), sim.AppConfig{Package: "com.release", NotDebuggable: true})
	if pids := ud.PIDs(); len(pids) != 0 {
		t.Fatalf("the Android 14 userdebug JDWP list holds %v", pids)
	}
	for _, by := range [][]string{{"--package", "com.release"}, {"--pid", strconv.Itoa(rel.PID())}} {
		dir := filepath.Join(t.TempDir(), "d")
		args := append([]string{"heapdump", "--adb.address", addr, "--serial", serials[ud.Serial()], "--out", dir}, by...)
		if _, errOut, code := runCmd(t, args...); code != exitOK {
			t.Errorf("API 34 userdebug, release app by %s: exit %d %s", by[0], code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "heap.hprof")); err != nil {
			t.Errorf("API 34 userdebug, by %s: %v", by[0], err)
		}
	}
	prof := addQuietApp(t, f, user.Serial(), sim.AppConfig{Package: "com.profileable", NotDebuggable: true, Profileable: true})
	urel := addQuietApp(t, f, user.Serial(), sim.AppConfig{Package: "com.release", NotDebuggable: true})
	for _, c := range []struct {
		by          []string
		profileable bool
	}{
		{[]string{"--package", "com.profileable"}, true},
		{[]string{"--pid", strconv.Itoa(prof.PID())}, true},
		{[]string{"--pid", strconv.Itoa(urel.PID())}, false},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		args := append([]string{"heapdump", "--adb.address", addr, "--serial", serials[user.Serial()], "--out", dir}, c.by...)
		_, errOut, code := runCmd(t, args...)
		if code != exitFailure || !strings.Contains(errOut, "am dumpheap dumps an app only when it is debuggable") ||
			strings.Contains(errOut, "profileable only") != c.profileable || strings.Contains(errOut, "dumping pid") {
			t.Errorf("API 31 user, %v: exit %d %s", c.by, code, errOut)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("API 31 user, %v: made %s", c.by, dir)
		}
	}
	for _, d := range f.Devices() {
		if left := d.Files("/data/local/tmp"); len(left) > 0 {
			t.Errorf("%s: left on the device: %v", d.Serial(), left)
		}
	}
}

// TestHeapdumpFailuresByVersion, through Debian's adb server: how am
// dumpheap and the dump fail on each version (facts 11, 12). An unknown
// process is said so on Android 7.1 (whose am exits 0), 9, 11 and 15, and
// the empty file am leaves from 8 is removed. On Android 9 a dump that
// fails (ART empties the file) or never starts (a blocked main
// thread: the file stays empty) is reported before --timeout, and one that
// pauses half-way is waited for. On Android 11 a dump whose end never
// comes ends at --timeout with a message that says why.
func TestHeapdumpFailuresByVersion(t *testing.T) {
	apis := []int{25, 28, 30, 35}
	f, addr, serials := buildFarm(t, "fail", apis, []string{sim.BuildUserdebug, sim.BuildUserdebug, sim.BuildUserdebug, sim.BuildUserdebug})
	heapdump := func(d *sim.Device, timeout string, by ...string) (string, int) {
		args := append([]string{"heapdump", "--adb.address", addr, "--serial", serials[d.Serial()], "--out", filepath.Join(t.TempDir(), "d"), "--timeout", timeout}, by...)
		_, errOut, code := runCmd(t, args...)
		if left := d.Files("/data/local/tmp"); len(left) > 0 {
			t.Errorf("API %d %v: left on the device: %v", d.Config().API, by, left)
		}
		return errOut, code
	}
	for _, d := range f.Devices() {
		errOut, code := heapdump(d, "2m", "--pid", "4242")
		if code != exitFailure || !strings.Contains(errOut, "Unknown process: 4242") || !strings.Contains(errOut, "no such process") {
			t.Errorf("API %d unknown process: exit %d %s", d.Config().API, code, errOut)
		}
	}
	d9, d11 := f.Devices()[1], f.Devices()[2]
	vm9 := addQuietApp(t, f, d9.Serial(), sim.AppConfig{Package: "com.nine"})
	for _, c := range []struct {
		fault sim.DumpFault
		says  string // "": succeeds
	}{
		{sim.DumpFails, "the app wrote no dump"}, // went back to 0 bytes, or stayed empty: as the polls fell
		{sim.DumpBlocked, "stayed empty for 10s"},
		{sim.DumpPauses, ""},
	} {
		vm9.SetFaults(sim.Faults{HeapDump: c.fault})
		errOut, code := heapdump(d9, "2m", "--package", "com.nine")
		if c.says == "" && code != exitOK || c.says != "" && (code != exitFailure || !strings.Contains(errOut, c.says) || strings.Contains(errOut, "deadline")) {
			t.Errorf("API 28 fault %d: exit %d %s", c.fault, code, errOut)
		}
	}
	vm9.SetFaults(sim.Faults{})
	vm11 := addQuietApp(t, f, d11.Serial(), sim.AppConfig{Package: "com.eleven"})
	vm11.SetFaults(sim.Faults{HeapDump: sim.DumpBlocked})
	errOut, code := heapdump(d11, "3s", "--package", "com.eleven")
	if code != exitFailure || !strings.Contains(errOut, "may have died") || !strings.Contains(errOut, "main thread") || !strings.Contains(errOut, "--timeout 3s") {
		t.Errorf("API 30, no word from the app: exit %d %s", code, errOut)
	}
	vm11.SetFaults(sim.Faults{})
}
