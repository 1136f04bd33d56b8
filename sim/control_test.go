package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/xsrf"
)

func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(xsrf.Header, "test")
	return do(t, srv, req)
}

func do(t *testing.T, srv *httptest.Server, req *http.Request) (int, string) {
	t.Helper()
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// A POST, PUT or DELETE of another site (a text/plain body, which a
// browser sends without asking) is refused on every mutating route and
// changes nothing: it lacks the header a page of another site cannot add.
func TestControlAPIRefusesCrossSiteWrites(t *testing.T) {
	w := DefaultWorkload()
	w.Rate = 0
	f := NewFarm(FarmConfig{Devices: 1, AppsPerDevice: 1, Workload: w})
	defer f.Close()
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	_, before := call(t, srv, "GET", "/devices", "")
	pid := strconv.Itoa(f.Device("sim-1").VMs()[0].PID())
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/devices/sim-1/apps", `{"package":"com.evil"}`},
		{"DELETE", "/devices/sim-1/apps/" + pid, ""},
		{"POST", "/devices/sim-1/apps/" + pid + "/restart", ""},
		{"PUT", "/devices/sim-1/apps/" + pid + "/faults", `{"hang_real":-1}`},
		{"POST", "/devices/sim-1/disconnect", ""},
		{"POST", "/devices/sim-1/reconnect", ""},
		{"POST", "/devices/sim-1/suites", `{"orchestrator":true}`},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Origin", "https://elsewhere.example")
		if code, body := do(t, srv, req); code != http.StatusForbidden || !strings.Contains(body, xsrf.Header) {
			t.Errorf("%s %s without %s: %d %s", c.method, c.path, xsrf.Header, code, body)
		}
	}
	if _, after := call(t, srv, "GET", "/devices", ""); after != before {
		t.Errorf("refused requests changed the farm:\n%s\nbecame\n%s", before, after)
	}
}

func TestControlAPI(t *testing.T) {
	w := DefaultWorkload()
	w.Rate = 0
	f := NewFarm(FarmConfig{Devices: 2, AppsPerDevice: 1, APIs: []int{30, 31}, Workload: w})
	defer f.Close()
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()

	// The root lists the API rather than answering 404.
	if code, body := call(t, srv, "GET", "/", ""); code != 200 || !strings.Contains(body, "devices/{serial}/apps") {
		t.Fatalf("GET /: %d %s", code, body)
	}
	code, body := call(t, srv, "GET", "/devices", "")
	var devs []DeviceView
	if code != 200 || json.Unmarshal([]byte(body), &devs) != nil || len(devs) != 2 || devs[1].API != 31 || len(devs[0].Apps) != 1 {
		t.Fatalf("GET /devices: %d %s", code, body)
	}

	code, body = call(t, srv, "POST", "/devices/sim-1/apps", `{"package":"com.new","rate":100,"depth":8}`)
	var app AppView
	if code != 201 || json.Unmarshal([]byte(body), &app) != nil || app.Package != "com.new" || app.Depth != 8 || app.Rate != 100 {
		t.Fatalf("POST app: %d %s", code, body)
	}
	pid := strconv.Itoa(app.PID)
	if f.Device("sim-1").VM(app.PID) == nil {
		t.Fatal("app not started")
	}
	code, body = call(t, srv, "POST", "/devices/sim-1/apps", `{"package":"com.release","api":31,"not_debuggable":true,"profileable":true,"broken_unwind":true}`)
	var rel AppView
	if code != 201 || json.Unmarshal([]byte(body), &rel) != nil {
		t.Fatalf("POST a release app: %d %s", code, body)
	}
	if c := f.Device("sim-1").VM(rel.PID).Config(); !c.NotDebuggable || !c.Profileable || !c.BrokenUnwind || c.API != 31 {
		t.Errorf("release app config %+v", c)
	}

	code, body = call(t, srv, "PUT", "/devices/sim-1/apps/"+pid+"/faults", `{"latency":"20ms","hang_real":2}`)
	if code != 200 || f.Device("sim-1").VM(app.PID).Faults() != (Faults{Latency: 20 * time.Millisecond, HangREAL: 2}) {
		t.Fatalf("PUT faults: %d %s", code, body)
	}
	code, body = call(t, srv, "PUT", "/devices/sim-1/apps/"+pid+"/faults", `{"foreign_profiler":true,"heapprofd_overrun":1,"heapprofd_guardrail":2}`)
	if code != 200 || f.Device("sim-1").VM(app.PID).Faults() != (Faults{ForeignProfiler: true, HeapprofdOverrun: 1, HeapprofdGuardrail: 2}) ||
		!strings.Contains(body, `"heapprofd_guardrail": 2`) {
		t.Fatalf("PUT heapprofd faults: %d %s", code, body)
	}

	code, body = call(t, srv, "POST", "/devices/sim-1/apps/"+pid+"/restart", "")
	var restarted AppView
	if code != 200 || json.Unmarshal([]byte(body), &restarted) != nil || restarted.PID == app.PID || restarted.Package != "com.new" {
		t.Fatalf("restart: %d %s", code, body)
	}
	if f.Device("sim-1").VM(app.PID) != nil {
		t.Fatal("old pid still runs")
	}
	if code, _ := call(t, srv, "DELETE", "/devices/sim-1/apps/"+strconv.Itoa(restarted.PID), ""); code != 204 {
		t.Fatalf("DELETE: %d", code)
	}
	if len(f.VMs("sim-1", "com.new")) != 2 {
		t.Fatal("killed VMs are not kept for ground truth")
	}
	if code, _ := call(t, srv, "POST", "/devices/sim-2/disconnect", ""); code != 204 {
		t.Fatalf("disconnect: %d", code)
	}
	if code, _ := call(t, srv, "POST", "/devices/sim-2/reconnect", ""); code != 204 {
		t.Fatalf("reconnect: %d", code)
	}

	// Bad requests say what is wrong.
	for _, c := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", "/devices/nope/apps", `{"package":"x"}`, 404, "no such device"},
		{"POST", "/devices/sim-1/apps", `{"package":""}`, 400, "package is required"},
		{"POST", "/devices/sim-1/apps", `{"package":"x","colour":1}`, 400, "unknown field"},
		{"POST", "/devices/sim-1/apps", `{`, 400, "request body"},
		{"DELETE", "/devices/sim-1/apps/abc", "", 400, "not a positive number"},
		{"DELETE", "/devices/sim-1/apps/99999", "", 404, "no such app"},
		{"PUT", "/devices/sim-1/apps/" + strconv.Itoa(devs[0].Apps[0].PID) + "/faults", `{"latency":"soon"}`, 400, "not a duration"},
		{"POST", "/devices/nope/disconnect", "", 404, "no such device"},
	} {
		code, body := call(t, srv, c.method, c.path, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %s: %d %s, want %d and %q", c.method, c.path, c.body, code, body, c.code, c.want)
		}
	}
}
