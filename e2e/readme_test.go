package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// readmeCIScript returns the README's CI example (the shell block between
// the ci-example markers) as it stands, on a free port instead of the
// README's.
func readmeCIScript(t *testing.T) string {
	t.Helper()
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
	return strings.ReplaceAll(script, "15037", strconv.Itoa(adbtest.FreePort(t)))
}

// runCIScript runs script with plain bash (no -e: the script must fail by
// itself, as a CI job's shell step would run it) in a new directory, with
// the alloctrack under test first on PATH. It returns the directory, the
// output and bash's error.
func runCIScript(t *testing.T, script string) (string, string, error) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(bin, "alloctrack")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", script)
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
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("the README's CI example did not finish in 2 minutes:\n%s", out)
	}
	return dir, string(out), err
}

// TestReadmeCIExample runs the README's CI example as it stands: the
// captures, the budget check and the diff must all succeed, and leave the
// files the README says they write. A stale command fails here.
func TestReadmeCIExample(t *testing.T) {
	dir, out, err := runCIScript(t, readmeCIScript(t))
	if err != nil {
		t.Fatalf("the README's CI example failed: %v\n%s", err, out)
	}
	for _, f := range []string{"base/summary.json", "new/summary.json", "new/profile.pb.gz", "budget.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the example left no %s: %v", f, err)
		}
	}
	t.Logf("the example's output:\n%s", out)
	if !strings.Contains(out, "within budget") || !strings.Contains(out, "sites[0]") {
		t.Errorf("the budget check did not report its margins:\n%s", out)
	}
}

// TestReadmeCIExampleFails runs the README's CI example with a failing
// step, as a CI job would run it: it must fail, and run nothing after the
// step. A capture that fails stops it; so does a capture whose failure is
// ignored (|| true, here one that left a summary.json with "error" and no
// window), at the budget check (exit 4), before the diff.
func TestReadmeCIExampleFails(t *testing.T) {
	script := readmeCIScript(t)
	base := "--package com.example.app1 --duration 10s --wait 1m --out base/"
	newLine := regexp.MustCompile(`(?m)^alloctrack capture .* --out new/$`)
	if !strings.Contains(script, base) || !newLine.MatchString(script) {
		t.Fatalf("the README's captures changed; update this test:\n%s", script)
	}
	t.Run("capture fails", func(t *testing.T) {
		_, out, err := runCIScript(t, strings.Replace(script, base, "--package com.example.gone --duration 10s --wait 1s --out base/", 1))
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want 1:\n%s", err, out)
		}
		if !strings.Contains(out, "app com.example.gone is not running") || strings.Contains(out, "within budget") || strings.Contains(out, "sites matched on") {
			t.Errorf("the example went on after the failed capture:\n%s", out)
		}
	})
	t.Run("failed capture ignored", func(t *testing.T) {
		failed := `mkdir -p new && echo '{"windows": 0, "error": "the app died"}' > new/summary.json || true`
		_, out, err := runCIScript(t, newLine.ReplaceAllLiteralString(script, failed))
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
			t.Fatalf("exit %v, want 4:\n%s", err, out)
		}
		if !strings.Contains(out, "the capture failed: the app died") || strings.Contains(out, "within budget") || strings.Contains(out, "sites matched on") {
			t.Errorf("the example judged or diffed a failed capture:\n%s", out)
		}
	})
}

