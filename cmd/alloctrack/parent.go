package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
)

// goRunParent returns the parent's pid when this process is a build of
// `go run` that the go command runs: go run ends on SIGTERM without
// passing it on, so the process must follow it out (followGoRun). It
// reads /proc (Linux); elsewhere it finds no go run parent.
func goRunParent() (int, bool) {
	ppid := os.Getppid()
	self, err := os.Executable()
	if err != nil {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ppid))
	if err != nil {
		return 0, false
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", ppid))
	args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	return ppid, isGoRun(self, exe, args)
}

// isGoRun tells whether a process whose executable is self, and whose
// parent runs the executable parentExe with parentArgs, was started by
// go run: self lies in a go-build temporary directory, and the parent is
// the go command (by its executable or its argv[0]) running `run`
// (after an optional -C DIR).
func isGoRun(self, parentExe string, parentArgs []string) bool {
	built := false
	for _, d := range strings.Split(filepath.Dir(self), string(filepath.Separator)) {
		built = built || strings.HasPrefix(d, "go-build")
	}
	if !built || len(parentArgs) < 2 || filepath.Base(parentExe) != "go" && filepath.Base(parentArgs[0]) != "go" {
		return false
	}
	args := parentArgs[1:]
	switch {
	case args[0] == "-C" && len(args) > 2:
		args = args[2:]
	case strings.HasPrefix(args[0], "-C="):
		args = args[1:]
	}
	return args[0] == "run"
}

// followGoRun stops the daemon, saying why, once its parent go run
// (pid parent) has exited, looking every interval; ppid is os.Getppid.
func followGoRun(ctx context.Context, log *zap.Logger, parent int, ppid func() int, every time.Duration, stop func()) {
	log.Debug("started by go run: following it out", zap.Int("parent_pid", parent))
	watchParent(ctx, parent, ppid, every, func() {
		log.Info(fmt.Sprintf("parent go run (pid %d) exited; stopping", parent), zap.Int("parent_pid", parent))
		stop()
	})
}

// watchParent calls gone once the process's parent is no longer parent
// (it exited, and the process was handed to another), looking every
// interval; it returns then, or when ctx ends.
func watchParent(ctx context.Context, parent int, ppid func() int, every time.Duration, gone func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for ppid() == parent {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	gone()
}
