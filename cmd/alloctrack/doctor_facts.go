package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/doctor"
)

// parseGetprop reads getprop's "[name]: [value]" lines.
func parseGetprop(out string) map[string]string {
	p := map[string]string{}
	for _, l := range strings.Split(strings.ReplaceAll(out, "\r", ""), "\n") {
		k, v, ok := strings.Cut(l, "]: [")
		if ok && strings.HasPrefix(k, "[") && strings.HasSuffix(v, "]") {
			p[k[1:]] = v[:len(v)-1]
		}
	}
	return p
}

// deviceFacts asks a device what it is: its properties (one getprop),
// SELinux mode, adbd features and perfetto's version (Android 12+: 11's
// perfetto has no --version, docs/doctor.md).
func deviceFacts(ctx context.Context, client *adb.Client, info adb.DeviceInfo) doctor.Device {
	d := doctor.Device{Serial: info.Serial, Model: info.Model}
	out, err := client.Shell(ctx, info.Serial, "getprop")
	if err != nil {
		d.Error = fmt.Sprintf("getprop: %v", err)
		return d
	}
	p := parseGetprop(out)
	d.API, _ = strconv.Atoi(p["ro.build.version.sdk"])
	if d.API <= 0 {
		d.Error = fmt.Sprintf("getprop gave no API level (ro.build.version.sdk %q)", p["ro.build.version.sdk"])
		return d
	}
	if m := p["ro.product.model"]; m != "" {
		d.Model = m
	}
	d.Release, d.Build, d.Debuggable = p["ro.build.version.release"], p["ro.build.type"], p["ro.debuggable"]
	d.Traced, d.Heapprofd, d.JDWPProp = p["init.svc.traced"], p["init.svc.heapprofd"], p[doctorJDWPProp]
	if se, err := client.Shell(ctx, info.Serial, "getenforce"); err == nil {
		d.SELinux = strings.TrimSpace(se)
	}
	if f, err := client.Features(ctx, info.Serial); err == nil {
		// The adb server lists them in an order of its own: sorted, two
		// runs (or a run and its replay) print the same line.
		d.Features = slices.Sorted(slices.Values(f))
	}
	if d.API >= doctor.APIHeapprofd {
		if o, _, code, err := client.Run(ctx, info.Serial, nil, "perfetto", "--version"); err == nil && code == 0 {
			d.Perfetto, _, _ = strings.Cut(strings.TrimSpace(string(o)), "\n")
		}
	}
	return d
}

// doctorJDWPProp gives non-debuggable apps JDWP from Android 14
// (docs/heapdumps.md fact 5).
const doctorJDWPProp = "persist.debug.dalvik.vm.jdwp.enabled"

// appList is what a device says of its apps: the JDWP list, track-app's
// list (Android 12+; nil when not asked or failed) and the process list.
type appList struct {
	jdwp     []int
	trackApp map[int]adb.AppProcess
	procs    []adb.Process
}

func listApps(ctx context.Context, client *adb.Client, d doctor.Device) (appList, error) {
	var l appList
	pids, msg := jdwpList(ctx, client, d.Serial)
	if msg != "" {
		return l, errors.New(msg)
	}
	l.jdwp = pids
	if d.API >= 31 {
		tctx, cancel := context.WithCancel(ctx)
		var got []adb.AppProcess
		seen := false
		client.TrackApp(tctx, d.Serial, func(p []adb.AppProcess) { got, seen = p, true; cancel() })
		cancel()
		if seen {
			l.trackApp = map[int]adb.AppProcess{}
			for _, p := range got {
				l.trackApp[p.PID] = p
			}
		}
	}
	procs, err := client.Processes(ctx, d.Serial, d.API)
	if err != nil {
		return l, fmt.Errorf("listing processes: %w", err)
	}
	l.procs = procs
	return l, nil
}

// appsOfInterest are the processes of pkgs, or, with none, every
// process in the JDWP list or track-app's, by pid. A package that is not
// running is one App with pid 0.
func (l appList) appsOfInterest(pkgs []string) []doctor.App {
	var apps []doctor.App
	running := map[string]bool{}
	for _, p := range l.procs {
		_, listed := l.trackApp[p.PID]
		if slices.Contains(pkgs, p.Name) || len(pkgs) == 0 && (slices.Contains(l.jdwp, p.PID) || listed) {
			apps = append(apps, doctor.App{Package: p.Name, PID: p.PID})
			running[p.Name] = true
		}
	}
	slices.SortFunc(apps, func(a, b doctor.App) int { return a.PID - b.PID })
	for _, p := range pkgs {
		if !running[p] {
			apps = append(apps, doctor.App{Package: p})
		}
	}
	return apps
}

// appFacts fills in what the device says of app a: track-app's flags
// (Android 12+), else what run-as says.
func (l appList) appFacts(ctx context.Context, client *adb.Client, d doctor.Device, a *doctor.App) {
	if a.PID == 0 {
		return
	}
	a.InJDWP = slices.Contains(l.jdwp, a.PID)
	var ta *doctor.TrackApp
	ra := doctor.RunAsNotAsked
	if l.trackApp != nil {
		p, ok := l.trackApp[a.PID]
		ta = &doctor.TrackApp{Listed: ok, Debuggable: p.Debuggable, Profileable: p.Profileable}
	} else {
		ra = runAs(ctx, client, d.Serial, a.Package)
	}
	a.Kind, a.KindSource = doctor.Kind(d, a.InJDWP, ta, ra)
}

// runAs asks run-as to run true as pkg: it does so only for a debuggable
// package, and says "not debuggable" otherwise (docs/doctor.md).
func runAs(ctx context.Context, client *adb.Client, serial, pkg string) doctor.RunAs {
	out, errOut, code, err := client.Run(ctx, serial, nil, "run-as", pkg, "true")
	switch {
	case err != nil:
		return doctor.RunAsNotAsked
	case code == 0:
		return doctor.RunAsDebuggable
	case strings.Contains(string(out)+string(errOut), "not debuggable"):
		return doctor.RunAsNotDebuggable
	}
	return doctor.RunAsNotAsked
}

// heldCheck opens JDWP to an app in the JDWP list, says hello and leaves
// before anything is tracked: a VM that leaves the handshake unanswered
// (Android 9+) or closes it is held by another debugger
// (docs/ddm-devices.md). It also reports, where the VM answers REAQ
// (up to Android 11), whether its tracker is on.
func heldCheck(ctx context.Context, client *adb.Client, d doctor.Device, pid int, cfg ddm.Config) (held, trackerOn bool, err error) {
	s := &ddm.Session{
		Serial: d.Serial, PID: pid, API: d.API,
		Open:          func(ctx context.Context) (io.ReadWriteCloser, error) { return client.OpenJDWP(ctx, d.Serial, pid) },
		Accept:        func(string) bool { return false },
		CheckFiltered: d.API < doctor.APIHeapprofd,
		Config:        cfg,
	}
	err = s.Run(ctx)
	var fe *ddm.FilteredError
	switch {
	case errors.As(err, &fe):
		return false, fe.TrackingOn, nil
	case errors.Is(err, alloctrack.ErrHeld):
		return true, false, nil
	case errors.Is(err, alloctrack.ErrWaiting):
		return false, false, nil
	case err == nil:
		return false, false, ctx.Err()
	}
	return false, false, err
}
