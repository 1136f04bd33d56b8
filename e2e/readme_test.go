package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/adbtest"
)

// TestReadmeCIExample runs the README's CI example (the shell block
// between the ci-example markers) as it stands, with the alloctrack under
// test first on PATH, on a free port instead of the README's: the
// captures, the budget check and the diff must all succeed, and leave the
// files the README says they write. A stale command fails here.
func TestReadmeCIExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "<!-- ci-example -->\n```sh\n")
	end := strings.Index(readme, "```\n<!-- /ci-example -->")
	if start < 0 || end < start {
		t.Fatal("README.md has no ci-example block")
	}
	script := readme[start+len("<!-- ci-example -->\n```sh\n") : end]
	port := strconv.Itoa(adbtest.FreePort(t))
	script = strings.ReplaceAll(script, "15037", port)

	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(bin, "alloctrack")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	// Its own process group: the simulator it starts in the background
	// is stopped with it, whatever line fails.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("the README's CI example did not finish in 2 minutes:\n%s", out)
	}
	if err != nil {
		t.Fatalf("the README's CI example failed: %v\n%s", err, out)
	}
	for _, f := range []string{"base/summary.json", "new/summary.json", "new/profile.pb.gz", "budget.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the example left no %s: %v", f, err)
		}
	}
	t.Logf("the example's output:\n%s", out)
	if s := string(out); !strings.Contains(s, "within budget") || !strings.Contains(s, "sites[0]") {
		t.Errorf("the budget check did not report its margins:\n%s", s)
	}
}
