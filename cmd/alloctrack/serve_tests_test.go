package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
	"github.com/alloctrack/alloctrack/web"
)

func httpGet(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %s %.300s", url, res.Status, b)
	}
	return string(b)
}

// serve, over a simulated farm whose app runs a suite under am
// instrument, shows the running test in alloctrack_test_info, then lists
// the tests on the app's page with outcomes and figures (those not
// partial equal to the simulator's truth; every one, the last included,
// when the daemon's window is longer than the run, since each finished:
// line cycles the tracker) and counts them in alloctrack_tests_total.
func TestServeRecentTests(t *testing.T) {
	// 19: logcat without -T (its whole buffer first), lines through a
	// PTY; 29: -T 1.
	for _, api := range []int{19, 29} {
		t.Run(fmt.Sprint("API", api), func(t *testing.T) { testServeRecentTests(t, api, "1s") })
	}
	// A window longer than the run: the daemon's only cycles are those a
	// finished: line asks for, and -e delay_msec gives them the time, so
	// every test is exact, the 3 s one and the last one too (without
	// them, am stops the process before any report is read: none is).
	// The last test fails: its finished: line shares its millisecond
	// with its exception's lines, and must still be read and cycle.
	t.Run("API29/cycles on finished", func(t *testing.T) { testServeRecentTests(t, 29, "5m") })
}

func testServeRecentTests(t *testing.T, api int, window string) {
	farm := sim.NewFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{api}, Workload: sim.DefaultWorkload()})
	t.Cleanup(func() { farm.Close() })
	const serial, pkg = "sim-1", "com.example.app1"
	suite := sim.SeededSuite(pkg+".test", pkg, sim.SeedSpec{Tests: 6, Seed: 3, FailEvery: 3, OddNames: true})
	suite.StartDelay = 2 * time.Second // the device's start: the daemon's session is on before the first test
	suite.Tests[1].Duration = 3 * time.Second
	if last := suite.Tests[len(suite.Tests)-1]; last.Outcome != pertest.Failed {
		t.Fatalf("the last test %s is %q: a failed one's finished: line shares its millisecond with its exception", last.Name(), last.Outcome)
	}
	if err := farm.Device(serial).InstallSuite(suite); err != nil {
		t.Fatal(err)
	}
	addr, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base, stop, _ := startServe(t, "--adb.address", addr.String(), "--window", window)
	defer stop()
	waitFor := func(what string, cond func() (bool, string)) {
		t.Helper()
		testwait.Until(t, 50*time.Millisecond, what, cond)
	}
	waitFor("the app tracked", func() (bool, string) {
		body := httpGet(t, base+"api/v1/apps/"+serial+"/"+pkg)
		return strings.Contains(body, `"state":"tracking"`), body[:min(len(body), 200)]
	})

	// 1.5 s: with a window of 1 s, the timer's cycle after a finished:
	// line's falls in the pause, not at the next test's start (a delay
	// of one window put it there, and the next test crossed it).
	done := make(chan error, 1)
	go func() {
		_, err := adb.NewClient(addr.String()).Shell(testwait.Context(t), serial, "am", "instrument", "-w", "-r", "-e", "delay_msec", "1500", suite.Component())
		done <- err
	}()
	long := suite.Tests[1]
	info := fmt.Sprintf(`alloctrack_test_info{class=%q,package=%q,serial=%q,test=%q} 1`, long.Class, pkg, serial, long.Name())
	waitFor("the long test in alloctrack_test_info", func() (bool, string) {
		m := httpGet(t, base+"metrics")
		return strings.Contains(m, info), "no " + info
	})
	if err := <-done; err != nil {
		t.Fatalf("am instrument: %v", err)
	}
	truth, _ := farm.Device(serial).RunTruth(-1)

	var app web.App
	waitFor("every test listed, the run over", func() (bool, string) {
		app = web.App{}
		json.Unmarshal([]byte(httpGet(t, base+"api/v1/apps/"+serial+"/"+pkg)), &app)
		return app.Tests != nil && len(app.Tests.Recent) == len(suite.Tests) && app.Tests.Current == nil && app.Tests.Runs == 0, fmt.Sprintf("%+v", app.Tests)
	})
	exact := 0
	for i, row := range app.Tests.Recent { // newest first
		want := truth.Tests[len(truth.Tests)-1-i]
		if row.Name != want.Name || row.Outcome != string(want.Outcome) {
			t.Errorf("test %d: %s %s, want %s %s", i, row.Name, row.Outcome, want.Name, want.Outcome)
		}
		if !row.Partial {
			exact++
			if row.Allocations != want.Allocated.Total.Allocations || row.Bytes != want.Allocated.Total.Bytes {
				t.Errorf("%s: %d allocations, %d bytes; the simulator's truth %+v", row.Name, row.Allocations, row.Bytes, want.Allocated.Total)
			}
		}
	}
	t.Logf("%d of %d tests exact; partial: %v", exact, len(suite.Tests), partial(app.Tests.Recent))
	if window != "1s" {
		if exact < len(suite.Tests) {
			t.Errorf("%d of %d tests exact with cycles only at finished: lines", exact, len(suite.Tests))
		}
	} else if exact == 0 {
		t.Error("no test exact: nothing was compared with the truth")
	} else if !app.Tests.Recent[len(suite.Tests)-2].Partial {
		t.Errorf("the 3 s test is not partial although it spans windows of 1 s: %+v", app.Tests.Recent[len(suite.Tests)-2])
	}

	page := httpGet(t, base+"apps/"+serial+"/"+pkg)
	odd := suite.Tests[2].Name() // parentheses, brackets, quotes and commas
	if !strings.Contains(page, `id="tests"`) || !strings.Contains(page, strings.ReplaceAll(odd, `"`, "&#34;")) {
		t.Errorf("the app page lacks the tests table or the escaped name %q", odd)
	}
	m := httpGet(t, base+"metrics")
	for _, want := range []string{
		fmt.Sprintf(`alloctrack_tests_total{outcome="passed",package=%q,serial=%q} 4`, pkg, serial),
		fmt.Sprintf(`alloctrack_tests_total{outcome="failed",package=%q,serial=%q} 2`, pkg, serial),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(m, "alloctrack_test_info{") {
		t.Error("alloctrack_test_info after the run ended")
	}
	if strings.Contains(m, `stage="logcat"`) {
		t.Error("the logcat stream ended or failed on a healthy device")
	}
}

