// Package sim simulates Android devices and their debuggable apps, faithfully
// enough that the real adb server, Google's ddmlib and this project's own
// client accept them (docs/protocol.md at the repository root, all sections).
//
// A VM is one app process: it speaks JDWP and DDM like ART (or Dalvik, by API
// level), runs a seeded allocation workload, keeps allocation records as the
// VM's tracker does, and remembers the ground truth of what it allocated while
// tracking was on, so tests can assert exact totals. A Device holds VMs and
// answers device services (shell, track-jdwp, jdwp, jdwp:<pid>); Adbd serves a
// Device over the adbd wire protocol to a real adb server, and HostServer is a
// stand-in adb server for machines with no adb installed. Faults can be
// injected per VM and per device while everything runs.
//
// The simulator is a product feature (alloctrack sim, serve --simulate), built
// from the same codecs the client uses: jdwp, ddms and alloctrack.
package sim
