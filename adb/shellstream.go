package adb

import (
	"context"
	"fmt"
	"io"
)

// ShellStream runs argv on a device through the shell: service and
// returns its output as a stream, for a command that runs until stopped
// (logcat following the log). Every element of argv is quoted with Quote.
// Nothing is buffered beyond what the caller reads: the caller bounds what
// it keeps. The stream ends when the command exits, the device goes, or
// ctx ends (the connection is closed then); Close stops the command.
// Before Android 7.0 the shell: service runs the command in a PTY: lines
// end in "\r\n" and standard error is mixed in.
// (The daemon's logcat uses it; `alloctrack test` has a fuller stream
// with shell protocol v2 on its branch: one of them should go once both
// are merged.)
func (c *Client) ShellStream(ctx context.Context, serial string, argv ...string) (io.ReadCloser, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("adb: %s: shell: no command", serial)
	}
	cmd := ShellCommand(argv...)
	cn, err := c.transport(ctx, serial, true)
	if err != nil {
		return nil, fmt.Errorf("adb: %s: shell %s: %w", serial, cmd, err)
	}
	if err := cn.send("shell:" + cmd); err != nil {
		cn.Close()
		return nil, fmt.Errorf("adb: %s: shell %s: %w", serial, cmd, err)
	}
	return cn, nil
}
