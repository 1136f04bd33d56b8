package adb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Bounds of what the legacy shell: service may send back (its output has
// no length: it ends when the device closes the stream). MaxShellOutput is
// ten times a busy device's `ps -A` (about 100 KB for 1,000 processes);
// a property value is at most 92 bytes (PROP_VALUE_MAX) before Android 8
// and rarely more than a few hundred after.
const (
	MaxShellOutput = 1 << 20
	maxPropOutput  = 64 << 10
)

// DeviceInfo is what `devices -l` says of a device.
type DeviceInfo struct {
	Serial  string
	Product string
	Model   string
	Device  string
}

// Devices lists the server's devices with their details (host:devices-l).
func (c *Client) Devices(ctx context.Context) ([]DeviceInfo, error) {
	cn, err := c.dial(ctx, false)
	if err != nil {
		return nil, err
	}
	defer cn.Close()
	if err := cn.send("host:devices-l"); err != nil {
		return nil, fmt.Errorf("adb: listing devices: %w", err)
	}
	b, err := cn.readHex("device list")
	if err != nil {
		return nil, err
	}
	return ParseDevicesLong(b)
}

// ParseDevicesLong parses a host:devices-l list. adb writes each line as
//
//	serial  state [usb:1-1] [product:P] [model:M] [device:D] transport_id:N
//
// (the serial padded to 22 columns, the state possibly several words, such
// as "no permissions (…)"). The fields this client keeps are found by
// their key; a line without a state is an error.
func ParseDevicesLong(b []byte) ([]DeviceInfo, error) {
	var out []DeviceInfo
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("%w: device list line %q has no state", ErrProtocol, line)
		}
		d := DeviceInfo{Serial: f[0]}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, ":")
			switch k {
			case "product":
				d.Product = v
			case "model":
				d.Model = v
			case "device":
				d.Device = v
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// Shell runs argv on a device through the shell: service and returns its
// output (standard output and error together), at most MaxShellOutput
// bytes: more is ErrOutputTooLarge. Every element of argv is quoted with
// Quote, so the device's shell sees exactly these words and nothing in
// them can start another command. The context bounds the whole call; when
// it ends, the read stops and the connection is closed.
func (c *Client) Shell(ctx context.Context, serial string, argv ...string) (string, error) {
	return c.shell(ctx, serial, MaxShellOutput, argv)
}

// Prop reads one system property of a device.
func (c *Client) Prop(ctx context.Context, serial, name string) (string, error) {
	out, err := c.shell(ctx, serial, maxPropOutput, []string{"getprop", name})
	return strings.TrimSpace(out), err
}

func (c *Client) shell(ctx context.Context, serial string, limit int, argv []string) (string, error) {
	if len(argv) == 0 {
		return "", fmt.Errorf("adb: %s: shell: no command", serial)
	}
	return c.shellLine(ctx, serial, limit, ShellCommand(argv...))
}

// shellLine runs a command line through the shell: service and returns
// its output, at most limit bytes.
func (c *Client) shellLine(ctx context.Context, serial string, limit int, cmd string) (string, error) {
	cn, err := c.transport(ctx, serial, false)
	if err != nil {
		return "", fmt.Errorf("adb: %s: shell %s: %w", serial, cmd, err)
	}
	defer cn.Close()
	if err := cn.send("shell:" + cmd); err != nil {
		return "", fmt.Errorf("adb: %s: shell %s: %w", serial, cmd, err)
	}
	out, err := readUntilEOF(cn, limit)
	if errors.Is(err, ErrOutputTooLarge) {
		return "", fmt.Errorf("adb: %s: shell %s: %w (%d bytes)", serial, cmd, err, limit)
	}
	if err != nil {
		return "", cn.fail("adb: %s: shell %s: reading the output", err, serial, cmd)
	}
	return string(out), nil
}

// readUntilEOF reads r to its end into a buffer that grows as bytes
// arrive; more than limit bytes is ErrOutputTooLarge.
func readUntilEOF(r io.Reader, limit int) ([]byte, error) {
	b, err := readMore(nil, r, limit+1, limit+1)
	switch {
	case len(b) > limit:
		return nil, ErrOutputTooLarge
	case errors.Is(err, io.EOF):
		return b, nil
	}
	return b, err
}

// readExactly reads n bytes of r into a buffer that grows as they arrive,
// so that a declared length makes nothing larger than what came.
func readExactly(r io.Reader, n int) ([]byte, error) {
	b, err := readMore(nil, r, n, n)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return b, err
}

// readMore appends n bytes of r to b, growing b as they arrive (doubling,
// from 4 KiB) but never past a capacity of limit. It returns when all n
// have come, or with the first error.
func readMore(b []byte, r io.Reader, n, limit int) ([]byte, error) {
	end := len(b) + n
	for len(b) < end {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(max(2*cap(b), 4<<10), limit))
			copy(nb, b)
			b = nb
		}
		k, err := r.Read(b[len(b):min(cap(b), end)])
		b = b[:len(b)+k]
		if err != nil && len(b) < end {
			return b, err
		}
	}
	return b, nil
}
