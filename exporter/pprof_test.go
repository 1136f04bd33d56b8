package exporter

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// pprofSource is a Source whose snapshot the test replaces between scrapes.
type pprofSource struct {
	mu sync.Mutex
	s  alloctrack.Snapshot
}

func (p *pprofSource) Snapshot() alloctrack.Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s
}

func (p *pprofSource) set(s alloctrack.Snapshot) {
	p.mu.Lock()
	p.s = s
	p.mu.Unlock()
}

var _ Source = (*pprofSource)(nil)

var (
	frToString = alloctrack.Frame{Class: "java.lang.StringBuilder", Method: "toString", File: "StringBuilder.java", Line: 400}
	frMainRun  = alloctrack.Frame{Class: "com.example.a.Main", Method: "run", File: "Main.java", Line: 12}
	frMainRun2 = alloctrack.Frame{Class: "com.example.a.Main", Method: "run", File: "Main.java", Line: 13} // same function, another line
	frIORead   = alloctrack.Frame{Class: "com.example.a.IO", Method: "read", File: "IO.java", Line: 30}
	frNative   = alloctrack.Frame{Class: "java.lang.Object", Method: "internalClone", Line: -2}
	frThread   = alloctrack.Frame{Class: "java.lang.Thread", Method: "run", File: "Thread.java", Line: 764}
)

func pprofSite(id, class string, n, bytes uint64, frames ...alloctrack.Frame) alloctrack.SiteCount {
	return alloctrack.SiteCount{
		SiteInfo: alloctrack.SiteInfo{ID: id, Class: class, Frames: frames},
		Count:    alloctrack.Count{Allocations: n, Bytes: bytes},
	}
}

// app is a tracked app's snapshot; Total is the sites' and other's sum.
func pprofApp(serial, pkg, state string, other alloctrack.Count, sites ...alloctrack.SiteCount) alloctrack.AppSnapshot {
	a := alloctrack.AppSnapshot{AppStatus: alloctrack.AppStatus{Serial: serial, Package: pkg, AppName: pkg, PID: 1234, State: state}}
	a.Counts.Sites = sites
	a.Counts.SiteOther = other
	a.Counts.Total = other
	for _, s := range sites {
		a.Counts.Total.Allocations += s.Allocations
		a.Counts.Total.Bytes += s.Bytes
	}
	return a
}

// pprofFixture is a device with a tracked app whose sites share frames,
// share a stack under two classes, have no stack, or differ only in a
// line; an exited app; and an app on another device.
func pprofFixture(scale uint64) alloctrack.Snapshot {
	return alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{
		pprofApp("emulator-5554", "com.example.a", alloctrack.StateTracking, alloctrack.Count{Allocations: 7 * scale, Bytes: 700 * scale},
			pprofSite("s1", "java.lang.String", 50*scale, 1200*scale, frToString, frMainRun, frThread),
			pprofSite("s2", "int[]", 5*scale, 400*scale, frToString, frMainRun, frThread), // same stack, another class
			pprofSite("s3", "byte[]", 10*scale, 1000*scale, frIORead, frMainRun, frThread),
			pprofSite("s4", "byte[]", 3*scale, 300*scale, frIORead, frMainRun2, frThread),
			pprofSite("s5", "java.lang.Object[]", 2*scale, 64*scale), // no stack
			pprofSite("s6", "java.util.ArrayList", 4*scale, 96*scale, frNative, frMainRun),
		),
		pprofApp("emulator-5554", "com.example.gone", alloctrack.StateExited, alloctrack.Count{Allocations: 1, Bytes: 16}),
		pprofApp("usb-2", "com.example.a", alloctrack.StateUnsupported, alloctrack.Count{}),
	}}
}

