package adb

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/electricbubble/gadb"
)

// DeviceInfo is what `devices -l` says of a device.
type DeviceInfo struct {
	Serial  string
	Product string
	Model   string
	Device  string
}

// gadbClient returns a gadb client of the same server.
func (c *Client) gadbClient() (gadb.Client, error) {
	host, port, err := net.SplitHostPort(c.addr)
	if err != nil {
		return gadb.Client{}, fmt.Errorf("adb: server address %q: %w", c.addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return gadb.Client{}, fmt.Errorf("adb: server address %q: bad port", c.addr)
	}
	return gadb.NewClientWith(host, p)
}

// runCtx runs f and returns when it ends or ctx does. gadb has no context;
// its own read timeout bounds a call left running.
func runCtx[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := f()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// gadbError turns gadb's "command failed: <reason>" into a *FailError, so
// callers can branch on the same sentinels as on the smart-socket path.
func gadbError(req string, err error) error {
	if reason, ok := strings.CutPrefix(err.Error(), "command failed: "); ok {
		return &FailError{Request: req, Reason: reason}
	}
	return err
}

// Devices lists the server's devices with their details, through gadb.
func (c *Client) Devices(ctx context.Context) ([]DeviceInfo, error) {
	return runCtx(ctx, func() ([]DeviceInfo, error) {
		gc, err := c.gadbClient()
		if err != nil {
			return nil, err
		}
		devs, err := gc.DeviceList()
		if err != nil {
			return nil, fmt.Errorf("adb: listing devices: %w", gadbError("host:devices-l", err))
		}
		out := make([]DeviceInfo, 0, len(devs))
		for _, d := range devs {
			info := d.DeviceInfo()
			out = append(out, DeviceInfo{Serial: d.Serial(), Product: info["product"], Model: info["model"], Device: info["device"]})
		}
		return out, nil
	})
}

// Shell runs argv on a device through the shell: service and returns its
// output (standard output and error together). Every element of argv is
// quoted with Quote, so the device's shell sees exactly these words and
// nothing in them can start another command.
func (c *Client) Shell(ctx context.Context, serial string, argv ...string) (string, error) {
	if len(argv) == 0 {
		return "", fmt.Errorf("adb: %s: shell: no command", serial)
	}
	cmd := ShellCommand(argv...)
	return runCtx(ctx, func() (string, error) {
		gc, err := c.gadbClient()
		if err != nil {
			return "", err
		}
		devs, err := gc.DeviceList()
		if err != nil {
			return "", fmt.Errorf("adb: listing devices: %w", gadbError("host:devices-l", err))
		}
		for _, d := range devs {
			if d.Serial() == serial {
				// One string, no args: gadb would join args unquoted.
				out, err := d.RunShellCommand(cmd)
				if err != nil {
					return "", fmt.Errorf("adb: %s: shell %s: %w", serial, cmd, gadbError("shell:"+cmd, err))
				}
				return out, nil
			}
		}
		return "", fmt.Errorf("adb: %s: %w", serial, ErrDeviceNotFound)
	})
}

// Prop reads one system property of a device.
func (c *Client) Prop(ctx context.Context, serial, name string) (string, error) {
	out, err := c.Shell(ctx, serial, "getprop", name)
	return strings.TrimSpace(out), err
}
