// Package alloctrack is the counting model and the device sessions: what
// the daemon and the offline commands count, and how they get it.
//
// The model: Counters keep an app's per-class and per-site totals, with a
// bounded number of series and the rest in "other"; Tally keeps a whole
// run's; ProfileBuilder turns either source into a pprof profile. The
// sources: Session runs the DDM allocation tracker of one VM over JDWP
// (Android 4.4–11), HeapprofdSession one perfetto heapprofd session for a
// device's apps (Android 12+). Daemon supervises devices and apps on
// adb servers. Captures, budgets and diffs are the offline runs.
package alloctrack
