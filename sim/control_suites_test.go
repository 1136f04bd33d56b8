package sim

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestControlAPISuitesAndRuns(t *testing.T) {
	f := NewFarm(FarmConfig{Devices: 1, AppsPerDevice: 0, APIs: []int{29}})
	defer f.Close()
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	code, body := call(t, srv, "POST", "/devices/sim-1/suites", `{"test_package":"com.x.test","target":"com.x","tests":3,"seed":5,"fail_every":2,"start_delay":"1ms","duration":"2ms"}`)
	if code != 201 || !strings.Contains(body, `"component": "com.x.test/androidx.test.runner.AndroidJUnitRunner"`) {
		t.Fatalf("POST suites: %d %s", code, body)
	}
	if code, body := call(t, srv, "POST", "/devices/sim-1/suites", `{"test_package":"com.x.test","target":"com.x","duration":"soon"}`); code != 400 || !strings.Contains(body, "duration") {
		t.Fatalf("a bad duration: %d %s", code, body)
	}
	d := f.Device("sim-1")
	if out := shellAll(t, d, "pm list instrumentation"); out != "instrumentation:com.x.test/androidx.test.runner.AndroidJUnitRunner (target=com.x)\n" {
		t.Fatalf("pm list instrumentation: %q", out)
	}
	shellAll(t, d, "am instrument -w -r com.x.test/androidx.test.runner.AndroidJUnitRunner")
	_, body = call(t, srv, "GET", "/devices/sim-1/runs", "")
	var runs []RunView
	if err := json.Unmarshal([]byte(body), &runs); err != nil || len(runs) != 1 || len(runs[0].Tests) != 3 || !runs[0].Done {
		t.Fatalf("GET runs: %v %s", err, body)
	}
	s := d.Suites()[0]
	for i, tv := range runs[0].Tests {
		if tv.Allocated != s.Tests[i].Amount() || tv.Outcome != s.Tests[i].Outcome {
			t.Errorf("test %d: %+v, want %+v %s", i+1, tv, s.Tests[i].Amount(), s.Tests[i].Outcome)
		}
	}
}
