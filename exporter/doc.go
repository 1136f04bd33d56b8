// Package exporter shows the daemon's counts as Prometheus metrics.
//
// Its collector builds constant metrics from a snapshot the daemon keeps
// up to date, so a scrape never waits on a device and does no device I/O of
// any kind. Names live under the alloctrack_ namespace, in base units, with
// _total on counters (Prometheus "Writing exporters" and "Metric and label
// naming"). Handler adds /metrics, /-/healthy, /-/ready and a landing page.
package exporter
