package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/common/version"
)

func TestStampVersion(t *testing.T) {
	save := [4]string{version.Version, version.Revision, version.Branch, version.BuildDate}
	t.Cleanup(func() {
		version.Version, version.Revision, version.Branch, version.BuildDate = save[0], save[1], save[2], save[3]
	})
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-11-22T23:42:40Z"}, {Key: "vcs.modified", Value: modified}}
	}
	for _, c := range []struct {
		name                 string
		bi                   *debug.BuildInfo
		ok                   bool
		preset               string // a version set with -ldflags
		version, rev, branch string
	}{
		{"no build info", nil, false, "", "devel", "unknown", "unknown"},
		{"go run without vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "", "devel", "unknown", "unknown"},
		{"clean checkout", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261122234240-5a4eb462ae83"}, Settings: vcs("5a4eb462ae830b9e", "false")}, true, "", "v0.0.0-20261122234240-5a4eb462ae83", "5a4eb462ae830b9e", "unknown"},
		{"dirty work tree", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261122234240-5a4eb462ae83+dirty"}, Settings: vcs("5a4eb462ae830b9e", "true")}, true, "", "v0.0.0-20261122234240-5a4eb462ae83+dirty", "5a4eb462ae830b9e-dirty", "unknown"},
		{"dirty, no module version", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("abc", "true")}, true, "", "devel+dirty", "abc-dirty", "unknown"},
		{"tagged install", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true, "", "v1.2.3", "unknown", "unknown"},
		{"ldflags win", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: vcs("abc", "false")}, true, "v9", "v9", "abc", "unknown"},
	} {
		version.Version, version.Revision, version.Branch, version.BuildDate = c.preset, "", "", ""
		stampVersion(c.bi, c.ok)
		if version.Version != c.version || version.Revision != c.rev || version.Branch != c.branch {
			t.Errorf("%s: version %q revision %q branch %q; want %q %q %q", c.name, version.Version, version.Revision, version.Branch, c.version, c.rev, c.branch)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	out, errOut, code := runCmd(t, "--version")
	all := out + errOut
	if code != exitOK || !strings.Contains(all, "alloctrack, version ") || strings.Contains(all, "version  (") || strings.Contains(all, "revision: \n") {
		t.Fatalf("--version: exit %d, printed %q", code, all)
	}
}

// TestBuiltBinaryKnowsItsRevision builds the binary from this checkout the
// way `go build` and the README's `go run -buildvcs=true` do, and checks that
// --version names the checkout's revision.
func TestBuiltBinaryKnowsItsRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("git rev-parse HEAD: %v (CI runs in a clone)", err)
		}
		t.Skipf("not in a git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "alloctrack")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if m, err := exec.Command("go", "version", "-m", bin).Output(); err != nil || !strings.Contains(string(m), "vcs.revision=") {
		// The go command records nothing in some checkouts (a git
		// worktree, for one); then there is nothing for us to read.
		t.Skipf("go build -buildvcs=true recorded no VCS revision here (%v)", err)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("alloctrack --version: %v\n%s", err, out)
	}
	rev := strings.TrimSpace(string(head))
	if !strings.Contains(string(out), "revision: "+rev) || strings.Contains(string(out), "version (devel)") {
		t.Fatalf("alloctrack --version does not name revision %s:\n%s", rev, out)
	}
}

func TestHelpAndNoCommand(t *testing.T) {
	if _, errOut, code := runCmd(t, "--help"); code != exitOK || !strings.Contains(errOut, "usage: alloctrack") || strings.Contains(errOut, "command not specified") {
		t.Errorf("--help: exit %d, printed %q", code, errOut)
	}
	if _, errOut, code := runCmd(t); code != exitUsage || !strings.Contains(errOut, "command not specified") {
		t.Errorf("no command: exit %d, printed %q", code, errOut)
	}
}
