// Package e2e holds the end-to-end tests of alloctrack against real
// programs: simulated devices (package sim) served over the adbd wire
// protocol to the real adb server (Debian package adb), the alloctrack
// daemon built from cmd/alloctrack and run as a child process, and a real
// Prometheus server (Debian package prometheus) scraping it. Every process
// listens on a private loopback port and is stopped by its pid when its test
// ends (docs/protocol.md at the repository root, section 3).
//
// The package has no code outside its tests; run it with
//
//	go test -race -count=1 ./e2e
//
// Outside CI (the environment variable CI empty) a test skips when adb,
// prometheus or promtool is not installed; in CI it fails.
package e2e
