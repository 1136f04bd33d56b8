package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/doctor"
	"github.com/alloctrack/alloctrack/sim"
)

// doctorDevices are the devices of the list: API level and build.
var doctorDevices = []struct {
	api   int
	build string
}{
	{19, sim.BuildUser}, {23, sim.BuildUserdebug}, {28, sim.BuildUser}, {30, sim.BuildUserdebug},
	{31, sim.BuildUser}, {33, sim.BuildUserdebug}, {35, sim.BuildUser}, {35, sim.BuildUserdebug},
}

// doctorApps are the apps each device runs: debuggable, profileable
// only, release, held by a debugger, idle.
var doctorApps = []string{"com.example.dbg", "com.example.prof", "com.example.rel", "com.example.held", "com.example.idle"}

// newDoctorFarm serves one farm with every device of doctorDevices,
// each running doctorApps, through Debian's adb server.
func newDoctorFarm(t *testing.T) (*sim.Farm, string, map[string]string) {
	t.Helper()
	var apis []int
	for _, d := range doctorDevices {
		apis = append(apis, d.api)
	}
	f := newCaptureFarm(t, sim.FarmConfig{Devices: len(doctorDevices), AppsPerDevice: 0, APIs: apis, SerialPrefix: "doc",
		Device: func(i int, c *sim.DeviceConfig) { c.Build = doctorDevices[i].build }})
	for _, d := range f.Devices() {
		for _, pkg := range doctorApps {
			cfg := sim.AppConfig{Package: pkg, Workload: sim.DefaultWorkload()}
			switch pkg {
			case "com.example.prof":
				cfg.NotDebuggable, cfg.Profileable = true, true
			case "com.example.rel":
				cfg.NotDebuggable = true
			case "com.example.idle":
				cfg.Workload = quietCaptureWorkload()
			}
			vm, err := f.AddApp(d.Serial(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if pkg == "com.example.held" {
				vm.SetFaults(sim.Faults{DebuggerAttached: true})
			}
		}
	}
	addr, serials := serveRealADB(t, f)
	return f, addr, serials
}

// want is doctor's verdict for an app of doctorApps on a device: its
// kind, backend and a part of the reason ("" none), each from the facts
// docs/doctor.md cites.
func doctorWant(api int, build, pkg string) (kind, backend, reason string) {
	user := build == sim.BuildUser
	heldWhy := "closed the JDWP stream"
	if api >= 28 {
		heldWhy = "unanswered or was closed"
	}
	if api < doctor.APIHeapprofd {
		// run-as tells debuggable apps from the others.
		release := pkg == "com.example.prof" || pkg == "com.example.rel"
		switch {
		case pkg == "com.example.held":
			return doctor.KindDebuggable, doctor.BackendHeapdump, heldWhy
		case release && !user:
			return doctor.KindNeither, doctor.BackendDDM, "" // every app has JDWP (fact 5)
		case release:
			return doctor.KindNeither, doctor.BackendNone, "ro.debuggable=0"
		}
		return doctor.KindDebuggable, doctor.BackendDDM, ""
	}
	switch pkg {
	case "com.example.prof":
		return doctor.KindProfileable, doctor.BackendHeapprofd, ""
	case "com.example.rel":
		if user {
			return doctor.KindNeither, doctor.BackendNone, "not debuggable on a user build"
		}
		return doctor.KindNeither, doctor.BackendHeapdump, "neither debuggable nor profileable"
	}
	return doctor.KindDebuggable, doctor.BackendHeapprofd, ""
}

// TestDoctorFarm runs doctor (no live checks) on every device of the
// issue's list through Debian's adb server: each app's kind, JDWP list
// membership, held state, backend and reason, in JSON and in the table;
// the device facts; exit status 7, since release apps on user builds
// cannot work.
func TestDoctorFarm(t *testing.T) {
	f, addr, serials := newDoctorFarm(t)
	args := []string{"doctor", "--adb.address", addr, "--no-live", "--request.timeout", "2s"}
	// Every app listed has a backend (a held one, heap dumps): exit 0.
	if _, errOut, code := runCmd(t, args...); code != exitOK {
		t.Fatalf("without --package: exit %d: %s", code, errOut)
	}
	for _, p := range doctorApps {
		args = append(args, "--package", p)
	}
	out, errOut, code := runCmd(t, append(args, "--format", "json")...)
	if code != exitCannotWork {
		t.Fatalf("exit %d, want %d: %s%s", code, exitCannotWork, errOut, out)
	}
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	table, errOut, code := runCmd(t, args...)
	if code != exitCannotWork {
		t.Fatalf("table: exit %d: %s", code, errOut)
	}
	if len(rep.Devices) != len(doctorDevices) || rep.Works {
		t.Fatalf("%d devices, works %v: %s", len(rep.Devices), rep.Works, out)
	}
	for i, want := range doctorDevices {
		d := f.Devices()[i]
		var dr *deviceReport
		for j := range rep.Devices {
			if rep.Devices[j].Serial == serials[d.Serial()] {
				dr = &rep.Devices[j]
			}
		}
		if dr == nil {
			t.Fatalf("no report of %s", d.Serial())
		}
		checkDoctorDevice(t, *dr, want.api, want.build, table)
	}
}

func checkDoctorDevice(t *testing.T, dr deviceReport, api int, build, table string) {
	t.Helper()
	dbg := map[string]string{sim.BuildUser: "0", sim.BuildUserdebug: "1"}[build]
	release := map[int]string{19: "4.4", 23: "6.0", 28: "9", 30: "11", 31: "12", 33: "13", 35: "15"}[api]
	if dr.API != api || dr.Release != release || dr.Build != build || dr.Debuggable != dbg || dr.SELinux != "Enforcing" || dr.Error != "" {
		t.Errorf("device %+v, want API %d, %s build", dr.Device, api, build)
	}
	if (api >= doctor.APIHeapprofd) != (dr.Perfetto != "") || (api >= 24) != dr.HasFeature("shell_v2") || (api >= 29) != (dr.Traced == "running") {
		t.Errorf("API %d: perfetto %q, features %v, traced %q", api, dr.Perfetto, dr.Features, dr.Traced)
	}
	if dr.LeftBehind != nil || dr.LeftError != "" {
		t.Errorf("API %d: left behind %v (%s)", api, dr.LeftBehind, dr.LeftError)
	}
	if len(dr.Apps) != len(doctorApps) {
		t.Fatalf("API %d %s: apps %+v", api, build, dr.Apps)
	}
	for _, a := range dr.Apps {
		kind, backend, reason := doctorWant(api, build, a.Package)
		v := a.Verdict
		if a.Kind != kind || v.Backend != backend || !strings.Contains(v.Reason, reason) || (reason == "") != (v.Reason == "") {
			t.Errorf("API %d %s %s: %s (%s), %+v; want %s, %s with %q", api, build, a.Package, a.Kind, a.KindSource, v, kind, backend, reason)
		}
		held := a.Package == "com.example.held"
		if a.InJDWP && (a.Held != held || !a.HeldKnown) {
			t.Errorf("API %d %s %s: held %v (known %v)", api, build, a.Package, a.Held, a.HeldKnown)
		}
		row := fmt.Sprintf("%s %d %s", a.Package, a.PID, a.Kind)
		if !strings.Contains(strings.Join(strings.Fields(table), " "), row) {
			t.Errorf("the table has no row %q:\n%s", row, table)
		}
	}
}

// TestDoctorLiveChecks runs doctor's live checks through Debian's adb
// server: on Android 11 one DDM cycle (records of the report, its round
// trip, the tracker off after), on Android 13 one heapprofd dump (its
// samples), and with --heapdump one dump each (its bytes); an idle app
// passes with no record; nothing is left on the devices, and the VMs'
// trackers are off.
func TestDoctorLiveChecks(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 2, AppsPerDevice: 0, APIs: []int{30, 33}, SerialPrefix: "live"})
	for _, d := range f.Devices() {
		f.AddApp(d.Serial(), sim.AppConfig{Package: "com.example.dbg", Workload: sim.DefaultWorkload()})
		f.AddApp(d.Serial(), sim.AppConfig{Package: "com.example.idle", Workload: quietCaptureWorkload()})
	}
	addr, _ := serveRealADB(t, f)
	out, errOut, code := runCmd(t, "doctor", "--adb.address", addr, "--package", "com.example.dbg", "--package", "com.example.idle", "--heapdump", "--format", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, errOut, out)
	}
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, dr := range rep.Devices {
		if dr.LeftBehind != nil || dr.LeftError != "" || len(dr.Apps) != 2 {
			t.Errorf("API %d: left %v %s; apps %+v", dr.API, dr.LeftBehind, dr.LeftError, dr.Apps)
		}
		for _, a := range dr.Apps {
			checkLive(t, dr.API, a)
		}
	}
	for _, d := range f.Devices() {
		if left := append(d.Files("/data/local/tmp"), d.Files(sim.PerfettoTraceDir)...); len(left) > 0 {
			t.Errorf("%s: left on the device: %v", d.Serial(), left)
		}
		for _, vm := range d.VMs() {
			if vm.Tracking() {
				t.Errorf("%s %s: tracker left on", d.Serial(), vm.ProcessName())
			}
		}
	}
}

