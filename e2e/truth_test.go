package e2e

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/sim"
)

// allocate makes rounds of allocations in every app, a few thousand per
// app and round, and returns the largest single batch.
func allocate(t testing.TB, r *rig, apps []tracked, rng *rand.Rand, rounds int) uint64 {
	t.Helper()
	var maxBatch uint64
	for range rounds {
		for _, a := range apps {
			n := 200 + rng.IntN(2800)
			r.vm(t, a.farmSerial, a.pkg).Allocate(n)
			maxBatch = max(maxBatch, uint64(n))
		}
		time.Sleep(170 * time.Millisecond)
	}
	return maxBatch
}

// quiesce waits, with no allocations under way, until every app has
// counted two more windows (so every allocation made before is in a
// counted report) and, if p is not nil, Prometheus has scraped the daemon
// after that; it returns the time of that scrape (for queryAt).
func quiesce(t testing.TB, r *rig, p *promServer, apps []tracked) float64 {
	t.Helper()
	r.d.waitWindows(t, appsOf(apps), 2, 20*time.Second)
	if p == nil {
		return 0
	}
	return p.scrapedAfter(t, time.Now())
}

// truthApps returns the ground truth of every package that ran on the
// farm, keyed by its series.
func truthApps(r *rig) map[app][2]sim.Counts {
	out := map[app][2]sim.Counts{}
	for _, d := range r.farm.Devices() {
		for _, vm := range r.farm.VMs(d.Serial(), "") {
			a := r.app(d.Serial(), vm.ProcessName())
			if _, ok := out[a]; ok {
				continue
			}
			allocated, reported := r.farm.Truth(d.Serial(), vm.ProcessName())
			out[a] = [2]sim.Counts{allocated, reported}
		}
	}
	return out
}

// checkLost fails the test if an app lost more allocations than maxLost
// (allocated while tracked, minus reported in whole reports), and logs
// what was lost.
func checkLost(t testing.TB, truth map[app][2]sim.Counts, maxLost uint64) {
	t.Helper()
	var lost, all uint64
	for a, tr := range truth {
		al, rep := tr[0].Total.Allocations, tr[1].Total.Allocations
		if rep > al {
			t.Errorf("%v: simulator reported %d allocations but tracked only %d", a, rep, al)
			continue
		}
		if al-rep > maxLost {
			t.Errorf("%v: %d of %d tracked allocations never reported (at most %d expected: one batch caught between a REAL and its REAE 0)", a, al-rep, al, maxLost)
		}
		if al > rep {
			t.Logf("%v: %d of %d tracked allocations lost between a REAL and its REAE 0", a, al-rep, al)
		}
		lost += al - rep
		all += al
	}
	t.Logf("ground truth: %d allocations tracked, %d reported, %d lost between a REAL and its REAE 0", all, all-lost, lost)
}

