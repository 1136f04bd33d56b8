package doctor

import (
	"strings"
	"testing"
)

func dev(api int, build string) Device {
	d := Device{API: api, Build: build, Debuggable: "1", Perfetto: "v1", Traced: "running"}
	if build == "user" {
		d.Debuggable = "0"
	}
	return d
}

// TestDecide: each backend and each reason, with the fact it rests on.
func TestDecide(t *testing.T) {
	run := App{Package: "a", PID: 1}
	for _, tc := range []struct {
		name    string
		d       Device
		a       App
		backend string
		reason  string // a part of the reason; "" none
	}{
		{"too old", dev(18, "user"), run, BackendNone, "older than 4.4"},
		{"not running", dev(30, "user"), App{Package: "a"}, BackendNone, "not running"},
		{"ddm", dev(19, "user"), App{PID: 1, InJDWP: true, Kind: KindDebuggable}, BackendDDM, ""},
		{"ddm release on user", dev(28, "user"), App{PID: 1, Kind: KindNeither}, BackendNone, "ro.debuggable=0"},
		{"ddm held", dev(28, "user"), App{PID: 1, InJDWP: true, Held: true, Kind: KindDebuggable}, BackendHeapdump, "unanswered"},
		{"ddm held 4.4", dev(19, "user"), App{PID: 1, InJDWP: true, Held: true, Kind: KindDebuggable}, BackendHeapdump, "closed the JDWP stream"},
		{"heapprofd profileable", dev(31, "user"), App{PID: 1, Kind: KindProfileable}, BackendHeapprofd, ""},
		{"heapprofd release on user", dev(33, "user"), App{PID: 1, Kind: KindNeither}, BackendNone, "neither debuggable nor profileable"},
		{"heapprofd release on userdebug", dev(33, "userdebug"), App{PID: 1, Kind: KindNeither}, BackendHeapdump, "neither debuggable nor profileable"},
		{"no perfetto", Device{API: 31, Debuggable: "0"}, App{PID: 1, Kind: KindProfileable}, BackendNone, "only profileable"},
		{"traced stopped", Device{API: 33, Debuggable: "0", Perfetto: "v", Traced: "stopped"}, App{PID: 1, Kind: KindDebuggable}, BackendHeapdump, "init.svc.traced=stopped"},
	} {
		v := Decide(tc.d, tc.a)
		if v.Backend != tc.backend || !strings.Contains(v.Reason, tc.reason) || (tc.reason == "") != (v.Reason == "") || (v.Reason != "" && v.Fix == "") {
			t.Errorf("%s: %+v, want %s with %q", tc.name, v, tc.backend, tc.reason)
		}
	}
}

// TestKind: the sources of debuggable/profileable (docs/heapdumps.md fact 5).
func TestKind(t *testing.T) {
	prop := dev(35, "userdebug")
	prop.JDWPProp = "1"
	for _, tc := range []struct {
		d      Device
		inJDWP bool
		ta     *TrackApp
		ra     RunAs
		want   string
	}{
		{dev(33, "user"), false, &TrackApp{Listed: true, Profileable: true}, RunAsNotAsked, KindProfileable},
		{dev(33, "user"), false, &TrackApp{}, RunAsNotAsked, KindNeither},
		{dev(35, "user"), true, &TrackApp{Listed: true, Debuggable: true, Profileable: true}, RunAsNotAsked, KindDebuggable},
		{dev(28, "user"), true, nil, RunAsNotAsked, KindDebuggable},
		{dev(28, "user"), false, nil, RunAsNotAsked, KindNeither},
		{dev(28, "userdebug"), true, nil, RunAsNotAsked, KindUnknown},
		{dev(28, "userdebug"), true, nil, RunAsDebuggable, KindDebuggable},
		{dev(28, "userdebug"), true, nil, RunAsNotDebuggable, KindNeither},
		{dev(34, "userdebug"), true, nil, RunAsNotAsked, KindDebuggable},
		{prop, true, nil, RunAsNotAsked, KindUnknown},
		{dev(34, "eng"), true, nil, RunAsNotAsked, KindUnknown},
	} {
		if k, src := Kind(tc.d, tc.inJDWP, tc.ta, tc.ra); k != tc.want || src == "" {
			t.Errorf("%+v jdwp %v %+v: %s (%s), want %s", tc.d, tc.inJDWP, tc.ta, k, src, tc.want)
		}
	}
}

// TestStateReason: a device adb cannot talk to gets its state and the fix.
func TestStateReason(t *testing.T) {
	for state, want := range map[string]string{
		"device": "", "unauthorized": "Allow USB debugging", "offline": "adb kill-server",
		"no permissions (missing udev rules? user is in the plugdev group)": "udev rule", "recovery": "recovery",
	} {
		got := StateReason(state)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", state, got, want)
		}
	}
}