func checkLive(t *testing.T, api int, a appReport) {
	t.Helper()
	idle := a.Package == "com.example.idle"
	want := doctor.BackendDDM
	if api >= doctor.APIHeapprofd {
		want = doctor.BackendHeapprofd
	}
	if len(a.Checks) != 2 || a.Checks[0].Backend != want || a.Checks[1].Backend != doctor.BackendHeapdump {
		t.Fatalf("API %d %s: checks %+v", api, a.Package, a.Checks)
	}
	c, hd := a.Checks[0], a.Checks[1]
	if !c.OK || !hd.OK || hd.DumpBytes == 0 {
		t.Errorf("API %d %s: %+v, %+v", api, a.Package, c, hd)
	}
	switch {
	case want == doctor.BackendDDM && (c.TrackerOff == nil || !*c.TrackerOff || (c.Records == 0) != idle || c.RTTMs <= 0):
		t.Errorf("API %d %s: DDM check %+v", api, a.Package, c)
	case want == doctor.BackendHeapprofd && (c.Sessions != 1 || c.TraceBytes == 0 || (c.Dumps == 0) != idle || (c.Samples == 0) != idle || (c.Note == "") == idle):
		t.Errorf("API %d %s: heapprofd check %+v", api, a.Package, c)
	}
}

