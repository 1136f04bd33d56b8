package e2e

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// TestFaults injects faults into a running farm, one after the other: a
// REAL never answered, a connection dropped in the middle of a report, a
// corrupt report, and the adb server killed and restarted on its port.
// After each, the daemon must still run, count the error, count windows
// again soon (the recovery is logged in windows), and never let a counter
// go down; at the end it must have counted exactly what the VMs reported
// in whole reports, hold no more goroutines than before the faults, and
// leave tracking off on SIGTERM.
func TestFaults(t *testing.T) {
	r := newRig(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 3, APIs: []int{30}, Workload: quietWorkload()}, nil)
	apps := r.trackable()
	all := appsOf(apps)
	r.d.waitState(t, all, "tracking", 20*time.Second)
	r.d.waitWindows(t, all, 2, 20*time.Second)
	goroutines := r.d.goroutines(t)

	rng := rand.New(rand.NewPCG(9, 9))
	maxBatch := allocate(t, r, apps, rng, 2)
	r.d.waitWindows(t, all, 2, 20*time.Second) // all reported before the faults
	lostBound := map[app]uint64{}              // allocations a fault may lose, per app

	for _, tc := range []struct {
		name   string
		app    int
		faults sim.Faults
		stage  string
	}{
		{"REAL never answered", 0, sim.Faults{HangREAL: 1}, "report"},
		{"connection dropped mid-report", 1, sim.Faults{DropREAL: 1}, "report"},
		{"corrupt report", 2, sim.Faults{CorruptREAL: 1}, "parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := apps[tc.app]
			vm := r.vm(t, a.farmSerial, a.pkg)
			errName := "alloctrack_app_errors_total"
			errs0 := r.d.metrics(t).value(errName, a.labels("stage", tc.stage)...)
			// Allocations the faulty report should have carried: the
			// simulator counts them as lost, and so must the daemon.
			vm.Allocate(2000)
			lostBound[a.app] += 2000
			vm.SetFaults(tc.faults)
			toErr := waitFor(t, 20*time.Second, fmt.Sprintf("%s{stage=%q} of %v growing", errName, tc.stage, a.app), func() (bool, string) {
				n := r.d.metrics(t).value(errName, a.labels("stage", tc.stage)...)
				return n > errs0, fmt.Sprintf("%v errors", n)
			})
			// Recovery, in the app's next counted window; measured also in
			// windows the healthy apps counted meanwhile.
			before := r.d.windows(t, all)
			toRec := waitFor(t, 20*time.Second, fmt.Sprintf("windows of %v counted again", a.app), func() (bool, string) {
				w := r.d.windows(t, []app{a.app})[a.app]
				return w > before[a.app], fmt.Sprintf("%v windows", w)
			})
			after := r.d.windows(t, all)
			var peer float64
			for _, o := range all {
				if o != a.app {
					peer = max(peer, after[o]-before[o])
				}
			}
			t.Logf("%v: error counted %v after the fault was set; a window counted again %s after that (healthy apps counted %v windows meanwhile)",
				a.app, toErr.Round(10*time.Millisecond), windowsOf(toRec), peer)
			// Two windows, plus the first retry's backoff (at most 1 s, one
			// window here), plus one for the phase of the healthy apps.
			if peer > 4 {
				t.Errorf("%v recovered only after the healthy apps had counted %v windows; want at most 4", a.app, peer)
			}
			if f := vm.Faults(); f != (sim.Faults{}) {
				t.Errorf("fault not consumed: %+v", f)
			}
			// The healthy apps keep counting windows.
			r.d.waitWindows(t, all, 1, 20*time.Second)
		})
	}

	t.Run("adb server restarted", func(tt *testing.T) {
		// Nothing in flight: a report lost with the server is empty.
		r.d.waitWindows(tt, all, 2, 20*time.Second)
		server := r.adb.Addr()
		sc := r.d.metrics(tt)
		srvErrs0 := sc.value("alloctrack_adb_server_errors_total", "server", server)
		appErrs0 := sc.sum("alloctrack_app_errors_total")
		killADB(tt, r.adb)
		toErr := waitFor(tt, 20*time.Second, "adb server error counted", func() (bool, string) {
			sc := r.d.metrics(tt)
			n := sc.value("alloctrack_adb_server_errors_total", "server", server)
			up := sc.value("alloctrack_adb_server_up", "server", server)
			return n > srvErrs0 && up == 0, fmt.Sprintf("%v errors, up %v", n, up)
		})
		// The new server outlives this subtest: the daemon uses it until
		// the end of the test, so it is owned by the parent test.
		ns := startADBOnPort(t, r.adb.Port(), r.adb.Home())
		for _, s := range r.serial {
			ns.connect(tt, s)
		}
		cleared := time.Now()
		w0 := r.d.windows(tt, all)
		waitFor(tt, 20*time.Second, "every app counting windows again", func() (bool, string) {
			w := r.d.windows(tt, all)
			for _, a := range all {
				if w[a] <= w0[a] {
					return false, fmt.Sprintf("%v: %v windows", a, w[a])
				}
			}
			return true, ""
		})
		took := time.Since(cleared)
		sc = r.d.metrics(tt)
		if up := sc.value("alloctrack_adb_server_up", "server", server); up != 1 {
			tt.Errorf("alloctrack_adb_server_up %v after the restart, want 1", up)
		}
		// The server's death is counted once, as the server's error; the
		// apps' streams died with it and are not counted again per app.
		if n := sc.sum("alloctrack_app_errors_total"); n != appErrs0 {
			tt.Errorf("alloctrack_app_errors_total %v, was %v: the server's death was counted against the apps", n, appErrs0)
		}
		tt.Logf("adb server killed: error counted after %v; restarted on port %d with devices attached, every app counted a window again %s later",
			toErr.Round(10*time.Millisecond), r.adb.Port(), windowsOf(took))
	})

	// Whatever the faults lost, the daemon counted exactly what the VMs
	// reported in whole reports.
	maxBatch = max(maxBatch, allocate(t, r, apps, rng, 2))
	quiesce(t, r, nil, apps)
	truth := truthApps(r)
	for a := range truth {
		lostBound[a] += 2 * maxBatch
	}
	compareWithMetrics(t, r.d.metrics(t), truth, lostBound)

	// No goroutine of the daemon outlived the sessions the faults ended.
	if g := r.d.goroutines(t); g > goroutines+2 {
		t.Errorf("daemon goroutines: %v before the faults, %v after recovering from them", goroutines, g)
	} else {
		t.Logf("daemon goroutines: %v before the faults, %v after", goroutines, g)
	}

	if code := r.d.shutdown(t); code != 0 {
		t.Errorf("daemon exit status %d, want 0", code)
	}
	r.checkTrackingOff(t)
	t.Logf("/metrics fetched %d times; %d alloctrack counter series never went down", r.d.mono.scrapes, r.d.mono.series)
}

