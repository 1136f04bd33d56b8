package adb_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/sim"
)

// hexed frames s as the adb server frames an answer: 4 hex digits of
// length, then s.
func hexed(s string) string { return fmt.Sprintf("%04x%s", len(s), s) }

// TestRunChoosesByFeatures: a device whose feature list lacks shell_v2
// gets shell: with the exit status asked for at the end ("\r\n" of the
// pty made "\n"), and never a shell,v2 request; one that lists it gets
// shell,v2,raw:.
func TestRunChoosesByFeatures(t *testing.T) {
	s := newFakeServer(t,
		func(p *peer) error {
			if err := p.expect("host-serial:old:features"); err != nil {
				return err
			}
			return p.write("OKAY" + hexed(""))
		},
		func(p *peer) error {
			if err := p.expect("host:transport:old"); err != nil {
				return err
			}
			if err := p.write("OKAY"); err != nil {
				return err
			}
			if err := p.expect("shell:am dumpheap 42 /data/local/tmp/x; echo alloctrack-rc=$?"); err != nil {
				return err
			}
			return p.write("OKAY" + "Error: Unable to open file\r\nalloctrack-rc=1\r\n")
		},
		func(p *peer) error {
			if err := p.expect("host-serial:new:features"); err != nil {
				return err
			}
			return p.write("OKAY" + hexed("cmd,shell_v2,stat_v2"))
		},
		func(p *peer) error {
			if err := p.expect("host:transport:new"); err != nil {
				return err
			}
			if err := p.write("OKAY"); err != nil {
				return err
			}
			if err := p.expect("shell,v2,raw:echo hi"); err != nil {
				return err
			}
			// The client sends close-stdin; the answer does not wait for it.
			return p.write("OKAY" + string(shellPacket(1, []byte("hi\n"))) + string(shellPacket(3, []byte{0})))
		},
	)
	c := adb.NewClient(s.addr())
	out, errOut, code, err := c.Run(ctxT(t), "old", nil, "am", "dumpheap", "42", "/data/local/tmp/x")
	if err != nil || string(out) != "Error: Unable to open file\n" || errOut != nil || code != 1 {
		t.Errorf("Run on a device without shell_v2 = %q, %q, %d, %v", out, errOut, code, err)
	}
	out, _, code, err = c.Run(ctxT(t), "new", nil, "echo", "hi")
	if err != nil || string(out) != "hi\n" || code != 0 {
		t.Errorf("Run on a device with shell_v2 = %q, %d, %v", out, code, err)
	}
	for _, r := range s.requests() {
		if strings.HasPrefix(r, "shell,") && !strings.HasSuffix(r, "echo hi") {
			t.Errorf("tried %q", r)
		}
	}
}

// TestExecV1Status: the status line is taken off the end of what came,
// which keeps output that has no final newline; a stream that ends
// before the status line is an ErrProtocol, as is a status that is no
// number.
func TestExecV1Status(t *testing.T) {
	for _, tc := range []struct {
		answer, out string
		code        int
		bad         bool
	}{
		{"a\r\nb\r\nalloctrack-rc=0\r\n", "a\nb\n", 0, false},
		{"no newlinealloctrack-rc=3\r\n", "no newline", 3, false},
		{"alloctrack-rc=127\n", "", 127, false},
		{"alloctrack-rc=0 in the output\r\nalloctrack-rc=2\r\n", "alloctrack-rc=0 in the output\n", 2, false},
		{"cut off before the stat", "", 0, true},
		{"alloctrack-rc=\r\n", "", 0, true},
		{"alloctrack-rc=999\r\n", "", 0, true},
	} {
		s := newFakeServer(t, func(p *peer) error {
			if err := p.expect("host:transport:d"); err != nil {
				return err
			}
			if err := p.write("OKAY"); err != nil {
				return err
			}
			if _, err := p.request(); err != nil {
				return err
			}
			return p.write("OKAY" + tc.answer)
		})
		out, code, err := adb.NewClient(s.addr()).ExecV1(ctxT(t), "d", "true")
		if tc.bad {
			if !errors.Is(err, adb.ErrProtocol) {
				t.Errorf("%q: %q %d %v, want ErrProtocol", tc.answer, out, code, err)
			}
			continue
		}
		if err != nil || string(out) != tc.out || code != tc.code {
			t.Errorf("%q: %q %d %v, want %q %d", tc.answer, out, code, err, tc.out, tc.code)
		}
	}
}

