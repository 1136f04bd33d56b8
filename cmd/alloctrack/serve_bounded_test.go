package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
	"github.com/alloctrack/alloctrack/web"
)

// serve with --tests.recent 2 follows a suite of 24 tests, so that its
// attributor drops most of them as the run goes (pertest.Attributor.Taken):
// the page still shows the last two with the simulator's exact figures,
// and alloctrack_tests_total counts every test by its outcome.
func TestServeRecentTestsBounded(t *testing.T) {
	farm := sim.NewFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{29}, Workload: sim.DefaultWorkload()})
	t.Cleanup(func() { farm.Close() })
	const serial, pkg = "sim-1", "com.example.app1"
	suite := sim.SeededSuite(pkg+".test", pkg, sim.SeedSpec{Tests: 24, Seed: 5, FailEvery: 3, IgnoreEvery: 7})
	suite.StartDelay = 2 * time.Second // the daemon's session is on before the first test
	if err := farm.Device(serial).InstallSuite(suite); err != nil {
		t.Fatal(err)
	}
	addr, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A window of 5 minutes: the tracker cycles only after finished:
	// lines, so no test crosses a cycle and every test is exact.
	base, stop, _ := startServe(t, "--adb.address", addr.String(), "--window", "5m", "--tests.recent", "2")
	defer stop()
	testwait.Until(t, 50*time.Millisecond, "the app tracked", func() (bool, string) {
		body := httpGet(t, base+"api/v1/apps/"+serial+"/"+pkg)
		return strings.Contains(body, `"state":"tracking"`), body[:min(len(body), 200)]
	})
	if _, err := adb.NewClient(addr.String()).Shell(testwait.Context(t), serial, "am", "instrument", "-w", "-r", "-e", "delay_msec", "300", suite.Component()); err != nil {
		t.Fatalf("am instrument: %v", err)
	}
	truth, _ := farm.Device(serial).RunTruth(-1)
	var app web.App
	testwait.Until(t, 50*time.Millisecond, "the run over", func() (bool, string) {
		app = web.App{}
		json.Unmarshal([]byte(httpGet(t, base+"api/v1/apps/"+serial+"/"+pkg)), &app)
		return app.Tests != nil && len(app.Tests.Recent) == 2 && app.Tests.Runs == 0, fmt.Sprintf("%+v", app.Tests)
	})
	for i, row := range app.Tests.Recent { // newest first
		want := truth.Tests[len(truth.Tests)-1-i]
		if row.Name != want.Name || row.Outcome != string(want.Outcome) || row.Partial ||
			row.Allocations != want.Allocated.Total.Allocations || row.Bytes != want.Allocated.Total.Bytes {
			t.Errorf("row %d: %s %s %d allocations %d bytes partial %v %v; the truth %s %s %+v", i, row.Name, row.Outcome,
				row.Allocations, row.Bytes, row.Partial, row.Notes, want.Name, want.Outcome, want.Allocated.Total)
		}
	}
	outcomes := map[string]int{}
	for _, tt := range truth.Tests {
		outcomes[string(tt.Outcome)]++
	}
	m := httpGet(t, base+"metrics")
	for outcome, n := range outcomes {
		want := fmt.Sprintf(`alloctrack_tests_total{outcome=%q,package=%q,serial=%q} %d`, outcome, pkg, serial, n)
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if len(truth.Tests) != 24 || len(outcomes) < 3 {
		t.Errorf("the truth has %d tests, outcomes %v: want 24, passed, failed and ignored", len(truth.Tests), outcomes)
	}
}