// compareWithMetrics asserts that the daemon's /metrics counts exactly
// what the simulator reported, per app: the app totals and the sums over
// the class and site metrics.
func compareWithMetrics(t testing.TB, sc scrape, truth map[app][2]sim.Counts, lostBound map[app]uint64) {
	t.Helper()
	for a, tr := range truth {
		al, rep := tr[0].Total, tr[1].Total
		if rep.Allocations > al.Allocations || al.Allocations-rep.Allocations > lostBound[a] {
			t.Errorf("%v: simulator tracked %d allocations and reported %d; at most %d could be lost", a, al.Allocations, rep.Allocations, lostBound[a])
		}
		for _, m := range []struct {
			name string
			sum  bool
			want uint64
		}{
			{"alloctrack_app_allocations_total", false, rep.Allocations},
			{"alloctrack_app_allocated_bytes_total", false, rep.Bytes},
			{"alloctrack_allocations_total", true, rep.Allocations},
			{"alloctrack_allocated_bytes_total", true, rep.Bytes},
			{"alloctrack_site_allocations_total", true, rep.Allocations},
			{"alloctrack_site_allocated_bytes_total", true, rep.Bytes},
		} {
			got := sc.sum(m.name, a.labels()...)
			if got != float64(m.want) {
				t.Errorf("%v: %s = %v, simulator reported %d (allocated %d)", a, m.name, got, m.want, al.Allocations)
			}
		}
		t.Logf("%v: %d allocations counted, as reported; %d lost by faults", a, rep.Allocations, al.Allocations-rep.Allocations)
	}
}
