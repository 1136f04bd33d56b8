package sim

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParseShell(t *testing.T) {
	for _, tc := range []struct {
		line string
		want [][]string
	}{
		{"echo hi", [][]string{{"echo", "hi"}}},
		{"  echo   a\tb  ", [][]string{{"echo", "a", "b"}}},
		{"pidof x; reboot", [][]string{{"pidof", "x"}, {"reboot"}}},
		{"a && b || c | d & e\nf", [][]string{{"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}}},
		{"pidof 'x; reboot'", [][]string{{"pidof", "x; reboot"}}},
		{`echo 'it'\''s'`, [][]string{{"echo", "it's"}}},
		{`echo "a \"b\" \$c \n"`, [][]string{{"echo", `a "b" $c \n`}}},
		{`echo a\ b\;c`, [][]string{{"echo", "a b;c"}}},
		{"echo ''", [][]string{{"echo", ""}}},
		{"", nil},
	} {
		got, err := parseShell(tc.line)
		if err != nil || !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("parseShell(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
	cmds, _ := splitShell("a | b || c|d")
	if pipes := []bool{cmds[0].pipe, cmds[1].pipe, cmds[2].pipe, cmds[3].pipe}; !slices.Equal(pipes, []bool{true, false, true, false}) {
		t.Errorf("splitShell: pipes %v, want [true false true false]", pipes)
	}
	for _, line := range []string{"echo 'a", `echo "a`} {
		if _, err := parseShell(line); !errors.Is(err, errShellSyntax) {
			t.Errorf("parseShell(%q) = %v, want a syntax error", line, err)
		}
	}
}

// TestShellInjection: the simulated shell runs what sh would, so a word
// that reaches it unquoted runs as a command, and a quoted one does not.
func TestShellInjection(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-1", API: 30})
	t.Cleanup(d.Close)
	d.runShell("pidof x; reboot")
	if d.Reboots() != 1 {
		t.Fatalf("unquoted: %d reboots, want 1 (log %q)", d.Reboots(), d.ShellLog())
	}
	d.runShell("pidof 'x; reboot'")
	if d.Reboots() != 1 {
		t.Fatalf("quoted: %d reboots, want still 1", d.Reboots())
	}
	want := [][]string{{"pidof", "x"}, {"reboot"}, {"pidof", "x; reboot"}}
	if got := d.ShellLog(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("ShellLog = %q, want %q", got, want)
	}
}

// shellOut runs cmd through the device's legacy shell: service.
func shellOut(t *testing.T, d *Device, cmd string) string {
	t.Helper()
	c, err := d.OpenService("shell:" + cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestShellByAPI: pidof from Android 6.0 (API 23); toolbox ps (every
// process; "-A" taken as a name prefix) before Android 8.0 (API 26),
// toybox ps (only the shell's own processes without -A) from then; the
// legacy shell service's pty ends lines in "\r\n" before Android 7.0.
func TestShellByAPI(t *testing.T) {
	const app = "com.example.app"
	for _, api := range []int{19, 21, 22, 23, 24, 25, 26, 28, 30} {
		t.Run(fmt.Sprint(api), func(t *testing.T) {
			d := NewDevice(DeviceConfig{Serial: "sim-1", API: api})
			t.Cleanup(d.Close)
			d.AddVM(NewVM(AppConfig{PID: 4242, Package: app, Workload: Workload{Rate: 0}}, api))
			d.AddVM(NewVM(AppConfig{PID: 4250, Package: app + "2", Workload: Workload{Rate: 0}}, api))
			d.AddProcess(4300, app+":remote")
			nl := "\n"
			if api < 24 {
				nl = "\r\n"
			}
			out := shellOut(t, d, "pidof "+app)
			if api < 23 {
				if out != "/system/bin/sh: pidof: not found"+nl {
					t.Errorf("pidof on API %d printed %q", api, out)
				}
			} else if out != "4242"+nl {
				t.Errorf("pidof on API %d printed %q", api, out)
			}

			ps := strings.Split(strings.TrimSuffix(shellOut(t, d, "ps"), nl), nl)
			psA := strings.Split(strings.TrimSuffix(shellOut(t, d, "ps -A"), nl), nl)
			line := func(lines []string) string {
				for _, l := range lines {
					if f := strings.Fields(l); len(f) > 1 && f[1] == "4242" {
						return l
					}
				}
				return ""
			}
			if api < 26 {
				if !strings.HasPrefix(ps[0], "USER     PID   PPID  VSIZE  RSS     WCHAN    PC         NAME") || len(ps) < 9 {
					t.Errorf("toolbox ps on API %d:\n%s", api, strings.Join(ps, "\n"))
				}
				if f := strings.Fields(line(ps)); len(f) != 9 || f[7] != "S" || f[8] != app {
					t.Errorf("toolbox ps line of the app: %q", line(ps))
				}
				if len(psA) != 1 {
					t.Errorf("toolbox ps -A (a name prefix) listed %d lines, want the header alone:\n%s", len(psA), strings.Join(psA, "\n"))
				}
				if pre := strings.Split(strings.TrimSuffix(shellOut(t, d, "ps "+app), nl), nl); len(pre) != 4 {
					t.Errorf("toolbox ps %s (a prefix) listed %d lines, want the header and 3 processes:\n%s", app, len(pre), strings.Join(pre, "\n"))
				}
			} else {
				if len(ps) != 3 || !strings.HasSuffix(ps[1], " sh") || !strings.HasSuffix(ps[2], " ps") {
					t.Errorf("toybox ps without -A on API %d:\n%s", api, strings.Join(ps, "\n"))
				}
				if !strings.HasPrefix(psA[0], "USER         PID  PPID     VSZ    RSS WCHAN                  ADDR S NAME") {
					t.Errorf("toybox ps -A header %q", psA[0])
				}
				if f := strings.Fields(line(psA)); len(f) != 9 || f[7] != "S" || f[8] != app {
					t.Errorf("toybox ps -A line of the app: %q", line(psA))
				}
			}
		})
	}
}

// TestShellTailPipedToHead: the simulated shell answers the bounded trace
// read (tail -c +N FILE | head -c LIMIT) as toybox does, and refuses the
// counts toybox's head refuses (-c takes a number of at least 0).
func TestShellTailPipedToHead(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-head", API: 31})
	t.Cleanup(d.Close)
	path := PerfettoTraceDir + "/t"
	d.mu.Lock()
	d.files[path] = []byte("0123456789")
	d.mu.Unlock()
	for _, tc := range []struct{ line, out string }{
		{"tail -c +3 " + path + " | head -c 4", "2345"},
		{"tail -c +9 " + path + " | head -c 4", "89"},
		{"tail -c +11 " + path + " | head -c 4", ""},
		{"tail -c +1 " + path + " | head -c 0", ""},
		{"tail -c +1 " + path + " || head -c 4", "0123456789"},
	} {
		out, errOut, code := d.runShellIO(tc.line, nil)
		if string(out) != tc.out || len(errOut) != 0 || code != 0 {
			t.Errorf("%s: %q, %q, exit %d; want %q", tc.line, out, errOut, code, tc.out)
		}
	}
	for _, bad := range []string{"head -c -1", "head -c x", "head -c"} {
		if out, errOut, code := d.runShellIO("tail -c +1 "+path+" | "+bad, nil); code == 0 || len(out) != 0 || len(errOut) == 0 {
			t.Errorf("%s: %q, %q, exit %d; want refused", bad, out, errOut, code)
		}
	}
	// A missing file: tail says so on stderr, head exits 0 with nothing.
	out, errOut, code := d.runShellIO("tail -c +1 "+path+"x | head -c 4", nil)
	if len(out) != 0 || !strings.Contains(string(errOut), "No such file") || code != 0 {
		t.Errorf("missing file: %q, %q, exit %d", out, errOut, code)
	}
}

// TestShellDashC: sh -c LINE runs LINE as the device's shell does, pipes
// included.
func TestShellDashC(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-sh", API: 31})
	t.Cleanup(d.Close)
	out, errOut, code := d.runShellIO(`sh -c 'echo abcdef | head -c 3; echo x'`, nil)
	if string(out) != "abcx\n" || len(errOut) != 0 || code != 0 {
		t.Errorf("sh -c: %q, %q, exit %d", out, errOut, code)
	}
}

// TestShellLastStatus: $? is the exit status of the command before, bare
// or in "…", and stays literal in '…': what `cmd; echo "rc=$?"` needs on
// the shell: service, which carries no exit status.
func TestShellLastStatus(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-rc", API: 23})
	t.Cleanup(d.Close)
	for line, want := range map[string]string{
		`nosuchcmd; echo "rc=$?"`:   "/system/bin/sh: nosuchcmd: inaccessible or not found\nrc=127\n",
		`echo hi; echo rc=$?`:       "hi\nrc=0\n",
		`echo rc=$?`:                "rc=0\n",
		`nosuchcmd; echo 'rc=$?'`:   "/system/bin/sh: nosuchcmd: inaccessible or not found\nrc=$?\n",
		`pidof none; echo "$?" $?x`: "1 1x\n",
	} {
		out, _ := d.runShell(line)
		if string(out) != want {
			t.Errorf("%s printed %q, want %q", line, out, want)
		}
	}
}
