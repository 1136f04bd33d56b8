// Package supervisor follows adb servers, their devices and their apps,
// and keeps one session running for every app it may watch: a DDM session
// per debuggable process (Android 4.4–11), one heapprofd session per device
// (Android 12+). It backs off on errors, survives unplugged cables, dying
// apps and restarting adb servers, and turns tracking off everywhere when
// it stops. What it counts goes into the model's Counters; Snapshot and
// Recent are what the exporter and the web view read.
package supervisor