// TestDoctorExitStatus: 0 when everything asked for works; 7 for an app
// that is not running (its reason in the table), and for a file of
// alloctrack's left on the device (named); 2 for a bad flag and for
// --anonymize without --record, and without --package (the names to
// replace), leaving no file; 1 for a device not attached.
func TestDoctorExitStatus(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{30}, SerialPrefix: "exit", Workload: quietCaptureWorkload()})
	addr, _ := serveRealADB(t, f)
	base := []string{"doctor", "--adb.address", addr, "--no-live"}
	if _, errOut, code := runCmd(t, append(base, "--package", "com.example.app1")...); code != exitOK {
		t.Errorf("a debuggable app: exit %d: %s", code, errOut)
	}
	out, _, code := runCmd(t, append(base, "--package", "com.example.gone")...)
	if code != exitCannotWork || !strings.Contains(out, "com.example.gone is not running") {
		t.Errorf("an app not running: exit %d:\n%s", code, out)
	}
	left := "/data/local/tmp/alloctrack-1-2.hprof"
	f.Devices()[0].PutFile(left, []byte("x"))
	out, _, code = runCmd(t, base...)
	if code != exitCannotWork || !strings.Contains(out, "left behind: "+left) {
		t.Errorf("a file left: exit %d:\n%s", code, out)
	}
	if _, errOut, code := runCmd(t, append(base, "--format", "yaml")...); code != exitUsage {
		t.Errorf("--format yaml: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runCmd(t, append(base, "--anonymize")...); code != exitUsage || !strings.Contains(errOut, "--anonymize needs --record") {
		t.Errorf("--anonymize alone: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runCmd(t, append(base, "--serial", "nosuch")...); code != exitFailure || !strings.Contains(errOut, `no device "nosuch"`) {
		t.Errorf("--serial nosuch: exit %d: %s", code, errOut)
	}
	rec := t.TempDir() + "/t.transcript"
	_, errOut, code := runCmd(t, append(base, "--record", rec, "--anonymize")...)
	if _, err := os.Stat(rec); code != exitUsage || !strings.Contains(errOut, "--anonymize needs --package") || err == nil {
		t.Errorf("--record --anonymize without --package: exit %d, file %v: %s", code, err, errOut)
	}
}

// TestDoctorUnauthorized: a device adb lists as unauthorized is named
// with what to do on the phone, and exits 7; the other device is asked.
func TestDoctorUnauthorized(t *testing.T) {
	s := sim.NewHostServer()
	t.Cleanup(func() { s.Close() })
	for _, serial := range []string{"sim-ok", "sim-unauth"} {
		s.AddDevice(sim.NewDevice(sim.DeviceConfig{Serial: serial, API: 30}))
	}
	a, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.SetState("sim-unauth", "unauthorized")
	out, errOut, code := runCmd(t, "doctor", "--adb.address", a.String(), "--no-live")
	if code != exitCannotWork || !strings.Contains(out, "device sim-unauth") || !strings.Contains(out, "Allow USB debugging") ||
		!strings.Contains(out, "device sim-ok: ") || !strings.Contains(out, "build userdebug") {
		t.Errorf("exit %d: %s\n%s", code, errOut, out)
	}
}
