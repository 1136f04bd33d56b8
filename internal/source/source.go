// Package source adapts the adb client to the daemon's Source interface,
// so that neither package needs to know the other.
package source

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
)

// ADB is an adb server as a daemon Source.
type ADB struct {
	*adb.Client
}

var _ supervisor.Source = ADB{}

// New returns the Source for the adb server at addr.
func New(addr string) ADB { return ADB{adb.NewClient(addr)} }

// TrackDevices follows the server's device list.
func (a ADB) TrackDevices(ctx context.Context, fn func([]supervisor.DeviceState)) error {
	return a.Client.TrackDevices(ctx, func(list []adb.DeviceState) {
		out := make([]supervisor.DeviceState, len(list))
		for i, d := range list {
			out[i] = supervisor.DeviceState{Serial: d.Serial, State: d.State}
		}
		fn(out)
	})
}

// OpenJDWP opens jdwp:<pid>; a stream the device refused also matches
// alloctrack.ErrRefused.
func (a ADB) OpenJDWP(ctx context.Context, serial string, pid int) (net.Conn, error) {
	c, err := a.Client.OpenJDWP(ctx, serial, pid)
	if errors.Is(err, adb.ErrServiceClosed) {
		return nil, fmt.Errorf("%w: %w", alloctrack.ErrRefused, err)
	}
	return c, err
}

// Processes lists a device's processes.
func (a ADB) Processes(ctx context.Context, serial string, api int) ([]supervisor.Process, error) {
	list, err := a.Client.Processes(ctx, serial, api)
	if err != nil {
		return nil, err
	}
	out := make([]supervisor.Process, len(list))
	for i, p := range list {
		out[i] = supervisor.Process{PID: p.PID, Name: p.Name}
	}
	return out, nil
}

// TrackApp follows the device's debuggable or profileable processes; a
// device without track-app also matches alloctrack.ErrTrackAppUnsupported.
func (a ADB) TrackApp(ctx context.Context, serial string, fn func([]supervisor.AppProcess)) error {
	err := a.Client.TrackApp(ctx, serial, func(list []adb.AppProcess) {
		out := make([]supervisor.AppProcess, len(list))
		for i, p := range list {
			out[i] = supervisor.AppProcess{PID: p.PID, Debuggable: p.Debuggable, Profileable: p.Profileable, Name: p.ProcessName, WaitingForDebugger: p.WaitingForDebugger}
		}
		fn(out)
	})
	if errors.Is(err, adb.ErrTrackAppUnsupported) {
		return fmt.Errorf("%w: %w", alloctrack.ErrTrackAppUnsupported, err)
	}
	return err
}
