package archtest

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// dotdotPath matches a relative path that climbs: "../x/y", "../../x".
	dotdotPath = regexp.MustCompile(`(?:\.\./)+[A-Za-z0-9_.\-/]*`)
	// joinPath matches filepath.Join("..", "..", "x", …) in Go code.
	joinPath = regexp.MustCompile(`filepath\.Join\(((?:"\.\.",\s*)+)((?:"[^"]*"(?:,\s*)?)*)\)`)
	quoted   = regexp.MustCompile(`"([^"]*)"`)
)

// TestNoPathsOutsideRepository fails when a tracked file names a climbing
// path ("../x") that leads to nothing the repository has, whether read from
// the file's own directory or from any other (a README may describe paths
// as a compose file beside it writes them): a clone with nothing beside it
// must build, test and read.
func TestNoPathsOutsideRepository(t *testing.T) {
	rootOut, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	root := strings.TrimSpace(string(rootOut))
	list, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(list), "\x00"), "\x00")
	known := make(map[string]bool) // tracked files and every directory above them
	for _, f := range files {
		for p := f; p != "." && p != "/"; p = path.Dir(p) {
			known[p] = true
		}
	}
	var dirs []string // a path may be written relative to another file (a README about a compose file)
	for p := range known {
		if !slices.Contains(files, p) {
			dirs = append(dirs, p)
		}
	}
	for _, f := range files {
		if f == "internal/archtest/paths_test.go" {
			continue // this file's examples climb out on purpose
		}
		b, err := os.ReadFile(path.Join(root, f))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet committed
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(b, 0) >= 0 {
			continue // binary
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, ref := range refs(f, line) {
				if msg := checkRef(path.Dir(f), ref, known); msg != "" && !resolvesSomewhere(ref, dirs, known) {
					t.Errorf("%s:%d: %q %s", f, i+1, ref, msg)
				}
			}
		}
	}
}

// refs returns the climbing paths a line names.
func refs(file, line string) []string {
	var out []string
	for _, m := range dotdotPath.FindAllString(line, -1) {
		out = append(out, strings.TrimRight(m, "."))
	}
	if strings.HasSuffix(file, ".go") {
		for _, m := range joinPath.FindAllStringSubmatch(line, -1) {
			parts := []string{}
			for _, q := range quoted.FindAllStringSubmatch(m[1]+m[2], -1) {
				parts = append(parts, q[1])
			}
			out = append(out, path.Join(parts...))
		}
	}
	return out
}

// resolvesSomewhere tells whether ref, read from some directory of the
// repository, names something the repository has.
func resolvesSomewhere(ref string, dirs []string, known map[string]bool) bool {
	for _, d := range dirs {
		if checkRef(d, ref, known) == "" {
			return true
		}
	}
	return false
}

// checkRef resolves ref against dir (both relative to the repository root)
// and says what is wrong with it, or "" when it names something tracked.
func checkRef(dir, ref string, known map[string]bool) string {
	p := path.Join(dir, ref)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "climbs out of the repository"
	}
	if p == "." || known[p] || known[strings.TrimSuffix(p, "/")] {
		return ""
	}
	return "names " + p + ", which the repository does not have"
}

func TestCheckRef(t *testing.T) {
	known := map[string]bool{"testdata": true, "testdata/README.md": true, "cmd": true}
	for _, c := range []struct {
		dir, ref string
		bad      bool
	}{
		{"jdwp", "../elsewhere/docs/protocol.md", true},
		{"e2e", "../../elsewhere/docs/protocol.md", true},
		{"alloctrack", "../testdata/README.md", false},
		{"testdata", "../cmd/", false},
		{"scripts", "../elsewhere/testdata/real/x.real", true},
		{".", "../elsewhere", true},
	} {
		if got := checkRef(c.dir, c.ref, known) != ""; got != c.bad {
			t.Errorf("checkRef(%q, %q) bad = %v, want %v", c.dir, c.ref, got, c.bad)
		}
	}
	if got := refs("a_test.go", `var r = filepath.Join("..", "..", "elsewhere", "testdata", "x.real")`); len(got) != 1 || got[0] != "../../elsewhere/testdata/x.real" {
		t.Errorf("refs of a filepath.Join: %q", got)
	}
}
