package web_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/web"
)

const hostileTest = `t[<script>alert("t")</script>](x.T)`

// testsView serves the fixture with tests on its first app: two that
// ended (a hostile name, and a partial one with a 1 MB invalid name) and
// one running.
func testsView(t *testing.T) *web.Handler {
	t.Helper()
	src := fixture()
	src.snap.Apps[0].Tests = alloctrack.AppTests{Seen: true, Allocations: 700, Bytes: 9000,
		Outcomes: map[string]uint64{"passed": 1, "failed": 1},
		Recent: []alloctrack.TestSummary{
			{Name: hostileTest, Class: "x.T", Outcome: "passed", PID: 42, Duration: 1500 * time.Millisecond, Allocations: 300, Bytes: 4096,
				TopClasses: []alloctrack.ClassCount{{Class: hostileClass, Count: alloctrack.Count{Allocations: 3, Bytes: 96}}}},
			{Name: hugeName + "\xff(x.T)", Class: "x.T", Outcome: "failed", PID: 42, Duration: 250 * time.Millisecond, Allocations: 123456, Bytes: 7000000,
				Partial: true, Notes: []string{"crossed a tracker cycle <b>\xfe"}, Failure: "java.lang.AssertionError: <i>boom</i>"},
		},
		Current: &alloctrack.TestSummary{Name: "running(x.T)", Class: "x.T", Outcome: "unfinished", PID: 42, Allocations: 5}, Runs: 1}
	h, err := web.New(src, web.Config{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The app page lists the recent tests, newest first, with outcome,
// duration, allocations, bytes and notes, names escaped and cut; the JSON
// has the same; an app that ran no test shows no test section.
func TestAppPageTests(t *testing.T) {
	h := testsView(t)
	for _, path := range []string{"/apps/emulator-5554/com.example.a", "/apps/emulator-5554/com.example.a?fragment=1"} {
		res, body := get(t, h, path)
		if res.StatusCode != 200 || !utf8.ValidString(body) || len(body) > 200_000 {
			t.Fatalf("GET %s: %s, %d bytes", path, res.Status, len(body))
		}
		for _, bad := range []string{"<script>alert", "<b>\n", "<i>boom"} {
			if strings.Contains(body, bad) {
				t.Errorf("GET %s: unescaped %q", path, bad)
			}
		}
		i, j := strings.Index(body, `AAAA`), strings.Index(body, `t[&lt;script&gt;alert(&#34;t&#34;)&lt;/script&gt;](x.T)`)
		if i < 0 || j < 0 || i > j {
			t.Errorf("GET %s: the tests are not listed newest first, escaped (at %d and %d)", path, i, j)
		}
		for _, want := range []string{`id="tests"`, "Running now: <b class=\"name\">running(x.T)</b>", "1.5 s", "123,456", "6.7 MiB", "<b>partial</b> crossed a tracker cycle &lt;b&gt;\uFFFD",
			"java.lang.AssertionError: &lt;i&gt;boom&lt;/i&gt;", "passed 1", "failed 1", "1 run under way"} {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s lacks %q", path, want)
			}
		}
	}
	_, body := get(t, h, "/api/v1/apps/emulator-5554/com.example.a")
	var app web.App
	if err := json.Unmarshal([]byte(body), &app); err != nil {
		t.Fatal(err)
	}
	ts := app.Tests
	if ts == nil || len(ts.Recent) != 2 || ts.Recent[1].Name != hostileTest || ts.Recent[0].DurationSeconds != 0.25 || !ts.Recent[0].Partial ||
		ts.Current == nil || ts.Current.Name != "running(x.T)" || ts.Outcomes["failed"] != 1 || ts.Bytes != 9000 || ts.Runs != 1 {
		t.Fatalf("tests JSON: %+v", ts)
	}
	if !utf8.ValidString(ts.Recent[0].Name) {
		t.Error("invalid UTF-8 in a test name of the JSON")
	}
	_, body = get(t, h, hostilePkgPath)
	if strings.Contains(body, `id="tests"`) {
		t.Error("an app that ran no test shows a test table")
	}
	_, body = get(t, h, "/api/v1"+hostilePkgPath)
	if strings.Contains(body, `"tests"`) {
		t.Error("an app that ran no test has tests in its JSON")
	}
}
