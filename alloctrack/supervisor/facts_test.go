package supervisor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/sim"
)

// TestDaemonFactsSlowGetprop: a device whose getprop answers only after
// the request timeout, three times, is shown with facts unknown (its
// error counted and kept), given no backend meanwhile, and once its API
// level is read it gets the backend that level calls for: an Android 12
// device with --backend auto is watched through heapprofd, never run
// with DDM as API 0 and shown unsupported.
func TestDaemonFactsSlowGetprop(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{31}})
	const serial, pkg = "sim-1", "com.example.app1"
	cfg := daemonConfig()
	cfg.Backend = alloctrack.BackendAuto
	// Longer than the first tries' timeouts (300, 600 and 1,200 ms).
	farm.Device(serial).StallGetprop(3, 3*time.Second)
	r := startDaemon(t, farm, cfg)

	eventually(t, "facts unknown, with the error, in the snapshot and /metrics", func() bool {
		dv, _ := r.device(serial)
		return dv.Facts == alloctrack.FactsUnknown && dv.FactsError != "" && dv.Errors[alloctrack.StageFacts] > 0 &&
			strings.Contains(r.scrape(t), `alloctrack_device_facts{facts="unknown",serial="`+serial+`",server="`+r.addr+`"} 1`)
	})
	if dv, _ := r.device(serial); dv.API != 0 || len(r.d.Snapshot().Apps) != 0 {
		t.Errorf("facts unknown, yet API %d and apps %+v", dv.API, r.d.Snapshot().Apps)
	}
	eventually(t, "facts known and the app watched through heapprofd", func() bool {
		dv, _ := r.device(serial)
		a, ok := r.app(serial, pkg)
		return dv.Facts == alloctrack.FactsKnown && dv.API == 31 && dv.FactsError == "" && ok && a.Backend == alloctrack.BackendHeapprofd
	})
	a, _ := r.app(serial, pkg)
	if a.State == alloctrack.StateUnsupported {
		t.Errorf("app shown %s", a.State)
	}
	for _, vm := range farm.Device(serial).VMs() {
		if n := vm.Stats().Connections; n != 0 {
			t.Errorf("%s: %d JDWP connections; an Android 12 device with --backend auto gets none", vm.ProcessName(), n)
		}
	}
}

// TestDaemonFactsNoBackendOnUnknownAPI: with --backend ddm too, a device
// whose API level is unknown gets no session; once its level is read, it
// gets one.
func TestDaemonFactsNoBackendOnUnknownAPI(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{30}})
	const serial, pkg = "sim-1", "com.example.app1"
	farm.Device(serial).StallGetprop(2, 3*time.Second)
	r := startDaemon(t, farm, daemonConfig())
	eventually(t, "facts unknown", func() bool {
		dv, _ := r.device(serial)
		return dv.Facts == alloctrack.FactsUnknown && dv.Errors[alloctrack.StageFacts] > 0
	})
	for _, vm := range farm.Device(serial).VMs() {
		if n := vm.Stats().Connections; n != 0 {
			t.Errorf("%s: %d JDWP connections while the device's facts are unknown", vm.ProcessName(), n)
		}
	}
	eventually(t, "API 30 read and the app tracking", func() bool {
		dv, _ := r.device(serial)
		return dv.Facts == alloctrack.FactsKnown && dv.API == 30 && r.tracking(serial, pkg, 1)
	})
}

// TestDaemonFactsUnsupportedOnlyOnceRead: with --backend ddm, an Android
// 12 device whose API level cannot be read yet has no app shown, let
// alone unsupported, and no JDWP connection; once the level is read, its
// app is shown unsupported (REAQ unanswered on a known 12+ device: the
// evidence issue 33 asks for).
func TestDaemonFactsUnsupportedOnlyOnceRead(t *testing.T) {
	farm := newFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{31}})
	const serial, pkg = "sim-1", "com.example.app1"
	farm.Device(serial).StallGetprop(2, 3*time.Second)
	r := startDaemon(t, farm, daemonConfig()) // --backend ddm
	eventually(t, "facts unknown", func() bool {
		dv, _ := r.device(serial)
		return dv.Facts == alloctrack.FactsUnknown && dv.Errors[alloctrack.StageFacts] > 0
	})
	if apps := r.d.Snapshot().Apps; len(apps) != 0 {
		t.Errorf("facts unknown, yet apps shown: %+v", apps)
	}
	for _, vm := range farm.Device(serial).VMs() {
		if n := vm.Stats().Connections; n != 0 {
			t.Errorf("%s: %d JDWP connections while the device's facts are unknown", vm.ProcessName(), n)
		}
	}
	eventually(t, "API 31 read and the app shown unsupported", func() bool {
		dv, _ := r.device(serial)
		a, ok := r.app(serial, pkg)
		return dv.Facts == alloctrack.FactsKnown && dv.API == 31 && ok && a.State == alloctrack.StateUnsupported
	})
}
