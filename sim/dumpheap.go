package sim

import (
	"fmt"
	"net"
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
//     /data/local/tmp), and system_server hands the descriptor to the app,
//     which must be debuggable (or the build ro.debuggable);
//   - before Android 10 (API 29) am returns once the request is made and
//     the app writes the file afterwards; from Android 10 am prints
//     "File: FILE" and "Waiting for dump to finish..." and returns when
//     the app says it is done;
//   - errors: "Unknown process: X", "Process not debuggable: X".
const (
	apiDumpheapGC      = 27
	apiDumpheapWait    = 29
	apiDumpheapBitmaps = 35 // -b FORMAT: Bitmaps' pixels in the dump (Android 15)
)

// dumpDelay is how long the simulated app takes to write its dump after
// am returned (before Android 10): half the file first, the rest after.
const dumpDelay = 300 * time.Millisecond

func (d *Device) amCommand(argv []string) (out, errOut []byte, code int) {
	if len(argv) < 2 || argv[1] != "dumpheap" {
		return nil, []byte("sim: am: only am dumpheap\n"), 1
	}
	api := d.cfg.API
	fail := func(msg string) ([]byte, []byte, int) {
		if api >= 30 {
			return nil, []byte("Exception occurred while executing 'dumpheap':\njava.lang.IllegalArgumentException: " + msg + "\n"), 255
		}
		return nil, []byte("java.lang.IllegalArgumentException: " + msg + "\n"), 255
	}
	var args []string
	bitmaps := ""
	for i := 2; i < len(argv); i++ {
		switch a := argv[i]; {
		case a == "--user":
			i++
		case a == "-b" && api >= apiDumpheapBitmaps:
			// -b takes whatever follows; the app checks it (fact 10).
			i++
			if i == len(argv) {
				return nil, []byte("Error: -b needs a format: png, jpg or webp\n"), 255
			}
			bitmaps = argv[i]
		case a == "-n" || a == "-m":
			return nil, []byte("sim: am dumpheap: native dumps are not simulated\n"), 1
		case a == "-g" && api >= apiDumpheapGC:
		case strings.HasPrefix(a, "-"):
			return nil, []byte("Error: Unknown option: " + a + "\n"), 255
		default:
			args = append(args, a)
		}
	}
	if len(args) != 2 {
		return nil, []byte("Error: am dumpheap needs PROCESS and FILE\n"), 255
	}
	proc, file := args[0], args[1]
	if !strings.HasPrefix(file, "/data/local/tmp/") {
		return nil, []byte("Error: Unable to open file: " + file + "\nConsider using a file under /data/local/tmp/\n"), 255
	}
	var vm *VM
	for _, v := range d.VMs() {
		if v.Alive() && (strconv.Itoa(v.PID()) == proc || v.ProcessName() == proc) {
			vm = v
		}
	}
	if vm == nil {
		return fail("Unknown process: " + proc)
	}
	if vm.cfg.NotDebuggable && d.Props()["ro.debuggable"] != "1" {
		return nil, []byte(fmt.Sprintf("java.lang.SecurityException: Process not debuggable: ProcessRecord{%d:%s}\n", vm.PID(), vm.ProcessName())), 255
	}
	d.mu.Lock()
	d.files[file] = []byte{} // the shell opens (creates) it
	d.mu.Unlock()
	take := func() []byte {
		if bitmaps != "" && !bitmapFormats[bitmaps] {
			// Bitmap.dumpAll only warns, and the dump goes on without
			// pixels.
			d.Log(LogEntry{PID: vm.PID(), Priority: 'W', Tag: "Bitmap", Msg: "No bitmaps dumped: unrecognized format " + bitmaps})
			bitmaps = ""
		}
		if bitmaps != "" {
			dump, _ := vm.HeapDumpBitmaps(bitmaps)
			return dump
		}
		dump, _ := vm.HeapDump()
		return dump
	}
	if api >= apiDumpheapWait {
		d.PutFile(file, take())
		return []byte("File: " + file + "\nWaiting for dump to finish...\n"), nil, 0
	}
	go func() {
		dump := take()
		time.Sleep(dumpDelay / 3)
		d.PutFile(file, dump[:len(dump)/2])
		time.Sleep(dumpDelay * 2 / 3)
		d.PutFile(file, dump)
	}()
	return nil, nil, 0
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
