// Package alloctrack is the counting model: what every backend produces
// and every consumer reads, with no device, codec or log in it.
//
// A backend (alloctrack/ddm for Android 4.4–11, alloctrack/heapprofd for
// Android 12+) turns what it reads into a Window: one app's allocations
// over a span of time, per class and per site (window.go). Counters keep
// an app's totals for the daemon, with a bounded number of series and the
// rest in "other"; Tally keeps a whole run's for reports, budgets and
// diffs; ProfileBuilder makes pprof profiles. Each takes a window with one
// Add. The vocabulary (backends, states, stages, errors) is in const.go,
// the units (counts, estimates, frames, site ids) in model.go, and what
// the exporter and the web view read in snapshot.go. The supervisor
// (alloctrack/supervisor) runs the backends; alloctrack/offline holds the
// runs without a daemon.
package alloctrack
