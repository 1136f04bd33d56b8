package e2e

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/jdwp"
	"github.com/alloctrack/alloctrack/sim"
)

// attachDebugger opens jdwp:<pid> on a device through the adb server and
// completes the JDWP handshake, as Android Studio does, and keeps the
// stream: the app is held until the returned conn is closed (at the end
// of the test at the latest).
func attachDebugger(t *testing.T, srv *adbtest.Server, serial string, pid int) net.Conn {
	t.Helper()
	c := srv.Dial(t)
	c.SetDeadline(time.Now().Add(testwait.Bound))
	if err := adbtest.Request(c, "host:transport:"+serial); err != nil {
		t.Fatal(err)
	}
	if err := adbtest.Request(c, fmt.Sprintf("jdwp:%d", pid)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, jdwp.Handshake); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, len(jdwp.Handshake))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != jdwp.Handshake {
		t.Fatalf("debugger handshake with pid %d on %s: %q %v", pid, serial, b, err)
	}
	c.SetDeadline(time.Time{})
	return c
}

// TestHeldBeforeFirstSeen: a second debugger holds one app on each device
// (Android 5.0 with toolbox ps, Android 11 with toybox ps) through the real
// adb server before the daemon starts. The daemon's handshake is refused
// (Android 5) or never answered (Android 11), so the VM never names the app; the daemon names it from the device's
// process list, shows it as held with its pid (and counts no unnamed
// error), and tracks it once the debugger lets go.
func TestHeldBeforeFirstSeen(t *testing.T) {
	r := attachFarm(t, sim.FarmConfig{Devices: 2, AppsPerDevice: 2, APIs: []int{21, 30}, Workload: quietWorkload()}, nil)
	var heldApps, freeApps []app
	var debuggers []net.Conn
	var heldVMs []*sim.VM
	for _, d := range r.farm.Devices() {
		vm := r.vm(t, d.Serial(), "com.example.app2")
		debuggers = append(debuggers, attachDebugger(t, r.adb, r.serial[d.Serial()], vm.PID()))
		heldVMs = append(heldVMs, vm)
		heldApps = append(heldApps, r.app(d.Serial(), "com.example.app2"))
		freeApps = append(freeApps, r.app(d.Serial(), "com.example.app1"))
	}
	r.d = startDaemon(t, r.adb.Addr(), "--held.retry", "2s")

	r.d.waitState(t, freeApps, "tracking", 20*time.Second)
	took := r.d.waitState(t, heldApps, "held", 20*time.Second)
	t.Logf("held apps shown as held %v after the daemon was ready", took.Round(10*time.Millisecond))
	sc := r.d.metrics(t)
	for i, a := range heldApps {
		if pid := sc.value("alloctrack_app_pid", a.labels()...); pid != float64(heldVMs[i].PID()) {
			t.Errorf("%v: alloctrack_app_pid %v, want %d", a, pid, heldVMs[i].PID())
		}
		if v := sc.value("alloctrack_app_tracking", a.labels()...); v != 0 {
			t.Errorf("%v: alloctrack_app_tracking %v while held", a, v)
		}
		if n := sc.value("alloctrack_device_errors_total", "serial", a.serial, "stage", "hello"); n != 0 {
			t.Errorf("%v: alloctrack_device_errors_total{stage=\"hello\"} %v, want 0: the held app was named", a, n)
		}
		// Android 5 refuses a second client; Android 11 leaves it unread.
		if st := heldVMs[i].Stats(); st.Refused+st.Queued+st.Stale == 0 || st.Connections != 1 {
			t.Errorf("%v: the VM refused %d connections, left %d unread and served %d; want some refused or unread and only the debugger's served", a, st.Refused, st.Queued+st.Stale, st.Connections)
		}
	}

	// The debuggers let go.
	for _, c := range debuggers {
		c.Close()
	}
	took = r.d.waitState(t, heldApps, "tracking", 60*time.Second)
	r.d.waitWindows(t, heldApps, 1, 20*time.Second)
	t.Logf("tracking %v after the debuggers let go", took.Round(10*time.Millisecond))
	if err := r.d.shutdown(t); err != 0 {
		t.Fatalf("daemon exit %d", err)
	}
	r.checkTrackingOff(t)
}
