// Package realtest finds the real programs that tests run (the adb server,
// Prometheus and promtool, protoc, …). A test that needs one skips, naming
// the Debian package that provides it, when it is not installed; when the
// environment variable CI is set (.ci/run sets it) the test fails instead,
// so that CI never passes by skipping.
package realtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Program returns the path of the program name from the Debian package pkg,
// on PATH or in one of dirs, or skips t (fails it when CI is set) if it is
// in neither.
func Program(t testing.TB, name, pkg string, dirs ...string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	for _, d := range dirs {
		if err == nil {
			break
		}
		p, err = exec.LookPath(filepath.Join(d, name))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found (install the Debian package %s): %v", name, pkg, err)
		}
		t.Skipf("%s not found; install the Debian package %s to run this test (%v)", name, pkg, err)
	}
	return p
}

// EnvFile returns the file named by environment variable env, or skips t
// (fails it when CI is set) if env is unset or names no file; how says
// how to get one.
func EnvFile(t testing.TB, env, how string) string {
	t.Helper()
	p := os.Getenv(env)
	if _, err := os.Stat(p); p == "" || err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("$%s (%q) names no file: %s", env, p, how)
		}
		t.Skipf("$%s (%q) names no file: %s", env, p, how)
	}
	return p
}
