package doctor

import (
	"fmt"
	"strings"
)

// API levels of the rules (docs/doctor.md cites each).
const (
	// APIMin is the oldest Android alloctrack speaks to (4.4).
	APIMin = 19
	// APIHeapprofd is the first API level whose apps alloctrack watches
	// through heapprofd (Android 12); below it, DDM.
	APIHeapprofd = 31
	// APIJDWPProp is the first API level (Android 14) where a debuggable
	// build no longer gives every app JDWP by itself: the property
	// persist.debug.dalvik.vm.jdwp.enabled does (docs/heapdumps.md fact 5).
	APIJDWPProp = 34
)

// Backends, as doctor names them.
const (
	BackendDDM       = "ddm"
	BackendHeapprofd = "heapprofd"
	BackendHeapdump  = "heapdump"
	BackendNone      = "none"
)

// Kinds of an app, as far as the device says.
const (
	KindDebuggable  = "debuggable"
	KindProfileable = "profileable" // profileable from the shell, not debuggable
	KindNeither     = "neither"
	KindUnknown     = "unknown"
)

// Device holds what doctor learnt of one device. Empty strings are facts
// not learnt (a property not set, a command not there).
type Device struct {
	Serial     string   `json:"serial"`
	Model      string   `json:"model"`
	API        int      `json:"api"`
	Release    string   `json:"release"`
	Build      string   `json:"build_type"`      // ro.build.type
	Debuggable string   `json:"ro_debuggable"`   // ro.debuggable
	SELinux    string   `json:"selinux"`         // getenforce
	Features   []string `json:"adbd_features"`   // host-serial:<s>:features
	Perfetto   string   `json:"perfetto"`        // perfetto --version, first line; "" not there
	Traced     string   `json:"traced"`          // init.svc.traced
	Heapprofd  string   `json:"heapprofd"`       // init.svc.heapprofd
	JDWPProp   string   `json:"jdwp_enabled"`    // persist.debug.dalvik.vm.jdwp.enabled (14+)
	Error      string   `json:"error,omitempty"` // the device could not be asked
}

// App holds what doctor learnt of one app process.
type App struct {
	Package string `json:"package"`
	PID     int    `json:"pid"` // 0: not running
	Kind    string `json:"kind"`
	// KindSource says where Kind comes from (track-app, the JDWP list on
	// a user build, ...).
	KindSource string `json:"kind_source"`
	InJDWP     bool   `json:"in_jdwp_list"`
	// Held: a debugger holds the VM (its handshake unanswered or closed).
	// HeldKnown is false when nobody asked (not in the JDWP list).
	Held      bool `json:"held"`
	HeldKnown bool `json:"held_known"`
}

