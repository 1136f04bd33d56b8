package sim

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/ddms"
)

// The facts am dumpheap follows (docs/heapdumps.md has their sources):
//   - usage am dumpheap [--user U] [-n] [-g] [-m] PROCESS FILE; -g (a GC
//     first) from Android 8.1 (API 27), -b FORMAT (every Bitmap's pixels,
//     compressed, in Bitmap.dumpData) from Android 15 (API 35); -b takes
//     whatever argument follows, and the app only logs a warning for a
//     format it does not know (png, jpg, jpeg, webp) and dumps without
//     pixels (fact 10);
//   - the shell opens FILE (so it must be writable by shell: under
//     /data/local/tmp), from Android 8 before system_server looks the
//     process up, so a refused dump leaves an empty file (fact 11);
//   - the app must be debuggable or the build ro.debuggable=1 (fact 4,
//     debuggable.go);
//   - before Android 10 (API 29) am returns once the request is made and
//     the app writes the file afterwards, emptying it when the dump fails;
//     from Android 10 am prints "File: FILE" and "Waiting for dump to
//     finish..." and returns only when the app says it is done, which
//     never happens when it died (fact 12);
//   - errors as each version prints them (amException, fact 11).
const (
	apiDumpheapGC      = 27
	apiDumpheapWait    = 29
	apiDumpheapBitmaps = 35 // -b FORMAT: Bitmaps' pixels in the dump (Android 15)
	// From Android 8 am is a shell command of system_server
	// (ShellCommand.exec); from 11 BasicShellCommandHandler.exec, which
	// names the command; from 14 a refused process is named by its
	// package, not its ProcessRecord.
	apiAmShellCommand  = 26
	apiAmNamesCommand  = 30
	apiAmNamesPackage  = 34
	apiDumpheapCreates = 26 // the shell creates FILE before the process is looked up
)

// dumpDelay is how long the simulated app takes to write its dump after
// am returned (before Android 10): half the file first, the rest after.
const dumpDelay = 300 * time.Millisecond

// DumpPause is how long an app with the DumpPauses fault stops half-way
// through writing its dump.
const DumpPause = 2 * time.Second

// DumpFault is how an app's next heap dumps (am dumpheap) go wrong
// (fact 12); Faults.HeapDump sets it.
type DumpFault int

const (
	DumpFine DumpFault = iota
	// DumpFails: ART cannot finish the file and empties it (File::Erase):
	// 0 bytes are left. From Android 10 am still returns.
	DumpFails
	// DumpDies: the app dies half-way: the file stops growing, the app
	// leaves the process list, and from Android 10 am never returns.
	DumpDies
	// DumpBlocked: the app's main thread, which runs the dump, is blocked
	// until the fault is cleared: the file stays empty, and from Android
	// 10 am waits.
	DumpBlocked
	// DumpPauses: the app stops half-way for DumpPause, then finishes.
	DumpPauses
)

// dumpheapArgs are am dumpheap's operands.
type dumpheapArgs struct{ proc, file, bitmaps string }

func (d *Device) amCommand(argv []string) (out, errOut []byte, code int) {
	if len(argv) < 2 || argv[1] != "dumpheap" {
		return nil, []byte("sim: am: only am dumpheap\n"), 1
	}
	a, bad, code := parseDumpheap(argv[2:], d.cfg.API)
	if bad != "" {
		return nil, []byte(bad), code
	}
	if !strings.HasPrefix(a.file, "/data/local/tmp/") {
		return nil, unableToOpen(a.file, d.cfg.API), amStatusFailed(d.cfg.API)
	}
	if d.cfg.API >= apiDumpheapCreates {
		d.PutFile(a.file, nil)
	}
	var vm *VM
	for _, v := range d.VMs() {
		if v.Alive() && (strconv.Itoa(v.PID()) == a.proc || v.ProcessName() == a.proc) {
			vm = v
		}
	}
	if vm == nil {
		return d.amException("java.lang.IllegalArgumentException", "Unknown process: "+a.proc)
	}
	if !d.mayDumpHeap(vm) {
		return d.amException("java.lang.SecurityException", "Process not debuggable: "+d.processDesc(vm))
	}
	return d.runDump(vm, a)
}

// unableToOpen is what am says of a FILE it cannot open: the hint came
// with Android 7.0's openForSystemServer (docs/heapdumps.md).
func unableToOpen(file string, api int) []byte {
	if api < apiShellV2 {
		return []byte("Error: Unable to open file: " + file + "\n")
	}
	return []byte("Error: Unable to open file: " + file + "\nConsider using a file under /data/local/tmp/\n")
}

