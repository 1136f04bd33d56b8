package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/sim"
)

// rig is a simulated farm whose devices are served over the adbd wire
// protocol and attached to a real adb server, with the daemon following
// that server.
type rig struct {
	farm   *sim.Farm
	adb    *adbtest.Server
	serial map[string]string // farm serial -> serial as adb names it (127.0.0.1:<port>)
	d      *daemon
}

// quietWorkload is the default workload with no timed allocations: the
// tests allocate with VM.Allocate, so no window ever overflows.
func quietWorkload() sim.Workload {
	w := sim.DefaultWorkload()
	w.Rate = 0
	return w
}

// newRig builds the farm of cfg, lets setup add to it, serves each device
// on a free loopback port, attaches them to a new adb server and starts
// the daemon (extra: more serve flags).
func newRig(t *testing.T, cfg sim.FarmConfig, setup func(*sim.Farm), extra ...string) *rig {
	t.Helper()
	r := attachFarm(t, cfg, setup)
	r.d = startDaemon(t, r.adb.Addr(), extra...)
	return r
}

// attachFarm is newRig without the daemon: the farm's devices attached to
// a new adb server.
func attachFarm(t *testing.T, cfg sim.FarmConfig, setup func(*sim.Farm)) *rig {
	t.Helper()
	adbtest.Binary(t) // skip early without adb
	r := &rig{farm: sim.NewFarm(cfg), serial: map[string]string{}}
	t.Cleanup(func() { r.farm.Close() })
	if setup != nil {
		setup(r.farm)
	}
	addrs, err := r.farm.ServeAdbd("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	r.adb = adbtest.StartServer(t)
	for i, d := range r.farm.Devices() {
		r.adb.Connect(t, addrs[i].String())
		r.serial[d.Serial()] = addrs[i].String()
	}
	return r
}

// app names the series of an app of a farm device.
func (r *rig) app(farmSerial, pkg string) app { return app{r.serial[farmSerial], pkg} }

// vm returns the live VM of package pkg on a farm device.
func (r *rig) vm(t testing.TB, farmSerial, pkg string) *sim.VM {
	t.Helper()
	for _, vm := range r.farm.Device(farmSerial).VMs() {
		if vm.ProcessName() == pkg && vm.Alive() {
			return vm
		}
	}
	t.Fatalf("no live %s on %s", pkg, farmSerial)
	return nil
}

// tracked is an app the daemon should track, with its farm serial.
type tracked struct {
	app
	farmSerial string
}

// trackable lists every live app of the farm whose API level has the
// allocation tracker (below 31).
func (r *rig) trackable() []tracked {
	var out []tracked
	for _, d := range r.farm.Devices() {
		for _, vm := range d.VMs() {
			if vm.Alive() && vm.Config().API < 31 {
				out = append(out, tracked{r.app(d.Serial(), vm.ProcessName()), d.Serial()})
			}
		}
	}
	return out
}

func appsOf(ts []tracked) []app {
	out := make([]app, len(ts))
	for i, a := range ts {
		out[i] = a.app
	}
	return out
}

// checkTrackingOff fails the test for every live VM of the farm that still
// has allocation tracking on, or that was ever sent a non-DDM JDWP command.
func (r *rig) checkTrackingOff(t testing.TB) {
	t.Helper()
	n := 0
	for _, d := range r.farm.Devices() {
		for _, vm := range d.VMs() {
			if !vm.Alive() {
				continue
			}
			n++
			if vm.Tracking() {
				t.Errorf("%s pid %d (%s): allocation tracking still on after the daemon exited", d.Serial(), vm.PID(), vm.ProcessName())
			}
			if st := vm.Stats(); st.NonDDM != 0 {
				t.Errorf("%s pid %d (%s): sent %d non-DDM JDWP commands", d.Serial(), vm.PID(), vm.ProcessName(), st.NonDDM)
			}
		}
	}
	t.Logf("%d simulated apps have tracking off", n)
}

// windowsOf converts a duration to windows, for reports.
func windowsOf(d time.Duration) string {
	return fmt.Sprintf("%.2f windows (%v)", d.Seconds()/window.Seconds(), d.Round(10*time.Millisecond))
}
