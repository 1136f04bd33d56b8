package sim

import (
	"strings"
	"testing"
)

// TestRunAsTextsByVersion: run-as.c (to Android 7.1) says "Package 'X' is
// unknown" and exits with -ENOENT (254); run-as.cpp (8.0 on) says
// "unknown package: X" and exits 1. Both refuse a release app on stderr
// (system/core run-as, docs/doctor.md).
func TestRunAsTextsByVersion(t *testing.T) {
	for _, c := range []struct {
		api                 int
		unknown, notDebug   string
		codeUnknown, codeND int
	}{
		{23, "run-as: Package 'com.none' is unknown\n", "run-as: Package 'com.release' is not debuggable\n", 254, 1},
		{25, "run-as: Package 'com.none' is unknown\n", "run-as: Package 'com.release' is not debuggable\n", 254, 1},
		{26, "run-as: unknown package: com.none\n", "run-as: package not debuggable: com.release\n", 1, 1},
		{33, "run-as: unknown package: com.none\n", "run-as: package not debuggable: com.release\n", 1, 1},
	} {
		d := dumpRuleDevice(t, c.api, BuildUser, nil)
		out, errOut, code := d.runShellIO("run-as com.none true", nil)
		if len(out) > 0 || string(errOut) != c.unknown || code != c.codeUnknown {
			t.Errorf("API %d unknown: exit %d, out %q, err %q", c.api, code, out, errOut)
		}
		out, errOut, code = d.runShellIO("run-as com.release true", nil)
		if len(out) > 0 || string(errOut) != c.notDebug || code != c.codeND {
			t.Errorf("API %d release: exit %d, out %q, err %q", c.api, code, out, errOut)
		}
		if _, _, code = d.runShellIO("run-as com.debuggable true", nil); code != 0 {
			t.Errorf("API %d debuggable: exit %d", c.api, code)
		}
	}
}

// TestHeapprofdPropAtBoot: heapprofd is a disabled service; from Android
// 11 init runs heapprofd.rc's stop on two empty properties at boot, so
// init.svc.heapprofd is "stopped"; Android 10's init matches no empty
// value, the service was never started and the property does not exist.
func TestHeapprofdPropAtBoot(t *testing.T) {
	for api, want := range map[int]string{28: "", 29: "", 30: "stopped", 33: "stopped"} {
		d := dumpRuleDevice(t, api, BuildUser, nil)
		if got, ok := d.Props()["init.svc.heapprofd"]; got != want || ok != (want != "") {
			t.Errorf("API %d: init.svc.heapprofd %q (set %v), want %q", api, got, ok, want)
		}
	}
}

// TestPerfettoVersionOption: perfetto has --version from Android 12 and
// prints "Perfetto vN.M (N/A)" (an Android build has no git revision);
// Android 9 to 11's perfetto rejects the option with usage and status 1.
func TestPerfettoVersionOption(t *testing.T) {
	for api, want := range map[int]string{28: "", 30: "", 31: "Perfetto v16.0 (N/A)\n", 33: "Perfetto v22.0 (N/A)\n"} {
		d := dumpRuleDevice(t, api, BuildUser, nil)
		out, errOut, code := d.runShellIO("perfetto --version", nil)
		if want == "" {
			if code != 1 || len(out) > 0 || !strings.Contains(string(errOut), "--version") {
				t.Errorf("API %d: exit %d, out %q, err %q; want a refusal", api, code, out, errOut)
			}
			continue
		}
		if code != 0 || string(out) != want {
			t.Errorf("API %d: exit %d, out %q; want %q", api, code, out, want)
		}
	}
}

// TestDumpheapUnableToOpenStatus: a FILE am cannot open: to 7.1 Am.java
// prints the error and returns, so am exits 0 (the hint "Consider using…"
// came with 7.0); from 8.0 the shell command returns -1, status 255.
func TestDumpheapUnableToOpenStatus(t *testing.T) {
	for _, c := range []struct {
		api, code int
		hint      bool
	}{{23, 0, false}, {24, 0, true}, {25, 0, true}, {26, 255, true}, {33, 255, true}} {
		d := dumpRuleDevice(t, c.api, BuildUser, nil)
		_, errOut, code := d.runShellIO("am dumpheap 100 /sdcard/x.hprof", nil)
		text := string(errOut)
		if code != c.code || !strings.HasPrefix(text, "Error: Unable to open file: /sdcard/x.hprof\n") || strings.Contains(text, "Consider using") != c.hint {
			t.Errorf("API %d: exit %d, %q", c.api, code, text)
		}
	}
}

// TestDumpsysVersionNameNull: an app whose manifest names no versionName
// is dumped as versionName=null (println of a null String).
func TestDumpsysVersionNameNull(t *testing.T) {
	d := dumpRuleDevice(t, 33, BuildUser, nil)
	d.SetAppVersion("com.debuggable", AppVersion{Code: 3})
	out, _, code := d.runShellIO("dumpsys package com.debuggable", nil)
	if code != 0 || !strings.Contains(string(out), "\n    versionName=null\n") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}
