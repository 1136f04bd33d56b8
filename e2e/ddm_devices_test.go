package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// TestDDMAsDevicesBehave runs three devices through the real adb server
// as their runtimes behave (docs/ddm-devices.md):
//
//   - an app another debugger holds on Android 8.0 (API 26: its VM closes
//     our connection) and on Android 10 (API 29: its VM leaves our
//     handshake unanswered), each shown held under its name from the
//     process list, with no hello error, and tracked exactly once the
//     debugger lets go;
//   - an app that starts while the daemon runs (HELO says "", then an APNM
//     says "<pre-initialized>", then its name), tracked under its real name
//     with exact totals, and never under either placeholder;
//   - an app waiting for a debugger (Android 11), shown waiting and left
//     free, so that a debugger's handshake is answered at once;
//   - a Dalvik app (Android 4.4) whose ring of 65,536 records fills, so its
//     report's u16 count wraps to 0 and travels in 4 KiB adbd messages:
//     counted exactly, as an overflowed window.
func TestDDMAsDevicesBehave(t *testing.T) {
	w := quietWorkload()
	setup := func(f *sim.Farm) {
		if _, err := f.AddApp("sim-3", sim.AppConfig{Package: "com.example.waits", WaitingForDebugger: true, Workload: w}); err != nil {
			t.Fatal(err)
		}
	}
	r := attachFarm(t, sim.FarmConfig{Devices: 4, AppsPerDevice: 2, APIs: []int{26, 29, 30, 19}, Workload: w}, setup)
	var debuggers []net.Conn
	var held []tracked
	for _, serial := range []string{"sim-1", "sim-2"} {
		vm := r.vm(t, serial, "com.example.app2")
		debuggers = append(debuggers, attachDebugger(t, r.adb, r.serial[serial], vm.PID()))
		held = append(held, tracked{r.app(serial, "com.example.app2"), serial})
	}
	r.d = startDaemon(t, r.adb.Addr(), "--held.retry", "2s", "--waiting.retry", "2s")
	free := []tracked{{r.app("sim-1", "com.example.app1"), "sim-1"}, {r.app("sim-2", "com.example.app1"), "sim-2"}}
	waiting := tracked{r.app("sim-3", "com.example.waits"), "sim-3"}

	r.d.waitState(t, appsOf(free), "tracking", 20*time.Second)
	r.d.waitState(t, appsOf(held), "held", 30*time.Second)
	r.d.waitState(t, []app{waiting.app}, "waiting", 20*time.Second)

	// An app starts while the daemon runs.
	lateVM, err := r.farm.AddApp("sim-2", sim.AppConfig{Package: "com.example.late", NameAfter: 1500 * time.Millisecond, Workload: w})
	if err != nil {
		t.Fatal(err)
	}
	late := tracked{r.app("sim-2", "com.example.late"), "sim-2"}
	r.d.waitState(t, []app{late.app}, "tracking", 30*time.Second)

	// A debugger for the waiting app is answered: the daemon leaves the
	// app free (one it held would refuse the handshake or never answer
	// it, and attachDebugger fails the test).
	dbg := attachDebugger(t, r.adb, r.serial["sim-3"], r.vm(t, "sim-3", "com.example.waits").PID())
	dbg.Close()
	if st := r.vm(t, "sim-3", "com.example.waits").Stats(); st.Enables != 0 {
		t.Errorf("tracking was turned on in the app waiting for a debugger (%d REAE 1)", st.Enables)
	}

	// The debuggers let go.
	for _, c := range debuggers {
		c.Close()
	}
	r.d.waitState(t, appsOf(held), "tracking", 60*time.Second)
	dalvik := tracked{r.app("sim-4", "com.example.app1"), "sim-4"}
	r.d.waitState(t, []app{dalvik.app}, "tracking", 20*time.Second)
	r.vm(t, "sim-4", "com.example.app1").Allocate(70000)
	waitFor(t, 30*time.Second, "the Dalvik app's full ring counted", func() (bool, string) {
		n := r.d.metrics(t).value("alloctrack_overflowed_windows_total", dalvik.labels()...)
		return n >= 1, fmt.Sprintf("%v overflowed windows", n)
	})
	tracked := append(append(append([]tracked{}, held...), free...), late, dalvik)
	allocate(t, r, tracked, rand.New(rand.NewPCG(7, 9)), 6)
	quiesce(t, r, nil, tracked)
	sc := r.d.metrics(t)
	for _, a := range tracked {
		_, reported := r.farm.Truth(a.farmSerial, a.pkg)
		got := sc.value("alloctrack_app_allocations_total", a.labels()...)
		if got != float64(reported.Total.Allocations) || got == 0 {
			t.Errorf("%v: counted %v allocations, its VMs reported %d", a.app, got, reported.Total.Allocations)
		}
	}
	for _, s := range sc {
		if s.name == "alloctrack_app_state" && (s.labels["package"] == "<pre-initialized>" || s.labels["package"] == "") {
			t.Errorf("an app is shown as %q", s.labels["package"])
		}
	}
	if n := sc.sum("alloctrack_device_errors_total", "stage", "hello"); n != 0 {
		t.Errorf("%v hello errors on the devices", n)
	}
	if n := sc.sum("alloctrack_app_errors_total", "stage", "hello"); n != 0 {
		t.Errorf("%v hello errors of apps", n)
	}
	if st := lateVM.Stats(); st.Connections == 0 {
		t.Error("the late app was never connected")
	}
	if code := r.d.shutdown(t); code != 0 {
		t.Errorf("daemon exit %d", code)
	}
	r.checkTrackingOff(t)
}
