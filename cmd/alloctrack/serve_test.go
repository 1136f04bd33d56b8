package main

import (
	"strings"
	"testing"
)

// Bad flags of serve and sim are refused before anything starts, with a
// message that names the flag.
func TestServeAndSimUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--window", "0s"}, "--window"},
		{[]string{"serve", "--window", "1s", "--window.min", "2s"}, "--window.min"},
		{[]string{"serve", "--top.classes", "0"}, "--top.classes"},
		{[]string{"serve", "--reports.per-device", "0"}, "--reports.per-device"},
		{[]string{"serve", "--serial", "("}, "--serial"},
		{[]string{"serve", "--package.exclude", "[a"}, "--package"},
		{[]string{"serve", "--log.level", "loud"}, "log.level"},
		{[]string{"serve", "--simulate", "--simulate.devices", "0"}, "--simulate.devices"},
		{[]string{"sim"}, "--listen"},
		{[]string{"sim", "--adb-server", "127.0.0.1:0", "--skew", "1"}, "--skew"},
		{[]string{"sim", "--adb-server", "127.0.0.1:0", "--api", "0"}, "--api"},
		{[]string{"sim", "--listen", "nonsense"}, "--listen"},
	} {
		_, errOut, code := runCmd(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d naming %s", c.args, code, errOut, exitUsage, c.want)
		}
	}
}
