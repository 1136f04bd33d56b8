package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// appKey names an app as the metrics label it: serial and package.
type appKey struct{ serial, pkg string }

// lastDumps is alloctrack_heapdump_last_duration_seconds: the last heap
// dump's duration of each app the daemon still lists. An app the daemon
// has forgotten (--devices.retention, --devices.max-gone) loses its
// series at the next scrape, as its other series do; the scrape asks
// the daemon's memory, never a device.
type lastDumps struct {
	desc   *prometheus.Desc
	listed func(serial, pkg string) bool

	mu sync.Mutex
	by map[appKey]float64
}

var _ prometheus.Collector = (*lastDumps)(nil)

func newLastDumps(listed func(serial, pkg string) bool) *lastDumps {
	return &lastDumps{
		desc: prometheus.NewDesc("alloctrack_heapdump_last_duration_seconds",
			"The last heap dump of each app, from am dumpheap until the dump was complete (the app's freeze, at most).",
			[]string{"serial", "package"}, nil),
		listed: listed,
		by:     map[appKey]float64{},
	}
}

// set records the last dump of an app.
func (l *lastDumps) set(serial, pkg string, seconds float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.by[appKey{serial, pkg}] = seconds
}

func (l *lastDumps) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

// Collect forgets the apps the daemon no longer lists, then sends the rest.
func (l *lastDumps) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, v := range l.by {
		if !l.listed(k.serial, k.pkg) {
			delete(l.by, k)
			continue
		}
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, v, k.serial, k.pkg)
	}
}
