package adb_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/sim"
)

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"com.example.app", "com.example.app"},
		{"com.example.app:remote", "com.example.app:remote"},
		{"-A", "-A"},
		{"", "''"},
		{"x; reboot", "'x; reboot'"},
		{"it's", `'it'\''s'`},
		{"$(reboot)", "'$(reboot)'"},
		{"`reboot`", "'`reboot`'"},
		{"a=b", "'a=b'"},
		{"~", "'~'"},
		{"a\nb", "'a\nb'"},
	} {
		if got := adb.Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := adb.ShellCommand("pidof", "x; reboot"); got != "pidof 'x; reboot'" {
		t.Errorf("ShellCommand = %q", got)
	}
}

// TestShellQuotesSim sends words full of shell syntax through the shell:
// service of a simulated device, whose shell parses like sh: each must
// arrive as one word, and nothing else may run.
func TestShellQuotesSim(t *testing.T) {
	d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-1", API: 30})
	_, c := simServer(t, d)
	words := []string{"x; reboot", "$(reboot)", "`reboot`", "it's", `a\b`, `"q"`, "a && reboot", "a | reboot", "", "  two  spaces ", "new\nline"}
	out, err := c.Shell(ctxT(t), "sim-1", append([]string{"echo"}, words...)...)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(words, " ") + "\n"; out != want {
		t.Errorf("echo printed %q, want %q", out, want)
	}
	if n := d.Reboots(); n != 0 {
		t.Errorf("the device rebooted %d times", n)
	}
	log := d.ShellLog()
	if want := append([]string{"echo"}, words...); len(log) != 1 || !slices.Equal(log[0], want) {
		t.Errorf("the shell ran %q, want only %q", log, want)
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"com.example.app", "com.example.app:remote", "com.Example_1.a2", "system_server", "a", "com.example:a.b_c"} {
		if err := adb.CheckName(ok); err != nil {
			t.Errorf("CheckName(%q) = %v", ok, err)
		}
	}
	for _, tc := range []struct{ name, want string }{
		{"", "empty"},
		{"x; reboot", `character ';' at byte 1`},
		{"com.example app", `character ' ' at byte 11`},
		{"com..app", "empty segment at byte 4"},
		{".com", "empty segment at byte 0"},
		{"com.", "empty segment at byte 4"},
		{"com.1app", `segment starts with '1' at byte 4`},
		{"_com", `segment starts with '_' at byte 0`},
		{"com.app:", "empty segment at byte 8"},
		{"com.app:a:b", `character ':' at byte 9`},
		{"com.app$(reboot)", `character '$' at byte 7`},
		{"-A", `character '-' at byte 0`},
		{"com.exämple", `character 'ä' at byte 6`},
		{strings.Repeat("a", 256), "256 bytes, more than 255"},
	} {
		err := adb.CheckName(tc.name)
		if !errors.Is(err, adb.ErrBadName) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckName(%.20q) = %v, want ErrBadName saying %q", tc.name, err, tc.want)
		}
	}
}

func TestParsePS(t *testing.T) {
	toolbox := "USER     PID   PPID  VSIZE  RSS     WCHAN    PC         NAME\r\n" +
		"root      1     0     8904   788   ffffffff 00000000 S /init\r\n" +
		"u0_a54    2305  180   498120 27512 ffffffff 4006ba10 S com.example.app\r\n" +
		"u0_a54    2333  180   498120 27512 ffffffff 4006ba10 S com.example.app:remote\r\n"
	toybox := "USER           PID  PPID     VSZ    RSS WCHAN            ADDR S NAME                       \n" +
		"root             1     0   12345   2345 SyS_epoll_wait      0 S init\n" +
		"u0_a54        2305   180 1234567  45678 SyS_epoll_wait      0 S com.example.app\n"
	for _, tc := range []struct {
		name, out string
		want      []adb.Process
	}{
		{"toolbox", toolbox, []adb.Process{{1, "/init"}, {2305, "com.example.app"}, {2333, "com.example.app:remote"}}},
		{"toybox", toybox, []adb.Process{{1, "init"}, {2305, "com.example.app"}}},
		{"toolbox -A (header only)", "USER     PID   PPID  VSIZE  RSS     WCHAN    PC         NAME\r\n", nil},
	} {
		got, err := adb.ParsePS(tc.out)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: ParsePS = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ name, out, want string }{
		{"empty", "", "has no header"},
		{"not ps", "/system/bin/sh: ps: not found\n", `line 1 "/system/bin/sh: ps: not found" is not a header`},
		{"short line", toybox + "u0_a1 77\n", `line 4 "u0_a1 77" has 2 fields, want at least 9`},
		{"bad pid", toolbox + "u0_a1 x 1 1 1 1 1 S n\n", `line 5 "u0_a1 x 1 1 1 1 1 S n": PID "x" is not a process id`},
	} {
		_, err := adb.ParsePS(tc.out)
		if !errors.Is(err, adb.ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ParsePS = %v, want ErrProtocol saying %q", tc.name, err, tc.want)
		}
	}
}

