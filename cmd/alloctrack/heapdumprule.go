package main

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
)

// lookupDumpApp finds the device and the process heapdump dumps, by am
// dumpheap's own rule (docs/heapdumps.md, facts 4 and 5): a debuggable
// app, or any app on a ro.debuggable=1 build. The JDWP list holds the
// debuggable apps, but from Android 14 not every app of a userdebug build,
// so a pid outside it is refused only when the build is not debuggable
// either (a user build). With --package the JDWP list and the VMs' names
// pick among several processes of that name, as capture does.
func lookupDumpApp(ctx context.Context, client *adb.Client, addr, wantSerial, pkg string, wantPID int, cfg ddm.Config, stderr io.Writer) (serial, model string, api, pid, code int, msg string) {
	lookup, lcancel := context.WithTimeout(ctx, 2*cfg.RequestTimeout)
	defer lcancel()
	serial, model, api, code, msg = lookupDevice(lookup, client, addr, wantSerial)
	if code != exitOK {
		return "", "", 0, 0, code, msg
	}
	jdwpPIDs, msg := jdwpList(lookup, client, serial)
	if msg != "" {
		return "", "", 0, 0, exitFailure, msg
	}
	pid = wantPID
	if pid == 0 {
		if pid, code, msg = findDumpApp(ctx, client, serial, pkg, api, jdwpPIDs, cfg, stderr); code != exitOK {
			return "", "", 0, 0, code, msg
		}
	}
	if slices.Contains(jdwpPIDs, pid) {
		return serial, model, api, pid, exitOK, ""
	}
	debuggable, err := client.Prop(lookup, serial, "ro.debuggable")
	if err != nil || debuggable == "1" {
		return serial, model, api, pid, exitOK, "" // am dumpheap decides
	}
	msg = fmt.Sprintf("pid %d on %s is not debuggable (not in the device's JDWP list), and the device's build is not ro.debuggable=1 (a user build): am dumpheap dumps an app only when it is debuggable (android:debuggable) or the build is userdebug or eng", pid, serial)
	if profileableOnly(lookup, client, serial, pid, api) {
		msg += "; this app is profileable only, which lets `alloctrack capture` profile it (heapprofd) but not am dumpheap dump it"
	}
	return "", "", 0, 0, exitFailure, msg
}

// findDumpApp picks the process of app pkg to dump: as capture does when
// some of its processes are in the JDWP list, else its only process.
func findDumpApp(ctx context.Context, client *adb.Client, serial, pkg string, api int, jdwpPIDs []int, cfg ddm.Config, stderr io.Writer) (pid, code int, msg string) {
	sctx, cancel := context.WithTimeout(ctx, 2*cfg.RequestTimeout)
	pids, err := client.PIDsOf(sctx, serial, pkg, api)
	cancel()
	switch {
	case err != nil:
		return 0, exitFailure, fmt.Sprintf("looking up %s on %s: %v", pkg, serial, err)
	case len(pids) == 0:
		return 0, exitFailure, fmt.Sprintf("app %s is not running on %s", pkg, serial)
	case slices.ContainsFunc(pids, func(p int) bool { return slices.Contains(jdwpPIDs, p) }):
		return findApp(ctx, client, serial, pkg, api, jdwpPIDs, cfg, stderr)
	case len(pids) == 1:
		return pids[0], exitOK, ""
	}
	slices.Sort(pids)
	return 0, exitFailure, fmt.Sprintf("app %s runs on %s as pids %s, none of them in the device's JDWP list: choose one with --pid", pkg, serial, joinInts(pids))
}

// profileableOnly reports whether the device's track-app (Android 12 and
// later) lists pid as profileable but not debuggable.
func profileableOnly(ctx context.Context, client *adb.Client, serial string, pid, api int) bool {
	if api < 31 {
		return false
	}
	var found bool
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client.TrackApp(tctx, serial, func(list []adb.AppProcess) {
		for _, p := range list {
			if p.PID == pid {
				found = p.Profileable && !p.Debuggable
			}
		}
		cancel() // the first list is all we need
	})
	return found
}