var pprofStarted = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// scrape asks the handler for one app's profile and parses it.
func scrapeProfile(t *testing.T, h http.Handler, serial, pkg string) *profile.Profile {
	t.Helper()
	q := url.Values{"serial": {serial}, "package": {pkg}}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/allocs?"+q.Encode(), nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	p, err := profile.Parse(rec.Body)
	if err != nil {
		t.Fatalf("profile.Parse: %v", err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatalf("CheckValid: %v", err)
	}
	return p
}

func TestProfileHandlerBadRequests(t *testing.T) {
	h := ProfileHandler(&pprofSource{s: pprofFixture(1)}, pprofStarted)
	for _, tc := range []struct {
		query string
		code  int
		want  string
	}{
		{"", http.StatusBadRequest, "give serial and package"},
		{"serial=emulator-5554", http.StatusBadRequest, "give serial and package"},
		{"package=com.example.a", http.StatusBadRequest, "give serial and package"},
		{"serial=&package=com.example.a", http.StatusBadRequest, "give serial and package"},
		{"serial=emulator-5554&package=com.nope", http.StatusNotFound, "no app com.nope on device emulator-5554"},
		{"serial=nope&package=com.example.a", http.StatusNotFound, "no app com.example.a on device nope"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/allocs?"+tc.query, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("?%s: %d %q, want %d and %q", tc.query, rec.Code, rec.Body, tc.code, tc.want)
		}
	}
}

// stackKey names a sample's stack by function names and lines, top first.
func stackKey(s *profile.Sample) string {
	var b strings.Builder
	for _, l := range s.Location {
		for _, ln := range l.Line {
			fmt.Fprintf(&b, "%s:%d;", ln.Function.Name, ln.Line)
		}
	}
	return b.String()
}

// checkAddresses: every location has one line and a non-zero address of
// its own; a frame (function, file, line) has one location.
func checkAddresses(t *testing.T, p *profile.Profile) map[string]uint64 {
	t.Helper()
	byAddr := map[uint64]*profile.Location{}
	byFrame := map[string]uint64{}
	for _, l := range p.Location {
		if l.Address == 0 {
			t.Errorf("location %d has address 0", l.ID)
		}
		if len(l.Line) != 1 {
			t.Errorf("location %d has %d lines", l.ID, len(l.Line))
			continue
		}
		if o := byAddr[l.Address]; o != nil {
			t.Errorf("locations %d and %d share address %#x", o.ID, l.ID, l.Address)
		}
		byAddr[l.Address] = l
		fr := fmt.Sprintf("%s|%s|%d", l.Line[0].Function.Name, l.Line[0].Function.Filename, l.Line[0].Line)
		if _, dup := byFrame[fr]; dup {
			t.Errorf("frame %s has two locations", fr)
		}
		byFrame[fr] = l.Address
	}
	// Two different stacks never have the same address sequence.
	stacks := map[string]string{}
	for _, s := range p.Sample {
		var addrs []string
		for _, l := range s.Location {
			addrs = append(addrs, fmt.Sprintf("%x", l.Address))
		}
		k := strings.Join(addrs, ",")
		if o, ok := stacks[k]; ok && o != stackKey(s) {
			t.Errorf("stacks %q and %q share the addresses %s", o, stackKey(s), k)
		}
		stacks[k] = stackKey(s)
	}
	return byFrame
}

func TestProfileHandlerProfile(t *testing.T) {
	snap := pprofFixture(1)
	h := ProfileHandler(&pprofSource{s: snap}, pprofStarted)
	p := scrapeProfile(t, h, "emulator-5554", "com.example.a")

	want := []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"}}
	if !reflect.DeepEqual(p.SampleType, want) {
		t.Errorf("sample types %v", p.SampleType)
	}
	if p.TimeNanos != pprofStarted.UnixNano() || p.DurationNanos <= 0 {
		t.Errorf("time %d, duration %d", p.TimeNanos, p.DurationNanos)
	}
	var objs, space int64
	byClassStack := map[string][2]int64{}
	for _, s := range p.Sample {
		objs += s.Value[0]
		space += s.Value[1]
		if len(s.Location) == 0 {
			t.Errorf("a sample without location: %v", s.Label)
		}
		if len(s.Label["class"]) != 1 {
			t.Errorf("sample %s: class labels %v", stackKey(s), s.Label["class"])
		}
		if _, ok := s.Label["thread"]; ok {
			t.Errorf("sample %s has a thread label; the daemon keeps no threads", stackKey(s))
		}
		byClassStack[s.Label["class"][0]+" @ "+stackKey(s)] = [2]int64{s.Value[0], s.Value[1]}
	}
	total := snap.Apps[0].Counts.Total
	if uint64(objs) != total.Allocations || uint64(space) != total.Bytes {
		t.Errorf("samples hold %d objects, %d bytes; the app's total is %+v", objs, space, total)
	}
	for k, v := range map[string][2]int64{
		"java.lang.String @ java.lang.StringBuilder.toString:400;com.example.a.Main.run:12;java.lang.Thread.run:764;": {50, 1200},
		"int[] @ java.lang.StringBuilder.toString:400;com.example.a.Main.run:12;java.lang.Thread.run:764;":            {5, 400},
		"byte[] @ com.example.a.IO.read:30;com.example.a.Main.run:13;java.lang.Thread.run:764;":                       {3, 300},
		"java.util.ArrayList @ java.lang.Object.internalClone:0;com.example.a.Main.run:12;":                           {4, 96},
		"other @ <other sites>.<aggregated>:0;":                                                                       {7, 700},
	} {
		if byClassStack[k] != v {
			t.Errorf("%s: %v, want %v (samples %v)", k, byClassStack[k], v, byClassStack)
		}
	}
	if len(p.Sample) != 7 {
		t.Errorf("%d samples, want 7 (6 sites and other)", len(p.Sample))
	}
	frames := checkAddresses(t, p)
	if len(frames) != 8 { // 6 distinct frames, <no stack>, <other sites>
		t.Errorf("%d locations, want 8: %v", len(frames), frames)
	}
	for _, l := range p.Location {
		fn := l.Line[0].Function
		if fn.Name == "java.lang.StringBuilder.toString" && fn.Filename != "StringBuilder.java" {
			t.Errorf("function %s has file %q", fn.Name, fn.Filename)
		}
	}

	// An app with nothing counted yet still gets a valid, empty profile.
	if p := scrapeProfile(t, h, "usb-2", "com.example.a"); len(p.Sample) != 0 {
		t.Errorf("an app with no counts has %d samples", len(p.Sample))
	}
}

// TestProfileHandlerCumulative: profiles of later snapshots dominate
// earlier ones, stack by stack, and keep their addresses.
func TestProfileHandlerCumulative(t *testing.T) {
	src := &pprofSource{s: pprofFixture(1)}
	h := ProfileHandler(src, pprofStarted)
	sum := func(p *profile.Profile) map[string][2]int64 {
		m := map[string][2]int64{}
		for _, s := range p.Sample {
			v := m[stackKey(s)]
			v[0] += s.Value[0]
			v[1] += s.Value[1]
			m[stackKey(s)] = v
		}
		return m
	}
	var prev *profile.Profile
	for i, snap := range []alloctrack.Snapshot{pprofFixture(1), pprofFixture(1), pprofFixture(3), func() alloctrack.Snapshot {
		// A new site admitted, with stacks the earlier scrapes did not see.
		s := pprofFixture(5)
		a := &s.Apps[0]
		a.Counts.Sites = append(a.Counts.Sites, pprofSite("s7", "char[]", 9, 900, alloctrack.Frame{Class: "com.example.a.Parser", Method: "next", File: "Parser.java", Line: 88}, frMainRun, frThread))
		a.Counts.Total.Allocations += 9
		a.Counts.Total.Bytes += 900
		return s
	}()} {
		src.set(snap)
		p := scrapeProfile(t, h, "emulator-5554", "com.example.a")
		cur := checkAddresses(t, p)
		if prev != nil {
			now := sum(p)
			for k, v := range sum(prev) {
				if w := now[k]; w[0] < v[0] || w[1] < v[1] {
					t.Errorf("scrape %d: stack %s went from %v to %v", i, k, v, w)
				}
			}
			for fr, a := range checkAddresses(t, prev) {
				if cur[fr] != a {
					t.Errorf("scrape %d: frame %s moved from %#x to %#x", i, fr, a, cur[fr])
				}
			}
		}
		prev = p
	}
}

// TestProfileHandlerManyFrames: thousands of distinct frames, each with an
// address of its own.
func TestProfileHandlerManyFrames(t *testing.T) {
	var sites []alloctrack.SiteCount
	for i := range 2000 {
		var frames []alloctrack.Frame
		for j := range 8 {
			frames = append(frames, alloctrack.Frame{Class: fmt.Sprintf("com.example.C%d", (i*7+j)%997), Method: fmt.Sprintf("m%d", j), File: "C.java", Line: i % 50})
		}
		sites = append(sites, pprofSite(fmt.Sprint(i), "byte[]", 1, 16, frames...))
	}
	snap := alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{pprofApp("s", "p", alloctrack.StateTracking, alloctrack.Count{}, sites...)}}
	p := scrapeProfile(t, ProfileHandler(&pprofSource{s: snap}, pprofStarted), "s", "p")
	frames := checkAddresses(t, p)
	t.Logf("%d locations, %d samples", len(frames), len(p.Sample))
}