// TestPIDsOfSim finds an app's pids on simulated devices of each shell
// flavour: Android 4.4 and 5.x (no pidof, toolbox ps), 6.0 to 7.1 (pidof,
// toolbox ps), 8.0 and later (pidof, toybox ps -A), and an unknown API
// level. Names match exactly: a process whose name only starts with the
// app's (com.example.app2, com.example.app:remote) is not it.
func TestPIDsOfSim(t *testing.T) {
	const app = "com.example.app"
	for _, api := range []int{19, 21, 22, 23, 25, 26, 30} {
		t.Run(fmt.Sprint(api), func(t *testing.T) {
			d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-1", API: api})
			d.AddVM(sim.NewVM(sim.AppConfig{PID: 4242, Package: app, Workload: sim.Workload{Rate: 0}}, api))
			d.AddVM(sim.NewVM(sim.AppConfig{PID: 4250, Package: app + "2", Workload: sim.Workload{Rate: 0}}, api))
			d.AddProcess(4300, app+":remote")
			d.AddProcess(4400, app) // a second process of that name
			_, c := simServer(t, d)
			ctx := ctxT(t)
			for _, a := range []int{api, 0} {
				pids, err := c.PIDsOf(ctx, "sim-1", app, a)
				if err != nil || !slices.Equal(pids, []int{4242, 4400}) {
					t.Errorf("PIDsOf(%s, api %d) = %v, %v; want [4242 4400]", app, a, pids, err)
				}
				if pids, err := c.PIDsOf(ctx, "sim-1", "com.example", a); err != nil || len(pids) != 0 {
					t.Errorf("PIDsOf(com.example, api %d) = %v, %v; want none", a, pids, err)
				}
				if pids, err := c.PIDsOf(ctx, "sim-1", app+":remote", a); err != nil || !slices.Equal(pids, []int{4300}) {
					t.Errorf("PIDsOf(%s:remote, api %d) = %v, %v; want [4300]", app, a, pids, err)
				}
				if name, err := c.ProcessName(ctx, "sim-1", 4250, a); err != nil || name != app+"2" {
					t.Errorf("ProcessName(4250, api %d) = %q, %v", a, name, err)
				}
				if _, err := c.ProcessName(ctx, "sim-1", 9999, a); !errors.Is(err, adb.ErrNoProcess) {
					t.Errorf("ProcessName(9999, api %d) = %v, want ErrNoProcess", a, err)
				}
			}
			if _, err := c.PIDsOf(ctx, "sim-1", "x; reboot", api); !errors.Is(err, adb.ErrBadName) {
				t.Errorf("PIDsOf(x; reboot) = %v, want ErrBadName", err)
			}
			for _, cmd := range d.ShellLog() {
				if cmd[0] == "pidof" && api < 23 {
					t.Errorf("pidof asked on API %d, which has none", api)
				}
				if cmd[0] != "pidof" && cmd[0] != "ps" {
					t.Errorf("ran %q", cmd)
				}
			}
			if d.Reboots() != 0 {
				t.Error("rebooted")
			}
		})
	}
}
