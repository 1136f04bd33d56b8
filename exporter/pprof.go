package exporter

import (
	"encoding/json"
	"net"
	"net/http"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// otherSite stands for the sites without a series of their own.
var otherSite = []alloctrack.Frame{{Class: "<other sites>", Method: "<aggregated>"}}

// ProfileHandler serves /debug/pprof/allocs?serial=S&package=P: the app's
// cumulative allocation profile since the daemon started (pprof,
// alloc_objects and alloc_space), built from the snapshot. Sites without a
// series of their own appear as one "<other sites>" stack, so totals match
// alloctrack_app_allocations_total. Thread ids are not kept by the daemon,
// so samples carry only the class label.
//
// For a heapprofd app (Android 12+) the profile has the sample types of
// alloctrack.NewHeapprofdProfileBuilder: samples and sampled_space (exact,
// what the traces held; they match alloctrack_app_sampled_allocations_total
// and alloctrack_app_sampled_bytes_total) and estimated_alloc_objects and
// estimated_alloc_space (estimates, rounded, the default), with no class
// label.
func ProfileHandler(src Source, started time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serial, pkg := r.URL.Query().Get("serial"), r.URL.Query().Get("package")
		if serial == "" || pkg == "" {
			http.Error(w, "give serial and package: /debug/pprof/allocs?serial=S&package=P (targets at /debug/pprof/targets)", http.StatusBadRequest)
			return
		}
		var app *alloctrack.AppSnapshot
		s := src.Snapshot()
		for i := range s.Apps {
			if s.Apps[i].Serial == serial && s.Apps[i].Package == pkg {
				app = &s.Apps[i]
			}
		}
		if app == nil {
			http.Error(w, "no app "+pkg+" on device "+serial+" (see /debug/pprof/targets)", http.StatusNotFound)
			return
		}
		var b *alloctrack.ProfileBuilder
		if heapprofd(app) {
			b = alloctrack.NewHeapprofdProfileBuilder()
			for _, site := range app.Counts.Sites {
				if site.Heapprofd {
					b.AddSampledSite("", site.Frames, site.Sampled, site.Estimated)
				}
			}
			b.AddSampledSite("", otherSite, app.Counts.SiteOtherSampled, app.Counts.SiteOtherEstimated)
		} else {
			b = alloctrack.NewProfileBuilder()
			for _, site := range app.Counts.Sites {
				b.AddSite(site.Class, site.Frames, -1, site.Allocations, site.Bytes)
			}
			b.AddSite(alloctrack.Other, otherSite, -1, app.Counts.SiteOther.Allocations, app.Counts.SiteOther.Bytes)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="allocs.pb.gz"`)
		if err := b.Profile(started, time.Since(started)).Write(w); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}

// TargetGroup is one entry of Prometheus HTTP service discovery, which
// Grafana Alloy's discovery.http reads.
type TargetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// TargetsHandler lists one profiling target per tracked app for
// discovery.http: the daemon's own address (as the client reached it), with
// labels serial, package and service_name, and __param_serial /
// __param_package so that the scraper asks for that app's profile.
func TargetsHandler(src Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if _, _, err := net.SplitHostPort(host); err != nil && host != "" {
			host = net.JoinHostPort(host, "80")
		}
		out := []TargetGroup{}
		for _, a := range src.Snapshot().Apps {
			switch a.State {
			case alloctrack.StateExited, alloctrack.StateDisconnected, alloctrack.StateUnsupported:
				// Nothing to profile: gone, or no allocation tracker.
				continue
			}
			out = append(out, TargetGroup{
				Targets: []string{host},
				Labels: map[string]string{
					"serial": a.Serial, "package": a.Package, "service_name": a.Package,
					"__param_serial": a.Serial, "__param_package": a.Package,
				},
			})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
}