func TestTargetsHandler(t *testing.T) {
	h := TargetsHandler(&pprofSource{s: pprofFixture(1)})
	for _, tc := range []struct{ url, target string }{
		{"http://alloctrack.example:9400/debug/pprof/targets", "alloctrack.example:9400"},
		{"http://127.0.0.1:9400/debug/pprof/targets", "127.0.0.1:9400"},
		{"http://[::1]:9400/debug/pprof/targets", "[::1]:9400"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tc.url, nil))
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %q", tc.url, rec.Code, rec.Header().Get("Content-Type"))
		}
		var got []TargetGroup
		dec := json.NewDecoder(rec.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatal(err)
		}
		want := []TargetGroup{
			{Targets: []string{tc.target}, Labels: map[string]string{
				"serial": "emulator-5554", "package": "com.example.a", "service_name": "com.example.a",
				"__param_serial": "emulator-5554", "__param_package": "com.example.a"}},
			// usb-2's app is unsupported (Android 12+): nothing to profile.
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.url, got, want)
		}
	}

	// No apps: an empty list, not null (discovery.http wants a list).
	rec := httptest.NewRecorder()
	TargetsHandler(&pprofSource{}).ServeHTTP(rec, httptest.NewRequest("GET", "http://h:1/debug/pprof/targets", nil))
	if b := strings.TrimSpace(rec.Body.String()); b != "[]" {
		t.Errorf("no apps: %q", b)
	}
}