func partial(rows []web.TestRow) []string {
	var out []string
	for _, r := range rows {
		if r.Partial {
			out = append(out, r.Name+": "+strings.Join(r.Notes, "; "))
		}
	}
	return out
}

// serve on Android 12 (API 31, heapprofd) follows a run as on DDM: the
// running test in alloctrack_test_info, then every test on the app's
// page, estimated (≈) with the boundary error of --tests.dump-interval,
// each of at least 200 sampling intervals within 15 % of what it
// allocated (the device's session dumps every 250 ms while the run is
// open, not once a window), counted in alloctrack_tests_total and the
// estimated test families, which hold the tests' figures.
func TestServeRecentTestsHeapprofd(t *testing.T) {
	farm := sim.NewFarm(sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{31}, Workload: quietCaptureWorkload()})
	t.Cleanup(func() { farm.Close() })
	const serial, pkg = "sim-1", "com.example.app1"
	suite := sim.SeededSuite(pkg+".test", pkg, sim.SeedSpec{Tests: 5, Seed: 31, Allocations: 12000, ObjectBytes: 2048, Duration: 2 * time.Second, Steps: 20, FailEvery: 3})
	suite.StartDelay = time.Second
	if err := farm.Device(serial).InstallSuite(suite); err != nil {
		t.Fatal(err)
	}
	addr, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base, stop, _ := startServe(t, "--adb.address", addr.String(), "--window", "1s", "--tests.dump-interval", "250ms")
	defer stop()
	waitFor := func(what string, cond func() (bool, string)) {
		t.Helper()
		testwait.Until(t, 50*time.Millisecond, what, cond)
	}
	waitFor("the app profiled", func() (bool, string) {
		body := httpGet(t, base+"api/v1/apps/"+serial+"/"+pkg)
		return strings.Contains(body, `"state":"tracking"`) && strings.Contains(body, `"backend":"heapprofd"`), body[:min(len(body), 300)]
	})
	done := make(chan error, 1)
	go func() {
		_, err := adb.NewClient(addr.String()).Shell(testwait.Context(t), serial, "am", "instrument", "-w", "-r", "-e", "delay_msec", "300", suite.Component())
		done <- err
	}()
	second := suite.Tests[1]
	info := fmt.Sprintf(`alloctrack_test_info{class=%q,package=%q,serial=%q,test=%q} 1`, second.Class, pkg, serial, second.Name())
	waitFor("the second test in alloctrack_test_info", func() (bool, string) {
		return strings.Contains(httpGet(t, base+"metrics"), info), "no " + info
	})
	if err := <-done; err != nil {
		t.Fatalf("am instrument: %v", err)
	}
	truth, _ := farm.Device(serial).RunTruth(-1)
	var app web.App
	waitFor("every test listed, the run over", func() (bool, string) {
		app = web.App{}
		json.Unmarshal([]byte(httpGet(t, base+"api/v1/apps/"+serial+"/"+pkg)), &app)
		return app.Tests != nil && len(app.Tests.Recent) == len(suite.Tests) && app.Tests.Runs == 0, fmt.Sprintf("%+v", app.Tests)
	})
	var sum uint64
	held := 0
	for i, row := range app.Tests.Recent { // newest first
		want := truth.Tests[len(truth.Tests)-1-i]
		sum += row.Bytes
		if row.Name != want.Name || row.Outcome != string(want.Outcome) || !row.Estimated || row.BoundaryErrorSeconds != 0.25 {
			t.Errorf("row %d: %s %s estimated %v ±%vs; want %s %s, estimated ±0.25s", i, row.Name, row.Outcome, row.Estimated, row.BoundaryErrorSeconds, want.Name, want.Outcome)
		}
		first := i == len(app.Tests.Recent)-1 // may begin in the session's switch to 250 ms dumps
		if row.Partial && !first {
			t.Errorf("%s partial: %q", row.Name, row.Notes)
		}
		if allocated := want.Allocated.Total.Bytes; allocated >= minIntervals*4096 && !row.Partial {
			held++
			if e := math.Abs(float64(row.Bytes)-float64(allocated)) / float64(allocated); e > 0.15 {
				t.Errorf("%s: %d bytes estimated, %d allocated (%.1f %% off)", row.Name, row.Bytes, allocated, 100*e)
			}
		}
	}
	t.Logf("%d tests compared with the truth; partial: %v", held, partial(app.Tests.Recent))
	if held < len(suite.Tests)-1 {
		t.Errorf("only %d tests compared with the truth", held)
	}
	m := httpGet(t, base+"metrics")
	for _, want := range []string{
		fmt.Sprintf(`alloctrack_tests_total{outcome="passed",package=%q,serial=%q} 4`, pkg, serial),
		fmt.Sprintf(`alloctrack_tests_total{outcome="failed",package=%q,serial=%q} 1`, pkg, serial),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	series := fmt.Sprintf(`alloctrack_test_estimated_allocated_bytes_total{package=%q,serial=%q} `, pkg, serial)
	if v, ok := metricValue(m, series); !ok || v != float64(sum) {
		t.Errorf("%s%v (found %v), want the tests' %d", series, v, ok, sum)
	}
	if strings.Contains(m, "alloctrack_test_info{") || strings.Contains(m, "alloctrack_test_allocations_total{") {
		t.Error("alloctrack_test_info after the run, or exact test counters of a heapprofd app")
	}
	if page := httpGet(t, base+"apps/"+serial+"/"+pkg); !strings.Contains(page, `(boundaries ±0.25 s)`) {
		t.Error("the app page does not state the tests' boundary error")
	}
}

// metricValue reads the value of the series line that starts with prefix.
func metricValue(m, prefix string) (float64, bool) {
	for _, l := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}
