package e2e

import (
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// TestExecThroughADB runs commands on a simulated device through the real
// adb server with adb.Exec (shell protocol v2): standard output and the
// exit status come back apart, and standard input is accepted.
func TestExecThroughADB(t *testing.T) {
	r := attachFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{31}, Workload: quietWorkload()}, nil)
	c := adb.NewClient(r.adb.Addr())
	serial := r.serial["sim-1"]
	ctx := testwait.Context(t)

	out, errOut, code, err := c.Exec(ctx, serial, []byte("input the command does not read\n"), "getprop", "ro.build.version.sdk")
	if err != nil || string(out) != "31\n" || len(errOut) != 0 || code != 0 {
		t.Fatalf("getprop: stdout %q, stderr %q, exit %d, %v; want \"31\\n\", nothing, 0", out, errOut, code, err)
	}
	out, errOut, code, err = c.Exec(ctx, serial, nil, "nosuchcmd", "a b")
	if err != nil || code != 127 || len(out) != 0 || !strings.Contains(string(errOut), "nosuchcmd") {
		t.Fatalf("an unknown command: stdout %q, stderr %q, exit %d, %v; want the shell's message on stderr and 127", out, errOut, code, err)
	}
	// The device's shell saw the quoted argument as one word.
	log := r.farm.Device("sim-1").ShellLog()
	if last := log[len(log)-1]; len(last) != 2 || last[1] != "a b" {
		t.Errorf("the device ran %q, want [nosuchcmd \"a b\"]", last)
	}
}