// amStatusFailed is am's exit status when it gives up on a command by
// returning: up to 7.1 Am.java's run method returns and am exits 0; from
// 8.0 the shell command returns -1, status 255 (docs/heapdumps.md).
func amStatusFailed(api int) int {
	if api < apiAmShellCommand {
		return 0
	}
	return 255
}

// parseDumpheap reads am dumpheap's options and operands; a refusal comes
// as its text and exit status.
func parseDumpheap(argv []string, api int) (a dumpheapArgs, bad string, code int) {
	var ops []string
	for i := 0; i < len(argv); i++ {
		switch o := argv[i]; {
		case o == "--user":
			i++
		case o == "-b" && api >= apiDumpheapBitmaps:
			i++
			// -b takes whatever follows; the app checks it (fact 10).
			if i == len(argv) {
				return a, "Error: -b needs a format: png, jpg or webp\n", 255
			}
			a.bitmaps = argv[i]
		case o == "-n" || o == "-m":
			return a, "sim: am dumpheap: native dumps are not simulated\n", 1
		case o == "-g" && api >= apiDumpheapGC:
		case strings.HasPrefix(o, "-"):
			return a, "Error: Unknown option: " + o + "\n", 255
		default:
			ops = append(ops, o)
		}
	}
	if len(ops) != 2 {
		return a, "Error: am dumpheap needs PROCESS and FILE\n", 255
	}
	a.proc, a.file = ops[0], ops[1]
	return a, "", 0
}

// processDesc is how system_server names a process in an exception:
// ProcessRecord's toString up to Android 13 ({hash pid:name/uid}), the
// package from Android 14.
func (d *Device) processDesc(vm *VM) string {
	if d.cfg.API >= apiAmNamesPackage {
		return vm.cfg.Package
	}
	return fmt.Sprintf("ProcessRecord{%07x %d:%s/u0a%d}", uint32(vm.PID())*2654435761>>4, vm.PID(), vm.ProcessName(), 100+vm.PID()%900)
}

// amUsage stands for the usage text am prints before an argument error
// up to Android 7.1 (the real one runs to a few hundred lines).
const amUsage = "usage: am [subcommand] [options]\nusage: am start [-D] [-W] [-P <FILE>] [--start-profiler <FILE>] <INTENT>\n       am dumpheap [--user <USER_ID> current] [-n] <PROCESS> <FILE>\n"

// amException is what am prints, and its exit status, when
// system_server throws exc with msg (fact 11): up to Android 7.1 am
// (BaseCommand.run) prints the usage and "Error: msg" for an
// IllegalArgumentException and exits 0, and the stack trace of any other
// exception and exits 1; from Android 8 the shell command prints
// "Security exception: msg" or "Exception occurred while executing:"
// ("... executing 'dumpheap':" from 11) and the stack trace, and exits
// 255. The frames are abbreviated.
func (d *Device) amException(exc, msg string) ([]byte, []byte, int) {
	api := d.cfg.API
	server := exc + ": " + msg + "\n\tat com.android.server.am.ActivityManagerService.dumpHeap(ActivityManagerService.java)\n" +
		"\tat com.android.server.am.ActivityManagerShellCommand.runDumpHeap(ActivityManagerShellCommand.java)\n"
	switch {
	case api >= apiAmNamesCommand:
		return nil, []byte("\nException occurred while executing 'dumpheap':\n" + server), 255
	case api >= apiAmShellCommand && exc == "java.lang.SecurityException":
		return nil, []byte("Security exception: " + msg + "\n\n" + server), 255
	case api >= apiAmShellCommand:
		return nil, []byte("\nException occurred while executing:\n" + server), 255
	case exc == "java.lang.IllegalArgumentException":
		return nil, []byte(amUsage + "\nError: " + msg + "\n"), 0
	}
	return nil, []byte(exc + ": " + msg + "\n\tat android.os.Parcel.readException(Parcel.java)\n" +
		"\tat android.app.ActivityManagerProxy.dumpHeap(ActivityManagerNative.java)\n\tat com.android.commands.am.Am.runDumpHeap(Am.java)\n"), 1
}

