// Package realtest finds the real programs that tests run (the adb server,
// Prometheus and promtool, protoc, …). A test that needs one skips, naming
// the Debian package that provides it, when it is not installed; when the
// environment variable CI is set (.ci/run sets it) the test fails instead,
// so that CI never passes by skipping.
package realtest

import (
	"os"
	"os/exec"
	"testing"
)

// Program returns the path of the program name from the Debian package pkg,
// or skips t (fails it when CI is set) if it is not on PATH.
func Program(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found (install the Debian package %s): %v", name, pkg, err)
		}
		t.Skipf("%s not found; install the Debian package %s to run this test (%v)", name, pkg, err)
	}
	return p
}
