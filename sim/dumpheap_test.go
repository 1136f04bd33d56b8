package sim

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// dumpRuleDevice is a device of api and build (and props) with a
// debuggable app (pid 100), a profileable one (101) and one built for
// release (102).
func dumpRuleDevice(t *testing.T, api int, build string, props map[string]string) *Device {
	t.Helper()
	d := NewDevice(DeviceConfig{Serial: "sim-rule", API: api, Build: build, Props: props})
	t.Cleanup(d.Close)
	for _, a := range []AppConfig{
		{PID: 100, Package: "com.debuggable"},
		{PID: 101, Package: "com.profileable", NotDebuggable: true, Profileable: true},
		{PID: 102, Package: "com.release", NotDebuggable: true},
	} {
		a.Workload = Workload{Rate: 0}
		d.AddVM(NewVM(a, api))
	}
	return d
}

var jdwpOn = map[string]string{PropJDWPEnabled: "1"}

// TestJDWPListByBuild: who is in the JDWP list (track-jdwp, jdwp:<pid>)
// follows Zygote's rule (fact 5): up to Android 13 every app on a
// ro.debuggable=1 build; on 14 eng builds, or the property; on 15 eng
// builds, or userdebug with the property; debuggable apps always.
func TestJDWPListByBuild(t *testing.T) {
	all, debuggable := []int{100, 101, 102}, []int{100}
	for _, c := range []struct {
		api   int
		build string
		props map[string]string
		want  []int
	}{
		{30, BuildUserdebug, nil, all},
		{33, BuildEng, nil, all},
		{30, BuildUser, nil, debuggable},
		{33, BuildUser, jdwpOn, debuggable},
		{34, BuildUserdebug, nil, debuggable},
		{34, BuildUserdebug, jdwpOn, all},
		{34, BuildUser, jdwpOn, all},
		{34, BuildEng, nil, all},
		{35, BuildUserdebug, nil, debuggable},
		{35, BuildUserdebug, jdwpOn, all},
		{35, BuildUser, jdwpOn, debuggable},
		{35, BuildEng, nil, all},
	} {
		d := dumpRuleDevice(t, c.api, c.build, c.props)
		name := fmt.Sprintf("API %d %s %v", c.api, c.build, c.props)
		if got := d.PIDs(); !slices.Equal(got, c.want) {
			t.Errorf("%s: JDWP list %v, want %v", name, got, c.want)
		}
		for _, pid := range all {
			conn, err := d.OpenService(fmt.Sprintf("jdwp:%d", pid))
			if err == nil {
				conn.Close()
			}
			if (err == nil) != slices.Contains(c.want, pid) {
				t.Errorf("%s: jdwp:%d: %v", name, pid, err)
			}
		}
		if p := d.Props(); p["ro.build.type"] != c.build || (p["ro.debuggable"] == "1") != (c.build != BuildUser) {
			t.Errorf("%s: ro.build.type %q, ro.debuggable %q", name, p["ro.build.type"], p["ro.debuggable"])
		}
	}
	if p := NewDevice(DeviceConfig{}).Props(); p["ro.build.type"] != "userdebug" || p["ro.debuggable"] != "1" {
		t.Errorf("default build: %v", p)
	}
}

// TestDumpheapRule: am dumpheap dumps a debuggable app, or any app on a
// ro.debuggable=1 build, whatever the JDWP list says (fact 4): on a 14
// or 15 userdebug build without the property, apps outside the JDWP list
// are dumped; on a user build only the debuggable one.
func TestDumpheapRule(t *testing.T) {
	for _, api := range []int{25, 30, 34, 35} {
		for _, build := range []string{BuildUser, BuildUserdebug} {
			d := dumpRuleDevice(t, api, build, nil)
			for _, pid := range []int{100, 101, 102} {
				file := fmt.Sprintf("/data/local/tmp/%d.hprof", pid)
				out, errOut, code := d.runShellIO(fmt.Sprintf("am dumpheap %d %s", pid, file), nil)
				want := pid == 100 || build != BuildUser
				refused := strings.Contains(string(errOut), "Process not debuggable")
				if refused == want || want && code != 0 {
					t.Errorf("API %d %s pid %d: exit %d %q %q; want dumped %v", api, build, pid, code, out, errOut, want)
				}
				if want {
					waitFor(t, func() bool { b, _ := d.File(file); return bytes.HasPrefix(b, []byte("JAVA PROFILE")) })
				}
			}
		}
	}
}

