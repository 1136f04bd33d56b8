package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/testwait"
)

// proc is a child process owned by a test: its output goes to a buffer,
// and it is stopped by its pid.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{} // closed once the process has been waited for
}

// startProc starts bin with args in dir; env nil means the test's own
// environment. The caller stops it (stop) in a t.Cleanup of its own.
func startProc(t testing.TB, name, dir string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = env
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = &p.out
	p.cmd.WaitDelay = 2 * time.Second // output pipes held by anything it forked
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s (%s): %v", name, bin, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited tells whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// state is the exit state; nil while the process runs.
func (p *proc) state() *os.ProcessState {
	if !p.exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// stop sends SIGTERM to the process, waits up to grace for it to exit,
// then kills it. It returns the exit state and whether it had to kill.
// It may be called more than once.
func (p *proc) stop(grace time.Duration) (st *os.ProcessState, killed bool) {
	if !p.exited() {
		syscall.Kill(p.pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			killed = true
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	return p.cmd.ProcessState, killed
}

// kill kills the process at once and waits for it.
func (p *proc) kill() {
	if !p.exited() {
		p.cmd.Process.Kill()
	}
	<-p.done
}

// tail is the last n lines the process wrote.
func (p *proc) tail(n int) string {
	lines := strings.SplitAfter(p.out.String(), "\n")
	if len(lines) > n {
		lines = append([]string{"…\n"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "")
}

// syncBuffer is a bytes.Buffer safe for a writer and readers at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor polls cond every 100 ms until it holds and returns how long that
// took; after timeout, or testwait.Bound if that is longer (a loaded
// machine is slow, never wrong), it fails the test with what and cond's
// last status.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	timeout = testwait.AtLeast(timeout)
	for {
		ok, status := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not done after %v (%s)", what, timeout, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
