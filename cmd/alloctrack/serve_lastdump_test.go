package main

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// TestLastDumpForgottenWithItsApp: an app the daemon forgot (gone longer
// than --devices.retention) takes its last-dump series with it, as it
// does its other series; a dump of an app still listed stays.
func TestLastDumpForgottenWithItsApp(t *testing.T) {
	var mu sync.Mutex
	apps := []alloctrack.AppSnapshot{
		{AppStatus: alloctrack.AppStatus{Serial: "sim-1", Package: "com.example.app1"}},
		{AppStatus: alloctrack.AppStatus{Serial: "10.0.0.7:41234", Package: "com.example.app1"}},
	}
	l := newLastDumps(func(serial, pkg string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range apps {
			if a.Serial == serial && a.Package == pkg {
				return true
			}
		}
		return false
	})
	l.set("sim-1", "com.example.app1", 1.5)
	l.set("10.0.0.7:41234", "com.example.app1", 2.5)
	both := `
# HELP alloctrack_heapdump_last_duration_seconds The last heap dump of each app, from am dumpheap until the dump was complete (the app's freeze, at most).
# TYPE alloctrack_heapdump_last_duration_seconds gauge
alloctrack_heapdump_last_duration_seconds{package="com.example.app1",serial="10.0.0.7:41234"} 2.5
alloctrack_heapdump_last_duration_seconds{package="com.example.app1",serial="sim-1"} 1.5
`
	if err := testutil.CollectAndCompare(l, strings.NewReader(both)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	apps = apps[:1] // the wireless device's serial is forgotten
	mu.Unlock()
	one := `
# HELP alloctrack_heapdump_last_duration_seconds The last heap dump of each app, from am dumpheap until the dump was complete (the app's freeze, at most).
# TYPE alloctrack_heapdump_last_duration_seconds gauge
alloctrack_heapdump_last_duration_seconds{package="com.example.app1",serial="sim-1"} 1.5
`
	if err := testutil.CollectAndCompare(l, strings.NewReader(one)); err != nil {
		t.Fatal(err)
	}
	if n := len(l.by); n != 1 {
		t.Errorf("%d apps' last dumps kept, want 1", n)
	}
}
