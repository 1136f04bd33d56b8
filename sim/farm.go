package sim

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// FarmConfig describes a set of simulated devices and apps.
type FarmConfig struct {
	Devices       int    // number of devices (default 1)
	AppsPerDevice int    // apps per device (default 2)
	SerialPrefix  string // serials are prefix-1, prefix-2, … (default "sim")
	// APIs are the devices' API levels, used in turn (default [30]).
	APIs     []int
	Workload Workload // every app's workload; the seed is varied per app
	BasePID  int      // first pid (default 10000)
	Depth    int      // recorded stack depth of every app (default 16)
	// Device, if set, adjusts the configuration of device i (from 0)
	// before it is made.
	Device func(i int, c *DeviceConfig)
}

// Farm is a set of simulated devices with their apps, served to a real
// adb server (one adbd endpoint per device) or through a HostServer.
type Farm struct {
	cfg FarmConfig

	mu      sync.Mutex
	devices []*Device
	dead    map[string][]*VM // killed VMs by serial, for ground truth
	nextPID int
	host    *HostServer
	adbds   map[string]*Adbd
}

// NewFarm creates the devices and apps of cfg; nothing is served yet.
func NewFarm(cfg FarmConfig) *Farm {
	if cfg.Devices <= 0 {
		cfg.Devices = 1
	}
	if cfg.AppsPerDevice < 0 {
		cfg.AppsPerDevice = 0
	}
	if cfg.SerialPrefix == "" {
		cfg.SerialPrefix = "sim"
	}
	if len(cfg.APIs) == 0 {
		cfg.APIs = []int{30}
	}
	if cfg.BasePID <= 0 {
		cfg.BasePID = 10000
	}
	f := &Farm{cfg: cfg, nextPID: cfg.BasePID, dead: map[string][]*VM{}, adbds: map[string]*Adbd{}}
	for i := range cfg.Devices {
		api := cfg.APIs[i%len(cfg.APIs)]
		dc := DeviceConfig{
			Serial:  fmt.Sprintf("%s-%d", cfg.SerialPrefix, i+1),
			Product: fmt.Sprintf("sim_api%d", api),
			Model:   fmt.Sprintf("Simulated_API_%d", api),
			Device:  "simulated",
			API:     api,
		}
		if cfg.Device != nil {
			cfg.Device(i, &dc)
		}
		d := NewDevice(dc)
		f.devices = append(f.devices, d)
		for j := range cfg.AppsPerDevice {
			w := cfg.Workload
			w.Seed = w.Seed*1000 + uint64(i*100+j+1)
			f.AddApp(d.Serial(), AppConfig{Package: fmt.Sprintf("com.example.app%d", j+1), Depth: cfg.Depth, Workload: w})
		}
	}
	return f
}

// RecentRecords is how many of the newest records a report of a VM at
// api holds, given the device's properties, when ART 7 to 9 honour
// dalvik.vm.allocTrackerMax (the records kept) and dalvik.vm.recentAllocMax
// (those reported, at most the former), read in
// AllocRecordObjectMap::SetProperties (art runtime/gc/allocation_record.cc);
// 0 (the VM's own default) otherwise.
func RecentRecords(api int, props map[string]string) int {
	const def = 65535
	if api < 24 || api > 28 {
		return 0
	}
	allocMax, recent := 0, def
	if v, err := strconv.Atoi(props["dalvik.vm.allocTrackerMax"]); err == nil && v > 0 {
		allocMax = v
		recent = min(recent, v)
	}
	if v, err := strconv.Atoi(props["dalvik.vm.recentAllocMax"]); err == nil && v > 0 && (allocMax == 0 || v <= allocMax) {
		recent = v
	}
	if recent >= def {
		return 0
	}
	return recent
}

// ErrNoDevice is returned for an unknown serial.
var ErrNoDevice = errors.New("sim: no such device")

// ErrNoApp is returned for an unknown pid.
var ErrNoApp = errors.New("sim: no such app")

// Devices returns the farm's devices.
func (f *Farm) Devices() []*Device {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.devices)
}

// Device returns the device with serial, or nil.
func (f *Farm) Device(serial string) *Device {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.devices {
		if d.Serial() == serial {
			return d
		}
	}
	return nil
}

// AddApp starts an app on a device; a zero PID gets the next free one.
func (f *Farm) AddApp(serial string, cfg AppConfig) (*VM, error) {
	d := f.Device(serial)
	if d == nil {
		return nil, fmt.Errorf("%w: %q", ErrNoDevice, serial)
	}
	f.mu.Lock()
	if cfg.PID == 0 {
		cfg.PID = f.nextPID
		f.nextPID += 7
	}
	f.mu.Unlock()
	if d.VM(cfg.PID) != nil {
		return nil, fmt.Errorf("sim: pid %d already runs on %s", cfg.PID, serial)
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = RecentRecords(d.Config().API, d.Props()) // 0: the VM's own default
	}
	vm := NewVM(cfg, d.Config().API)
	d.AddVM(vm)
	return vm, nil
}

// KillApp ends an app's process.
func (f *Farm) KillApp(serial string, pid int) error {
	d := f.Device(serial)
	if d == nil {
		return fmt.Errorf("%w: %q", ErrNoDevice, serial)
	}
	vm := d.VM(pid)
	if vm == nil {
		return fmt.Errorf("%w: pid %d on %s", ErrNoApp, pid, serial)
	}
	vm.Kill()
	d.RemoveVM(pid)
	f.mu.Lock()
	f.dead[serial] = append(f.dead[serial], vm)
	f.mu.Unlock()
	return nil
}

