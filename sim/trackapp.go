package sim

import (
	"bytes"
	"fmt"
	"net"

	"google.golang.org/protobuf/encoding/protowire"
)

// APITrackApp is the first API level whose adbd offers track-app
// (Android 12). Before it the service is unknown, and refused as every
// unknown service is (docs/track-app.md).
const APITrackApp = 31

// APITrackAppDetails is the first API level whose adbd adds each
// process's user, name, packages, uid and whether it waits for a debugger
// to track-app (Android 15; docs/track-app.md).
const APITrackAppDetails = 35

// Limits on one track-app list (docs/track-app.md). adbd builds an update
// in a 2048-byte buffer, 4 of which are the hex length, and leaves out
// the processes that do not fit. The first list goes into a buffer of the
// connection's maximum payload, but its length has only 4 hex digits.
const (
	trackAppUpdateMax = 2048 - 4
	trackAppFirstMax  = 0xffff
)

// trackAppArch is the instruction set the simulated VMs report: the one
// their DDM HELO names.
const trackAppArch = "x86_64"

// appProcesses encodes the processes that are debuggable or profileable
// as an AppProcesses message, as Android 12's adbd does: by pid here (adbd
// keeps the order in which processes registered), every process whole,
// the list cut before the first one that would take it past max bytes.
//
//	AppProcesses := { 0x0a len ProcessEntry }
//	ProcessEntry := 0x08 varint pid      always
//	                0x10 0x01            debuggable, only when true
//	                0x18 0x01            profileable, only when true
//	                0x22 len "x86_64"    architecture
//
// A debuggable app is listed as profileable too, as in the sample output
// of the change that added track-app (docs/track-app.md).
func (d *Device) appProcesses(max int) []byte {
	var out, e []byte
	for _, vm := range d.VMs() {
		debuggable := !vm.cfg.NotDebuggable
		profileable := debuggable || vm.cfg.Profileable
		if !profileable {
			continue
		}
		e = protowire.AppendTag(e[:0], 1, protowire.VarintType)
		e = protowire.AppendVarint(e, uint64(vm.PID()))
		if debuggable {
			e = protowire.AppendTag(e, 2, protowire.VarintType)
			e = protowire.AppendVarint(e, 1)
		}
		e = protowire.AppendTag(e, 3, protowire.VarintType)
		e = protowire.AppendVarint(e, 1)
		e = protowire.AppendTag(e, 4, protowire.BytesType)
		e = protowire.AppendString(e, trackAppArch)
		if d.cfg.API >= APITrackAppDetails {
			// user_id 5, process_name 6, package_names 7,
			// waiting_for_debugger 8, uid 9.
			uid := uint64(vm.Config().UserID)
			e = protowire.AppendTag(e, 5, protowire.VarintType)
			e = protowire.AppendVarint(e, uid/100000)
			e = protowire.AppendTag(e, 6, protowire.BytesType)
			e = protowire.AppendString(e, vm.AppName())
			e = protowire.AppendTag(e, 7, protowire.BytesType)
			e = protowire.AppendString(e, vm.ProcessName())
			if vm.Config().WaitingForDebugger {
				e = protowire.AppendTag(e, 8, protowire.VarintType)
				e = protowire.AppendVarint(e, 1)
			}
			e = protowire.AppendTag(e, 9, protowire.VarintType)
			e = protowire.AppendVarint(e, uid)
		}
		n := len(out)
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, e)
		if len(out) > max {
			return out[:n]
		}
	}
	return out
}

// serveTrackApp writes the list of debuggable or profileable processes
// now and whenever it changes, each framed as 4 hex digits of length and
// a binary AppProcesses message. A write from the client, or its close,
// ends the service.
func (d *Device) serveTrackApp(c net.Conn) {
	ch, gone, stop := d.follow(c)
	defer stop()
	var last []byte
	for first, max := true, trackAppFirstMax; ; first, max = false, trackAppUpdateMax {
		list := d.appProcesses(max)
		if first || !bytes.Equal(list, last) {
			msg := fmt.Appendf(make([]byte, 0, 4+len(list)), "%04x", len(list))
			if _, err := c.Write(append(msg, list...)); err != nil {
				return
			}
			last = list
		}
		select {
		case <-ch:
		case <-gone:
			return
		}
	}
}