// TestDumpheapErrorTexts: am dumpheap's refusals as each version prints
// them (fact 11), and the empty file the shell leaves from Android 8.
func TestDumpheapErrorTexts(t *testing.T) {
	for _, c := range []struct {
		api                   int
		unknown, notDebug     string // the line that says it
		codeUnknown, codeSec  int
		header                string // the line before, if any
		procName, leavesEmpty bool
	}{
		{23, "Error: Unknown process: 999", "java.lang.SecurityException: Process not debuggable: ProcessRecord{", 0, 1, "", false, false},
		{25, "Error: Unknown process: 999", "java.lang.SecurityException: Process not debuggable: ProcessRecord{", 0, 1, "", false, false},
		{28, "java.lang.IllegalArgumentException: Unknown process: 999", "Security exception: Process not debuggable: ProcessRecord{", 255, 255, "Exception occurred while executing:", false, true},
		{30, "java.lang.IllegalArgumentException: Unknown process: 999", "java.lang.SecurityException: Process not debuggable: ProcessRecord{", 255, 255, "Exception occurred while executing 'dumpheap':", false, true},
		{34, "java.lang.IllegalArgumentException: Unknown process: 999", "java.lang.SecurityException: Process not debuggable: com.release", 255, 255, "Exception occurred while executing 'dumpheap':", true, true},
		{35, "java.lang.IllegalArgumentException: Unknown process: 999", "java.lang.SecurityException: Process not debuggable: com.release", 255, 255, "Exception occurred while executing 'dumpheap':", true, true},
	} {
		d := dumpRuleDevice(t, c.api, BuildUser, nil)
		out, errOut, code := d.runShellIO("am dumpheap 999 /data/local/tmp/u.hprof", nil)
		text := string(out) + string(errOut)
		if code != c.codeUnknown || !strings.Contains(text, "\n"+c.unknown+"\n") || !strings.Contains(text, c.header) || (c.api < 26) != strings.HasPrefix(text, "usage: am") {
			t.Errorf("API %d unknown process: exit %d\n%s", c.api, code, text)
		}
		if b, ok := d.File("/data/local/tmp/u.hprof"); ok != c.leavesEmpty || len(b) > 0 {
			t.Errorf("API %d unknown process: file left %v (%d bytes)", c.api, ok, len(b))
		}
		out, errOut, code = d.runShellIO("am dumpheap 102 /data/local/tmp/r.hprof", nil)
		text = string(out) + string(errOut)
		if code != c.codeSec || !strings.Contains(text, c.notDebug) || c.api >= 30 && !strings.Contains(text, c.header) || strings.Contains(text, "ProcessRecord") == c.procName {
			t.Errorf("API %d not debuggable: exit %d\n%s", c.api, code, text)
		}
		if c.api == 28 && !strings.HasPrefix(text, "Security exception: ") {
			t.Errorf("API 28 not debuggable: %q", text)
		}
	}
}

// TestDumpheapFaults: how a dump goes wrong (fact 12). Before Android 10
// am returns at once; a failed dump leaves 0 bytes, a dead app a file that
// stopped half-way, a blocked main thread an empty file until it is free,
// a pause a file that grows again. From 10 am returns only when the app
// says it is done: after a failed dump (empty file), never for a dead
// app, once a blocked main thread is free.
func TestDumpheapFaults(t *testing.T) {
	const file = "/data/local/tmp/f.hprof"
	size := func(d *Device) int { b, _ := d.File(file); return len(b) }
	for _, api := range []int{28, 30} {
		d := dumpRuleDevice(t, api, BuildUserdebug, nil)
		vm := d.VM(100)
		vm.SetFaults(Faults{HeapDump: DumpFails})
		if _, _, code := d.runShellIO("am dumpheap 100 "+file, nil); code != 0 {
			t.Errorf("API %d failing dump: exit %d", api, code)
		}
		waitFor(t, func() bool { return size(d) > 0 || api >= 30 })
		waitFor(t, func() bool { return size(d) == 0 })
		vm.SetFaults(Faults{HeapDump: DumpPauses})
		d.runShellIO("am dumpheap 100 "+file, nil)
		if api < 30 {
			waitFor(t, func() bool { return size(d) > 0 })
			half := size(d)
			waitFor(t, func() bool { return size(d) > half })
		}
		if b, _ := d.File(file); !bytes.HasPrefix(b, []byte("JAVA PROFILE")) || b[len(b)-9] != 0x2C {
			waitFor(t, func() bool { b, _ := d.File(file); return len(b) > 9 && b[len(b)-9] == 0x2C })
		}
		vm.SetFaults(Faults{HeapDump: DumpBlocked})
		d.runShellIO("rm -f "+file, nil)
		freed := make(chan bool, 1)
		returned := make(chan bool)
		go func() {
			d.runShellIO("am dumpheap 100 "+file, nil)
			returned <- len(freed) == 1
		}()
		if api < 30 {
			<-returned // am does not wait for the app
		}
		waitFor(t, func() bool { _, ok := d.File(file); return ok })
		if size(d) != 0 {
			t.Errorf("API %d: a blocked app wrote %d bytes", api, size(d))
		}
		freed <- true
		vm.SetFaults(Faults{})
		if api >= 30 && !<-returned {
			t.Errorf("API %d: am returned while the main thread was blocked", api)
		}
		waitFor(t, func() bool { b, _ := d.File(file); return len(b) > 9 && b[len(b)-9] == 0x2C })
		vm.SetFaults(Faults{HeapDump: DumpDies})
		go func() {
			d.runShellIO("am dumpheap 100 "+file, nil)
			returned <- true
		}()
		if api < 30 {
			<-returned
		}
		waitFor(t, func() bool { return d.VM(100) == nil })
		if b, _ := d.File(file); len(b) == 0 || b[len(b)-9] == 0x2C {
			t.Errorf("API %d: a dead app's dump has %d bytes, or is complete", api, len(b))
		}
		d.Close()
		if api >= 30 {
			<-returned // am waited until the device stopped
		}
	}
}
