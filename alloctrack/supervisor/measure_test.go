package supervisor_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/sim"
)

// TestMeasureChurn measures what 300 serials churned through one device
// (wireless debugging's ip:port on every reconnect) leave in the daemon
// and in /metrics with the default retention (1 h) and --devices.max-gone
// (64): docs/serve.md quotes it. It takes a minute or so; run it with
// ALLOCTRACK_MEASURE_CHURN=1 go test -run TestMeasureChurn -v ./alloctrack/supervisor/
func TestMeasureChurn(t *testing.T) {
	if os.Getenv("ALLOCTRACK_MEASURE_CHURN") == "" {
		t.Skip("set ALLOCTRACK_MEASURE_CHURN=1")
	}
	const n = 300
	serial := func(i int) string { return fmt.Sprintf("192.0.2.7:%d", 40001+i) }
	farm := newFarm(sim.FarmConfig{Devices: n, AppsPerDevice: 1, Device: func(i int, c *sim.DeviceConfig) { c.Serial = serial(i) }})
	r := startDaemon(t, farm, daemonConfig())
	for i := 1; i < n; i++ {
		if err := farm.Disconnect(serial(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		eventually(t, serial(i)+" tracking", func() bool { return r.tracking(serial(i), "com.example.app1", 1) })
		if i == n-1 {
			break
		}
		if err := farm.Disconnect(serial(i)); err != nil {
			t.Fatal(err)
		}
		if err := farm.Reconnect(serial(i + 1)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "at most 64 gone devices and the present one", func() bool { return len(r.d.Snapshot().Devices) <= 65 })
	m := r.scrape(t)
	lines := 0
	for l := range strings.Lines(m) {
		if !strings.HasPrefix(l, "#") {
			lines++
		}
	}
	s := r.d.Snapshot()
	t.Logf("after %d serials: %d devices, %d apps, /metrics %d sample lines, %d bytes, %d with a serial", n, len(s.Devices), len(s.Apps), lines, len(m), strings.Count(m, `serial="`))
	for i := range n - 1 {
		dev := farm.Device(serial(i))
		for _, vm := range dev.VMs() {
			setTracking(t, dev, vm, false)
		}
	}
}
