package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/web"
)

// bigFarm is 64 apps with 200 sites each (16 frames) and 100 classes.
func bigFarm() fakeSource {
	now := time.Now()
	src := fakeSource{recent: map[string]alloctrack.Recent{}}
	for d := range 8 {
		serial := fmt.Sprintf("emulator-%d", 5554+2*d)
		src.snap.Devices = append(src.snap.Devices, alloctrack.DeviceStatus{Serial: serial, State: "device", API: 30})
		for a := range 8 {
			pkg := fmt.Sprintf("com.example.app%d", a)
			var c alloctrack.AppCounts
			for i := range 100 {
				c.Classes = append(c.Classes, alloctrack.ClassCount{Class: fmt.Sprintf("com.example.C%d", i), Count: alloctrack.Count{Allocations: uint64(i + 1), Bytes: uint64(16 * (i + 1))}})
			}
			for i := range 200 {
				frames := make([]alloctrack.Frame, 16)
				for j := range frames {
					frames[j] = alloctrack.Frame{Class: fmt.Sprintf("com.example.C%d", (i+j)%97), Method: fmt.Sprintf("m%d", j), File: "C.java", Line: i + j}
				}
				c.Sites = append(c.Sites, alloctrack.SiteCount{SiteInfo: alloctrack.SiteInfo{ID: fmt.Sprintf("%012x", d*10000+a*1000+i), Class: "byte[]", Frame: frames[0].String(), Frames: frames},
					Count: alloctrack.Count{Allocations: uint64(i + 1), Bytes: uint64(64 * (i + 1))}})
				c.Total.Allocations += uint64(i + 1)
				c.Total.Bytes += uint64(64 * (i + 1))
			}
			for w := range 30 {
				c.Windows = append(c.Windows, alloctrack.WindowTotal{Start: now.Add(time.Duration(w-30) * 10 * time.Second), End: now.Add(time.Duration(w-29) * 10 * time.Second), Count: alloctrack.Count{Allocations: 5000, Bytes: 1 << 20}})
			}
			src.snap.Apps = append(src.snap.Apps, alloctrack.AppSnapshot{AppStatus: alloctrack.AppStatus{Serial: serial, Package: pkg, PID: 1000 + a, State: alloctrack.StateTracking, Window: 10 * time.Second}, Counts: c})
			src.recent[serial+"/"+pkg] = alloctrack.Recent{Windows: c.Windows, Total: c.Total, Classes: c.Classes, Sites: c.Sites}
		}
	}
	return src
}

// BenchmarkPages renders each page of a 64-app, 200-site farm.
func BenchmarkPages(b *testing.B) {
	h, err := web.New(bigFarm(), web.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{"/", "/?fragment=1", "/apps/emulator-5554/com.example.app0", "/api/v1/apps/emulator-5554/com.example.app0/flame", "/sites/000000000000"} {
		b.Run(strings.ReplaceAll(p, "/", "_"), func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
				if rec.Code != 200 {
					b.Fatalf("%s: %d", p, rec.Code)
				}
				n = rec.Body.Len()
			}
			b.ReportMetric(float64(n), "page-bytes")
		})
	}
}

// TestMeasureFarmPage measures the farm page at 64 apps x 200 sites in
// headless Chromium: page weight, time to first byte, and render time
// (navigation start to the load event), each the median of 5 loads. It is
// a measurement, not a check: run it with ALLOCTRACK_MEASURE_WEB=1, or
// with ALLOCTRACK_MEASURE_WEB=http://host:port to measure a running daemon
// (serve --simulate --simulate.devices 8 --simulate.apps 8, say).
func TestMeasureFarmPage(t *testing.T) {
	target := os.Getenv("ALLOCTRACK_MEASURE_WEB")
	if target == "" {
		t.Skip("measurement: set ALLOCTRACK_MEASURE_WEB=1 (or a daemon's URL) to run")
	}
	bin := chromium(t)
	base := strings.TrimSuffix(target, "/")
	if !strings.HasPrefix(target, "http") {
		h, err := web.New(bigFarm(), web.Config{})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		base = srv.URL
	}
	res, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var assets int
	for _, p := range []string{"/static/app.js", "/static/style.css"} {
		r, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		assets += len(b)
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU)...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(string, ...any) {}))
	defer cancel()
	var ttfb, load []float64
	for range 5 {
		var timing []float64
		if err := chromedp.Run(ctx, chromedp.Navigate(base+"/?x="+fmt.Sprint(time.Now().UnixNano())),
			chromedp.Poll(`performance.getEntriesByType("navigation")[0].loadEventEnd > 0`, nil),
			chromedp.Evaluate(`(n => [n.responseStart - n.startTime, n.loadEventEnd - n.startTime])(performance.getEntriesByType("navigation")[0])`, &timing)); err != nil {
			t.Fatal(err)
		}
		ttfb, load = append(ttfb, timing[0]), append(load, timing[1])
	}
	t.Logf("farm page of %s: HTML %d bytes, script and style %d bytes; median of 5 in Chromium: time to first byte %.1f ms, load event %.1f ms (ttfb %v, load %v)",
		base, len(html), assets, median(ttfb), median(load), ttfb, load)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}