// TestReadmeFirstCommand runs the README's first command from the
// repository's root as a person would (on a private port rather than
// :9853): it serves the simulated farm, its apps are tracking after one
// window, and SIGTERM to go run alone (which does not pass it on) stops the
// daemon too. It also runs the README's install lines: make build, and
// go install into a temporary GOBIN.
func TestReadmeFirstCommand(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const first = "go run -buildvcs=true ./cmd/alloctrack serve --simulate"
	if !strings.Contains(string(b), "\n"+first+" ") {
		t.Fatalf("the README's first command is no longer %q", first)
	}
	if !strings.Contains(string(b), "go install ./cmd/alloctrack") || !strings.Contains(string(b), "make build ") {
		t.Fatal("the README's install lines are gone")
	}

	// make build: bin/alloctrack (ignored by git), stamped from git.
	if make, err := exec.LookPath("make"); err == nil {
		build := exec.Command(make, "build")
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("make build: %v\n%s", err, out)
		}
		// The Makefile's output, a build product git ignores.
		root, err := filepath.Abs("..")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(filepath.Join(root, "bin", "alloctrack"), "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "alloctrack, version") {
			t.Fatalf("bin/alloctrack --version: %v\n%s", err, out)
		}
	} else if os.Getenv("CI") != "" {
		t.Fatal("make not found")
	}
	gobin := t.TempDir()
	install := exec.Command(goTool(), "install", "./cmd/alloctrack")
	install.Dir = ".."
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/alloctrack: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(gobin, "alloctrack"), "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "alloctrack, version") {
		t.Fatalf("the installed alloctrack --version: %v\n%s", err, out)
	}

	addr := "127.0.0.1:" + strconv.Itoa(adbtest.FreePort(t))
	args := append(strings.Fields(first)[1:], "--web.listen-address", addr, "--window", "2s")
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = ".."
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		http.DefaultClient.CloseIdleConnections()
	})
	deadline := time.Now().Add(3 * testwait.Bound) // go run compiles first
	for {
		res, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if strings.Contains(string(body), `alloctrack_app_state{package="com.example.app1",serial="sim-1",state="tracking"} 1`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tracking app at %s/metrics in %v; go run's stderr:\n%s", addr, 3*testwait.Bound, stderr.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "web view at http://"+addr+"/") {
		t.Errorf("the daemon did not print its address:\n%s", stderr.String())
	}
	// SIGTERM to go run alone: the daemon follows its parent out, and says
	// so (it received no signal).
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // also waits for the daemon, which shares go run's stderr
	if log := stderr.String(); !strings.Contains(log, fmt.Sprintf("parent go run (pid %d) exited; stopping", cmd.Process.Pid)) || strings.Contains(log, "signal received") {
		t.Errorf("the daemon's log does not say that go run exited, or speaks of a signal:\n%s", log)
	}
	for stop := time.Now().Add(testwait.Bound); ; {
		if _, err := http.Get("http://" + addr + "/metrics"); err != nil {
			break
		}
		if time.Now().After(stop) {
			t.Fatalf("the daemon serves on after go run ended:\n%s", stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// promqlExamples returns the PromQL examples of a Markdown file: each
// query of its promql blocks, a query's lines joined, comments dropped.
func promqlExamples(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, " "))
			cur = nil
		}
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "```promql"):
			in = true
		case in && strings.HasPrefix(line, "```"):
			flush()
			in = false
		case in && (strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#")):
			flush()
		case in:
			cur = append(cur, strings.TrimSpace(line))
		}
	}
	return out
}

// TestDocsPromQL runs every PromQL example of the README and
// docs/serve.md against a real Prometheus scraping the daemon on a
// simulated farm: each must parse and evaluate, and those over allocation
// counters must find series (with the examples' package name, the
// simulator's first app).
func TestDocsPromQL(t *testing.T) {
	var queries []string
	for _, f := range []string{filepath.Join("..", "README.md"), filepath.Join("..", "docs", "serve.md")} {
		qs := promqlExamples(t, f)
		if len(qs) == 0 {
			t.Fatalf("%s has no PromQL example", f)
		}
		queries = append(queries, qs...)
	}
	r := newRig(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 2, APIs: []int{30}, Workload: sim.DefaultWorkload()}, nil)
	p := startPrometheus(t, r.d.addr)
	r.d.waitWindows(t, appsOf(r.trackable()), 3, 30*time.Second)
	p.scrapedAfter(t, time.Now())
	for _, q := range queries {
		q = strings.ReplaceAll(q, `"com.example.app"`, `"com.example.app1"`)
		var v []promSample
		// rate() needs two scrapes of each series: wait a little for them.
		waitFor(t, 20*time.Second, "results of "+q, func() (bool, string) {
			v = p.query(t, q)
			return len(v) > 0 || !strings.Contains(q, "_total"), fmt.Sprintf("%d series", len(v))
		})
	}
	r.d.shutdown(t)
}