// runDump has vm write its dump to a.file as the device's version does,
// with the VM's dump fault.
func (d *Device) runDump(vm *VM, a dumpheapArgs) ([]byte, []byte, int) {
	d.PutFile(a.file, nil) // the shell opens (creates) it
	take := func() []byte {
		if a.bitmaps != "" && !bitmapFormats[a.bitmaps] {
			// Bitmap.dumpAll only warns, and the dump goes on without
			// pixels.
			d.Log(LogEntry{PID: vm.PID(), Priority: 'W', Tag: "Bitmap", Msg: "No bitmaps dumped: unrecognized format " + a.bitmaps})
			a.bitmaps = ""
		}
		if a.bitmaps != "" {
			dump, _ := vm.HeapDumpBitmaps(a.bitmaps)
			return dump
		}
		dump, _ := vm.HeapDump()
		return dump
	}
	if d.cfg.API < apiDumpheapWait {
		go d.writeDump(vm, a.file, take, vm.Faults().HeapDump)
		return nil, nil, 0
	}
	waiting := []byte("File: " + a.file + "\nWaiting for dump to finish...\n")
	switch vm.Faults().HeapDump {
	case DumpFails: // the callback comes all the same
		return waiting, nil, 0
	case DumpDies, DumpBlocked:
		// No callback; on real devices am waits for ever, here until the
		// device stops, or the main thread is free again.
		if !d.writeDump(vm, a.file, take, vm.Faults().HeapDump) {
			<-d.stopped
			return waiting, nil, 0
		}
	default:
		d.writeDump(vm, a.file, take, vm.Faults().HeapDump)
	}
	return waiting, nil, 0
}

// writeDump writes vm's dump to file as the app does, half first, with
// fault; false when the dump was never finished (the app died, or stayed
// blocked until it was killed or the device stopped).
func (d *Device) writeDump(vm *VM, file string, take func() []byte, fault DumpFault) bool {
	if fault == DumpBlocked && !d.waitUnblocked(vm) {
		return false
	}
	dump := take()
	time.Sleep(dumpDelay / 3)
	d.writeOpened(file, dump[:len(dump)/2])
	switch fault {
	case DumpFails:
		time.Sleep(dumpDelay / 3)
		d.writeOpened(file, nil)
		return true
	case DumpDies:
		vm.Kill()
		d.RemoveVM(vm.PID())
		return false
	case DumpPauses:
		time.Sleep(DumpPause)
	}
	time.Sleep(dumpDelay * 2 / 3)
	d.writeOpened(file, dump)
	return true
}

// writeOpened writes b as the contents of the file the app holds open:
// once the file was removed (rm), the app's writes go nowhere.
func (d *Device) writeOpened(file string, b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.files[file]; ok {
		d.files[file] = slices.Clone(b)
	}
}

// waitUnblocked waits while vm's main thread is blocked (the DumpBlocked
// fault): true once it is free, false if the app is killed or the device
// stops first.
func (d *Device) waitUnblocked(vm *VM) bool {
	for vm.Faults().HeapDump == DumpBlocked {
		select {
		case <-vm.killed:
			return false
		case <-d.stopped:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// apiNoDDMHeapDump is the first API level whose framework no longer
// registers HPDU and HPDS (android/ddm/DdmHandleHeap.java registers only
// HPGC from Android 12); an unregistered chunk gets no reply at all
// (adbconnection).
const apiNoDDMHeapDump = 31

// serveHeapDump answers DDM's heap dump chunks as DdmHandleHeap does up to
// Android 11: HPDU makes the app write its dump to the file the request
// names (it must be a path the app may write: under /sdcard/ or its own
// /data/data/PACKAGE/) and answers one byte, 0 or 0xFF; HPDS sends the
// dump back as an HPDS chunk in a command packet of the VM's own, and
// answers nothing when it succeeds.
func (vm *VM) serveHeapDump(c net.Conn, id uint32, ch ddms.Chunk) bool {
	if vm.cfg.API >= apiNoDDMHeapDump {
		return true
	}
	if ch.Type == ddms.HPDS {
		dump, _ := vm.HeapDump()
		return vm.writeChunk(c, vm.nextPacketID(), false, ddms.HPDS, dump) == nil
	}
	path, err := ddms.DecodeHeapDumpFile(ch.Data)
	vm.mu.Lock()
	write := vm.fileWriter
	vm.mu.Unlock()
	ok := err == nil && (strings.HasPrefix(path, "/sdcard/") || strings.HasPrefix(path, "/data/data/"+vm.cfg.Package+"/"))
	if !ok || write == nil {
		return vm.writeChunk(c, id, true, ddms.HPDU, []byte{ddms.HeapDumpFailed}) == nil
	}
	dump, _ := vm.HeapDump()
	write(path, dump)
	return vm.writeChunk(c, id, true, ddms.HPDU, []byte{ddms.HeapDumpOK}) == nil
}
