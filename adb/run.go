package adb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// FeatureShell2 is the adbd feature of shell protocol v2 (Android 7.0 and
// later). adbd before 7.0 has no feature list and knows only shell:; it
// closes the stream of any other shell service at once
// (docs/heapdumps.md, "What each Android version does").
const FeatureShell2 = "shell_v2"

// ErrNeedsShell2: standard input for a command, on a device whose adbd
// has no shell protocol v2 (shell: cannot end a command's input).
var ErrNeedsShell2 = errors.New("adb: standard input needs shell protocol v2 (Android 7.0 and later)")

// Features returns the features that both the adb server and the device
// support (host-serial:SERIAL:features): empty for a device before
// Android 7.0.
func (c *Client) Features(ctx context.Context, serial string) ([]string, error) {
	cn, err := c.dial(ctx, false)
	if err != nil {
		return nil, err
	}
	defer cn.Close()
	req := "host-serial:" + serial + ":features"
	if err := cn.send(req); err != nil {
		return nil, fmt.Errorf("adb: %s: features: %w", serial, err)
	}
	b, err := cn.readHex("feature list")
	if err != nil {
		return nil, fmt.Errorf("adb: %s: features: %w", serial, err)
	}
	var out []string
	for _, f := range strings.Split(strings.TrimSpace(string(b)), ",") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out, nil
}

// Run runs argv on a device by what its feature list offers: with Exec
// (shell protocol v2) when it lists shell_v2, else through the shell:
// service with ExecV1. It never tries v2 to find out. stdin is refused
// (ErrNeedsShell2) where v2 is missing.
func (c *Client) Run(ctx context.Context, serial string, stdin []byte, argv ...string) (stdout, stderr []byte, code int, err error) {
	feats, err := c.Features(ctx, serial)
	if err != nil {
		return nil, nil, 0, err
	}
	if slices.Contains(feats, FeatureShell2) {
		return c.Exec(ctx, serial, stdin, argv...)
	}
	if stdin != nil {
		return nil, nil, 0, fmt.Errorf("adb: %s: %s: %w", serial, ShellCommand(argv...), ErrNeedsShell2)
	}
	out, code, err := c.ExecV1(ctx, serial, argv...)
	return out, nil, code, err
}

// rcMarker starts the line ExecV1 appends to a command's output: the
// marker and the command's exit status.
const rcMarker = "alloctrack-rc="

// ExecV1 runs argv through the shell: service (shell protocol v1, every
// Android version) and recovers what v1 does not carry: the exit status,
// from `; echo alloctrack-rc=$?` appended to the command and read back
// from the end of the output. The output is standard output and error in
// one stream, at most MaxShellOutput bytes; "\r\n" (the pty of adbd
// before Android 7.0 ends every line so) comes back as "\n". Output that
// ends before the status line (the stream broke) is an ErrProtocol.
func (c *Client) ExecV1(ctx context.Context, serial string, argv ...string) (out []byte, code int, err error) {
	if len(argv) == 0 {
		return nil, 0, fmt.Errorf("adb: %s: shell: no command", serial)
	}
	cmd := ShellCommand(argv...)
	s, err := c.shellLine(ctx, serial, MaxShellOutput, cmd+"; echo "+rcMarker+"$?")
	if err != nil {
		return nil, 0, err
	}
	out, code, err = splitStatus([]byte(s))
	if err != nil {
		return nil, 0, fmt.Errorf("adb: %s: shell %s: %w", serial, cmd, err)
	}
	return out, code, nil
}

// splitStatus takes the status line ExecV1 asked for off the end of b:
// what comes before it is the command's output ("\r\n" made "\n").
func splitStatus(b []byte) ([]byte, int, error) {
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	i := bytes.LastIndex(b, []byte(rcMarker))
	if i < 0 {
		return nil, 0, fmt.Errorf("%w: the output ends without the exit status (%q)", ErrProtocol, truncate(string(b[max(0, len(b)-80):]), 80))
	}
	status := strings.TrimSuffix(string(b[i+len(rcMarker):]), "\n")
	code, err := strconv.Atoi(status)
	if err != nil || code < 0 || code > 255 {
		return nil, 0, fmt.Errorf("%w: exit status %q is not a number of 0 to 255", ErrProtocol, truncate(status, 20))
	}
	return b[:i], code, nil
}
