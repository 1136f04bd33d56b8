package main

import (
	"reflect"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// TestSimAndSimulateSameFarm: alloctrack sim and serve --simulate make
// the same farm when not told otherwise, and each follows its flags.
func TestSimAndSimulateSameFarm(t *testing.T) {
	parse := func(args ...string) (*simCmd, *serveCmd) {
		t.Helper()
		app := kingpin.New("alloctrack", "")
		sm, srv := newSimCmd(app), newServeCmd(app)
		if _, err := app.Parse(args); err != nil {
			t.Fatal(err)
		}
		return sm, srv
	}
	sm, _ := parse("sim", "--adb-server", "127.0.0.1:0")
	_, srv := parse("serve", "--simulate")
	if a, b := sm.farmConfig(), srv.simFarmConfig(); !reflect.DeepEqual(a, b) {
		t.Errorf("sim's farm %+v\nserve --simulate's %+v", a, b)
	}
	sm, _ = parse("sim", "--adb-server", "127.0.0.1:0", "--devices", "5", "--api", "23", "--rate", "7")
	_, srv = parse("serve", "--simulate", "--simulate.devices", "5", "--simulate.rate", "7")
	if a, b := sm.farmConfig(), srv.simFarmConfig(); a.Devices != 5 || b.Devices != 5 || a.Workload.Rate != 7 || b.Workload.Rate != 7 || !reflect.DeepEqual(a.APIs, []int{23}) {
		t.Errorf("flags not followed: sim %+v, serve %+v", a, b)
	}
	if !reflect.DeepEqual(defaultFarm.APIs, []int{30, 28, 31}) {
		t.Errorf("the default farm was changed: %v", defaultFarm.APIs)
	}
}
