package exporter_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// farmSnapshot is the snapshot of a farm of saturated apps as the load
// measurement runs it (tools/measure load): devices x apps, each with
// classes admitted classes and sites admitted sites, names shaped like the
// simulator's.
func farmSnapshot(devices, apps, classes, sites int) alloctrack.Snapshot {
	var s alloctrack.Snapshot
	s.Servers = []alloctrack.ServerStatus{{Addr: "127.0.0.1:5037", Up: true}}
	n := 0
	for d := range devices {
		serial := fmt.Sprintf("sim-%d", d+1)
		s.Devices = append(s.Devices, alloctrack.DeviceStatus{Server: "127.0.0.1:5037", Serial: serial, State: "device", API: 30, Errors: map[string]uint64{}})
		for a := range apps {
			n++
			pkg := fmt.Sprintf("com.example.app%d", a+1)
			as := alloctrack.AppSnapshot{AppStatus: alloctrack.AppStatus{
				Serial: serial, Package: pkg, AppName: pkg, PID: 1000 + n, State: alloctrack.StateTracking, Tracking: true,
				Window: 10 * time.Second, Windows: 123, Overflowed: 12, ReportBytes: 987654321, LastReportEntries: 65535,
				Errors: map[string]uint64{}, RTT: alloctrack.NewHistogram(alloctrack.RTTBuckets),
			}}
			as.Counts.Total = alloctrack.Count{Allocations: 123456789, Bytes: 9876543210}
			for c := range classes {
				as.Counts.Classes = append(as.Counts.Classes, alloctrack.ClassCount{
					Class: fmt.Sprintf("com.example.app%d.C%d", a+1, c), Count: alloctrack.Count{Allocations: uint64(1e6 + c*7919), Bytes: uint64(3e7 + c*104729)},
				})
			}
			for i := range sites {
				h := uint64(n)<<40 | uint64(i)*0x9e3779b97f4a7c15>>24
				as.Counts.Sites = append(as.Counts.Sites, alloctrack.SiteCount{
					SiteInfo: alloctrack.SiteInfo{
						ID:    alloctrack.SiteID(h),
						Class: fmt.Sprintf("com.example.app%d.C%d", a+1, i%classes),
						Frame: fmt.Sprintf("com.example.app%d.C%d.m%d(C%d.java:%d)", a+1, i%37, i%101, i%37, 100+i),
					},
					Count: alloctrack.Count{Allocations: uint64(5e5 + i*7919), Bytes: uint64(2e7 + i*104729)},
				})
			}
			s.Apps = append(s.Apps, as)
		}
	}
	return s
}

// BenchmarkMetricsRender serves /metrics for the 16 x 4 farm of the load
// measurement (45 classes and --top.sites sites per app) as Prometheus asks
// for it (gzip) and as plain text: "daemon" as serve does (class and site
// families as cached text), "client_golang" through promhttp alone. In the
// steady state every app counted a window between two scrapes (10 s
// windows, 15 s scrapes), so "daemon/changed" rebuilds every app's text;
// "daemon/unchanged" reuses it.
func BenchmarkMetricsRender(b *testing.B) {
	for _, sites := range []int{100, 200} {
		for _, path := range []string{"daemon/changed", "daemon/unchanged", "client_golang"} {
			for _, enc := range []string{"gzip", "identity"} {
				b.Run(fmt.Sprintf("sites=%d/%s/%s", sites, path, enc), func(b *testing.B) {
					src := &mutableSource{farmSnapshot(16, 4, 45, sites)}
					var h http.Handler
					if path == "client_golang" {
						h = plainHandler(src)
					} else {
						h = fastHandler(b, src)
					}
					var size int
					b.ReportAllocs()
					for b.Loop() {
						if path == "daemon/changed" {
							for i := range src.s.Apps {
								src.s.Apps[i].Counts.Gen++
							}
						}
						req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
						req.Header.Set("Accept", "text/plain;version=0.0.4")
						req.Header.Set("Accept-Encoding", enc)
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, req)
						if rec.Code != http.StatusOK {
							b.Fatal(rec.Code)
						}
						n, _ := io.Copy(io.Discard, rec.Body)
						size = int(n)
					}
					b.ReportMetric(float64(size), "bytes/response")
				})
			}
		}
	}
}