// TestRunSim runs commands on simulated devices of each shell: 4.4, 5.0
// and 6.0 (no features, shell: on a pty) and 7.0 and 11 (shell_v2): the
// output, the exit status and the errors come back on each, the errors
// in the one stream before 7.0. Standard input is refused where v2 is
// missing, before anything runs.
func TestRunSim(t *testing.T) {
	for _, api := range []int{19, 21, 23, 24, 30} {
		d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-run", API: api})
		_, c := simServer(t, d)
		ctx := ctxT(t)
		out, errOut, code, err := c.Run(ctx, "sim-run", nil, "getprop", "ro.build.version.sdk")
		if err != nil || string(out) != fmt.Sprintf("%d\n", api) || len(errOut) != 0 || code != 0 {
			t.Errorf("API %d: getprop = %q, %q, %d, %v", api, out, errOut, code, err)
		}
		out, errOut, code, err = c.Run(ctx, "sim-run", nil, "nosuchcmd")
		text := string(errOut)
		if api < 24 {
			text = string(out)
		}
		if err != nil || code != 127 || !strings.Contains(text, "nosuchcmd") {
			t.Errorf("API %d: nosuchcmd = %q, %q, %d, %v", api, out, errOut, code, err)
		}
		before := len(d.ShellLog())
		_, _, _, err = c.Run(ctx, "sim-run", []byte("x"), "cat")
		if (api < 24) != errors.Is(err, adb.ErrNeedsShell2) {
			t.Errorf("API %d: stdin: %v", api, err)
		}
		if api < 24 && len(d.ShellLog()) != before {
			t.Errorf("API %d: ran %q", api, d.ShellLog()[before:])
		}
		v1 := slices.ContainsFunc(d.ShellLog(), func(argv []string) bool { return argv[0] == "echo" })
		if v1 != (api < 24) {
			t.Errorf("API %d: shell: used %v: %q", api, v1, d.ShellLog())
		}
	}
}

// TestRunRealADB: through Debian's adb server, whose feature list for a
// device is what both support, an Android 6 device is run through
// shell: and an Android 11 one through shell v2; Prop reads either.
func TestRunRealADB(t *testing.T) {
	srv := adbtest.StartServer(t)
	for _, api := range []int{23, 30} {
		d := sim.NewDevice(sim.DeviceConfig{Serial: "sim-r", API: api})
		serial := attachADB(t, srv, d)
		c := adb.NewClient(srv.Addr())
		feats, err := c.Features(ctxT(t), serial)
		if err != nil || slices.Contains(feats, adb.FeatureShell2) != (api >= 24) {
			t.Errorf("API %d: features %q %v", api, feats, err)
		}
		out, _, code, err := c.Run(ctxT(t), serial, nil, "pidof", "nothing")
		if err != nil || len(out) != 0 || code != 1 {
			t.Errorf("API %d: pidof nothing = %q %d %v, want exit status 1", api, out, code, err)
		}
		out, _, code, err = c.Run(ctxT(t), serial, nil, "echo", "a b", "c")
		if err != nil || string(out) != "a b c\n" || code != 0 {
			t.Errorf("API %d: echo = %q %d %v", api, out, code, err)
		}
		// Prop and Shell take shell: on every version: no status needed.
		if v, err := c.Prop(ctxT(t), serial, "ro.build.version.sdk"); err != nil || v != fmt.Sprint(api) {
			t.Errorf("API %d: Prop = %q %v", api, v, err)
		}
	}
}