// RestartApp kills an app and starts it again with a new pid, the same
// package and workload.
func (f *Farm) RestartApp(serial string, pid int) (*VM, error) {
	d := f.Device(serial)
	if d == nil {
		return nil, fmt.Errorf("%w: %q", ErrNoDevice, serial)
	}
	vm := d.VM(pid)
	if vm == nil {
		return nil, fmt.Errorf("%w: pid %d on %s", ErrNoApp, pid, serial)
	}
	cfg := vm.Config()
	if err := f.KillApp(serial, pid); err != nil {
		return nil, err
	}
	cfg.PID = 0
	return f.AddApp(serial, cfg)
}

// VMs returns every VM a device has run, alive or dead, with package pkg
// ("" for all).
func (f *Farm) VMs(serial, pkg string) []*VM {
	d := f.Device(serial)
	if d == nil {
		return nil
	}
	f.mu.Lock()
	all := append(slices.Clone(f.dead[serial]), d.VMs()...)
	f.mu.Unlock()
	out := all[:0]
	for _, vm := range all {
		if pkg == "" || vm.ProcessName() == pkg {
			out = append(out, vm)
		}
	}
	return out
}

// Truth sums the ground truth of every process of package pkg that ran on
// a device: allocated while tracked, and reported in whole reports.
func (f *Farm) Truth(serial, pkg string) (allocated, reported Counts) {
	allocated, reported = newCounts(), newCounts()
	for _, vm := range f.VMs(serial, pkg) {
		merge(&allocated, vm.TotalTracked())
		merge(&reported, vm.TotalReported())
	}
	return allocated, reported
}

// InDoubt lists the reports of the package's processes on the device that
// the transport may have lost (see VM.InDoubt).
func (f *Farm) InDoubt(serial, pkg string) []alloctrack.Count {
	var out []alloctrack.Count
	for _, vm := range f.VMs(serial, pkg) {
		out = append(out, vm.InDoubt()...)
	}
	return out
}

func merge(dst *Counts, src Counts) {
	dst.Total.Allocations += src.Total.Allocations
	dst.Total.Bytes += src.Total.Bytes
	for k, v := range src.ByClass {
		addCount(dst.ByClass, k, v)
	}
	for k, v := range src.BySite {
		addCount(dst.BySite, k, v)
	}
	for k, v := range src.BySiteID {
		addCount(dst.BySiteID, k, v)
	}
}

// ServeHost serves every device through a HostServer (a stand-in adb
// server) listening on addr.
func (f *Farm) ServeHost(addr string) (net.Addr, error) {
	f.mu.Lock()
	if f.host != nil {
		f.mu.Unlock()
		return nil, errors.New("sim: the farm already has a host server")
	}
	h := NewHostServer()
	f.host = h
	devices := slices.Clone(f.devices)
	f.mu.Unlock()
	for _, d := range devices {
		h.AddDevice(d)
	}
	return h.Listen(addr)
}

// ServeAdbd serves each device over the adbd wire protocol, device i on
// port basePort+i of host (basePort 0: any free ports). Ports 5555–5585,
// which the adb server probes for emulators, are refused.
func (f *Farm) ServeAdbd(host string, basePort int) ([]net.Addr, error) {
	var addrs []net.Addr
	for i, d := range f.Devices() {
		port := 0
		if basePort > 0 {
			port = basePort + i
			if port >= 5555 && port <= 5585 {
				return addrs, fmt.Errorf("sim: port %d is in 5555-5585, which adb probes for emulators", port)
			}
		}
		a := NewAdbd(d)
		addr, err := a.Listen(net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return addrs, fmt.Errorf("sim: serving %s: %w", d.Serial(), err)
		}
		f.mu.Lock()
		f.adbds[d.Serial()] = a
		f.mu.Unlock()
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// Disconnect takes a device away, as a pulled cable does: its streams
// close and its adb server no longer lists it.
func (f *Farm) Disconnect(serial string) error {
	d := f.Device(serial)
	if d == nil {
		return fmt.Errorf("%w: %q", ErrNoDevice, serial)
	}
	f.mu.Lock()
	h, a := f.host, f.adbds[serial]
	f.mu.Unlock()
	if h != nil {
		h.RemoveDevice(serial)
	}
	if a != nil {
		a.SetOnline(false)
		a.Disconnect()
	}
	d.Disconnect()
	return nil
}

// Reconnect brings a disconnected device back. Through a real adb server
// the device returns when the server reconnects (or `adb connect` again).
func (f *Farm) Reconnect(serial string) error {
	d := f.Device(serial)
	if d == nil {
		return fmt.Errorf("%w: %q", ErrNoDevice, serial)
	}
	f.mu.Lock()
	h, a := f.host, f.adbds[serial]
	f.mu.Unlock()
	if h != nil {
		h.AddDevice(d)
	}
	if a != nil {
		a.SetOnline(true)
	}
	return nil
}

// Close stops every server and device.
func (f *Farm) Close() error {
	f.mu.Lock()
	h := f.host
	adbds := f.adbds
	f.host, f.adbds = nil, map[string]*Adbd{}
	devices := slices.Clone(f.devices)
	f.mu.Unlock()
	var errs []error
	if h != nil {
		errs = append(errs, h.Close())
	}
	for _, a := range adbds {
		errs = append(errs, a.Close())
	}
	for _, d := range devices {
		d.Close()
	}
	return errors.Join(errs...)
}