// Verdict is the backend alloctrack would use for an app, why not a
// better one, and what the user can change.
type Verdict struct {
	Backend string `json:"backend"`
	// Reason says why the version's own backend (DDM up to Android 11,
	// heapprofd from 12) cannot be used; empty when it can.
	Reason string `json:"reason,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// Works reports whether some backend works.
func (v Verdict) Works() bool { return v.Backend != BackendNone }

// roDebuggable reports ro.debuggable=1: am dumpheap dumps any app
// (docs/heapdumps.md fact 4).
func (d Device) roDebuggable() bool { return d.Debuggable == "1" }

// Decide picks the backend for app a on device d.
func Decide(d Device, a App) Verdict {
	switch {
	case d.API < APIMin:
		return Verdict{Backend: BackendNone, Reason: fmt.Sprintf("Android API %d is older than 4.4 (API %d), the oldest alloctrack speaks to", d.API, APIMin), Fix: "use a device with Android 4.4 or later"}
	case a.PID == 0:
		return Verdict{Backend: BackendNone, Reason: fmt.Sprintf("%s is not running", a.Package), Fix: "start the app, then run doctor again"}
	case d.API < APIHeapprofd:
		return decideDDM(d, a)
	}
	return decideHeapprofd(d, a)
}

// decideDDM: Android 4.4 to 11 track through DDM over JDWP.
func decideDDM(d Device, a App) Verdict {
	if !a.InJDWP {
		why := "not in the device's JDWP list, so DDM cannot reach it: " + notJDWPWhy(d)
		return fallback(d, a, why, "install a debuggable build of the app (android:debuggable=\"true\")"+orUserdebug(d))
	}
	if a.Held {
		why := "another debugger holds the VM (" + heldHow(d) + "); ART takes one JDWP client at a time"
		return fallback(d, a, why, "detach the other debugger (Android Studio, another alloctrack, jdb), then run doctor again")
	}
	return Verdict{Backend: BackendDDM}
}

// decideHeapprofd: Android 12+ track through perfetto's heapprofd, for
// apps track-app lists (debuggable or profileable).
func decideHeapprofd(d Device, a App) Verdict {
	switch {
	case d.Perfetto == "":
		return fallback(d, a, "the device has no perfetto command", "use a device image that has perfetto (every Android 12+ image from Google does)")
	case d.Traced != "" && d.Traced != "running":
		return fallback(d, a, fmt.Sprintf("the tracing service is not running (init.svc.traced=%s)", d.Traced), "adb shell setprop persist.traced.enable 1")
	case a.Kind == KindNeither:
		return fallback(d, a, "neither debuggable nor profileable (track-app does not list it), and alloctrack profiles only apps track-app lists",
			"add <profileable android:shell=\"true\"/> to the app's manifest, or install a debuggable build")
	}
	return Verdict{Backend: BackendHeapprofd}
}

// fallback is the verdict when the version's backend cannot be used:
// heap dumps where am dumpheap would dump the app (docs/heapdumps.md fact
// 4: a debuggable app, or any app on a ro.debuggable=1 build), else none.
func fallback(d Device, a App, why, fix string) Verdict {
	if MayDump(d, a) {
		return Verdict{Backend: BackendHeapdump, Reason: why, Fix: fix}
	}
	if a.Kind == KindProfileable {
		why += "; am dumpheap refuses an app that is only profileable on a user build"
	} else {
		why += "; am dumpheap refuses an app that is not debuggable on a user build (ro.debuggable=0)"
	}
	return Verdict{Backend: BackendNone, Reason: why, Fix: fix}
}

// notJDWPWhy says why an app is not in the JDWP list (docs/heapdumps.md
// fact 5).
func notJDWPWhy(d Device) string {
	switch {
	case !d.roDebuggable():
		return "the app is not debuggable, and on a user build (ro.debuggable=0) only debuggable apps have JDWP"
	case d.API < APIJDWPProp:
		return "the app is not debuggable (this ro.debuggable=1 build should list every app: is it a VM at all?)"
	}
	return "the app is not debuggable, and from Android 14 a debuggable build gives other apps JDWP only on eng builds or with persist.debug.dalvik.vm.jdwp.enabled=1"
}

func orUserdebug(d Device) string {
	if d.roDebuggable() {
		return ""
	}
	return ", or use a userdebug or eng build of Android"
}

// heldHow says how the device showed the VM held (docs/ddm-devices.md).
func heldHow(d Device) string {
	if d.API >= 28 {
		return "the JDWP handshake went unanswered or was closed, as ART does from Android 9 while another client holds the app"
	}
	return "the VM closed the JDWP stream at the handshake, as ART does before Android 9 while another client holds the app"
}

// HasFeature reports whether adbd offers feature f.
func (d Device) HasFeature(f string) bool {
	for _, x := range d.Features {
		if x == f {
			return true
		}
	}
	return false
}

// FeatureList is the features joined for a table cell.
func (d Device) FeatureList() string { return strings.Join(d.Features, ",") }

// MayDump reports whether am dumpheap would dump the app
// (docs/heapdumps.md fact 4): a debuggable app, or any app on a
// ro.debuggable=1 build.
func MayDump(d Device, a App) bool {
	return a.PID != 0 && (a.Kind == KindDebuggable || d.roDebuggable())
}