// compareWithPrometheus asserts, through Prometheus's HTTP API, that the
// daemon counted exactly what the simulated VMs reported: per app the
// sums of the class and site metrics and the app totals, per class, and
// per site (by site id, with alloctrack_site_info for every site).
// Every query is evaluated at the time at, of a successful scrape.
func compareWithPrometheus(t testing.TB, r *rig, p *promServer, at float64, maxLost uint64) {
	t.Helper()
	truth := truthApps(r)
	checkLost(t, truth, maxLost)

	type metric struct {
		query string
		pick  func(sim.Counts) uint64
	}
	allocs := func(c sim.Counts) uint64 { return c.Total.Allocations }
	bytes := func(c sim.Counts) uint64 { return c.Total.Bytes }
	for _, m := range []metric{
		{`sum by (serial, package) (alloctrack_allocations_total)`, allocs},
		{`sum by (serial,package)(alloctrack_allocated_bytes_total)`, bytes},
		{`sum by (serial, package) (alloctrack_site_allocations_total)`, allocs},
		{`sum by (serial, package) (alloctrack_site_allocated_bytes_total)`, bytes},
		{`alloctrack_app_allocations_total`, allocs},
		{`alloctrack_app_allocated_bytes_total`, bytes},
	} {
		got := byLabels(p.queryAt(t, m.query, at), "serial", "package")
		for a, tr := range truth {
			v, ok := got[a.serial+"/"+a.pkg]
			if want := m.pick(tr[1]); !ok || v != float64(want) {
				t.Errorf("%s for %v = %v (present %v), want %d (simulator: reported %d, allocated %d)",
					m.query, a, v, ok, want, want, m.pick(tr[0]))
			}
		}
		for k, v := range got {
			serial, pkg, _ := strings.Cut(k, "/")
			if _, ok := truth[app{serial, pkg}]; !ok && v != 0 {
				t.Errorf("%s: %s = %v, but the farm never ran that app", m.query, k, v)
			}
		}
	}

	// Per class.
	classAllocs := p.queryAt(t, `sum by (serial, package, class) (alloctrack_allocations_total)`, at)
	classBytes := byLabels(p.queryAt(t, `sum by (serial, package, class) (alloctrack_allocated_bytes_total)`, at), "serial", "package", "class")
	nClasses := 0
	for a, tr := range truth {
		got := map[string]alloctrack.Count{}
		for _, s := range classAllocs {
			if s.Metric["serial"] == a.serial && s.Metric["package"] == a.pkg {
				c := s.Metric["class"]
				got[c] = alloctrack.Count{Allocations: uint64(s.Value), Bytes: uint64(classBytes[a.serial+"/"+a.pkg+"/"+c])}
			}
		}
		want := map[string]alloctrack.Count{}
		for c, n := range tr[1].ByClass {
			want[c] = n
		}
		nClasses += len(want)
		compareGroups(t, fmt.Sprintf("%v class", a), got, want, alloctrack.Other)
	}

	// Per site, by id: the simulator names each site's id as the daemon
	// computes it (alloctrack.SiteHashNames). Every exported site and
	// site="other" has one alloctrack_site_info, and the join carries
	// class and frame onto every site series.
	info := map[string]string{}
	for _, s := range p.queryAt(t, `alloctrack_site_info`, at) {
		info[s.Metric["site"]] = s.Metric["class"]
	}
	siteAllocs := p.queryAt(t, `sum by (serial, package, site) (alloctrack_site_allocations_total)`, at)
	siteBytes := byLabels(p.queryAt(t, `sum by (serial, package, site) (alloctrack_site_allocated_bytes_total)`, at), "serial", "package", "site")
	joined := byLabels(p.queryAt(t, `sum by (serial, package, site) (alloctrack_site_allocations_total * on (site) group_left (class, frame) alloctrack_site_info)`, at), "serial", "package", "site")
	nSites := 0
	for a, tr := range truth {
		got := map[string]alloctrack.Count{}
		for _, s := range siteAllocs {
			if s.Metric["serial"] != a.serial || s.Metric["package"] != a.pkg {
				continue
			}
			id := s.Metric["site"]
			k := a.serial + "/" + a.pkg + "/" + id
			if _, ok := info[id]; !ok {
				t.Errorf("%v: site %s has no alloctrack_site_info", a, id)
			}
			if v, ok := joined[k]; !ok || v != s.Value {
				t.Errorf("%v: site %s joined with alloctrack_site_info = %v (present %v), want %v", a, id, v, ok, s.Value)
			}
			got[id] = alloctrack.Count{Allocations: uint64(s.Value), Bytes: uint64(siteBytes[k])}
		}
		nSites += len(tr[1].BySiteID)
		compareGroups(t, fmt.Sprintf("%v site", a), got, tr[1].BySiteID, alloctrack.Other)
	}
	t.Logf("Prometheus agrees with the simulator on %d apps, %d (app, class) and %d (app, site) counts", len(truth), nClasses, nSites)
}

// compareGroups compares counts by group: each group the daemon exports
// must equal the truth, and the other group must hold exactly the groups
// it does not export.
func compareGroups(t testing.TB, what string, got, want map[string]alloctrack.Count, other string) {
	t.Helper()
	var rest alloctrack.Count
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w := want[k]
		g, ok := got[k]
		if !ok {
			rest.Allocations += w.Allocations
			rest.Bytes += w.Bytes
			continue
		}
		if g != w {
			t.Errorf("%s %q: daemon %+v, simulator %+v", what, strings.ReplaceAll(k, "\x00", " at "), g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && k != other && g != (alloctrack.Count{}) {
			t.Errorf("%s %q: daemon %+v, unknown to the simulator", what, strings.ReplaceAll(k, "\x00", " at "), g)
		}
	}
	if g := got[other]; g != rest {
		t.Errorf("%s %q: daemon %+v, want %+v (the groups without a series of their own)", what, other, g, rest)
	}
}
