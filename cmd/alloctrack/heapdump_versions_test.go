package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// TestHeapdumpEveryVersion takes dumps through Debian's adb server from
// simulated Android 4.4, 5.0, 6.0, 7.1, 9, 11, 13 and 15 devices (issue
// 35's list), each with its version's shell, features, dump layout and
// am's texts. Before 7.0 adbd has no shell protocol v2 and closes
// shell,v2 at once: am dumpheap and rm go through shell: (the exit status
// echoed after them), and no shell,v2 was tried (the device's shell ran
// the echo); from 7.0 they go through shell v2 (no echo). On every
// version the leaks and the groups of duplicate Strings are the
// simulator's truth, the summary says on 7.x that app leaves out the app
// image's Strings, nothing is left on the device, and a pid am dumpheap
// does not know fails with am's own text.
func TestHeapdumpEveryVersion(t *testing.T) {
	for _, api := range []int{19, 21, 23, 25, 28, 30, 33, 35} {
		t.Run(fmt.Sprint(api), func(t *testing.T) {
			f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{api}, Workload: quietCaptureWorkload(), SerialPrefix: fmt.Sprintf("old%d", api)})
			addr, serials := serveRealADB(t, f)
			d := f.Devices()[0]
			vm := d.VMs()[0]
			vm.Allocate(100_000)
			dir := filepath.Join(t.TempDir(), "dump")
			_, errOut, code := runCmd(t, "heapdump", "--adb.address", addr, "--serial", serials[d.Serial()], "--package", vm.ProcessName(), "--out", dir)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			_, truth := vm.HeapDump()
			b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
			if err != nil {
				t.Fatal(err)
			}
			var sum offline.HeapSummary
			if err := json.Unmarshal(b, &sum); err != nil {
				t.Fatal(err)
			}
			var acts []uint64
			for _, l := range sum.Leaks {
				if l.Kind == "activity" {
					acts = append(acts, l.ID)
				}
			}
			slices.Sort(acts)
			if !slices.Equal(acts, truth.LeakedActivities) || sum.API != api || sum.DumpBytes == 0 {
				t.Errorf("summary %+v; leaked Activities %x, truth %x", sum.CaptureMeta, acts, truth.LeakedActivities)
			}
			if seven := api == 24 || api == 25; sum.AppImage != seven {
				t.Errorf("app_image_in_image_heap %v on API %d: the summary must say that app leaves out the 7.x app image's Strings", sum.AppImage, api)
			}
			if sum.DuplicateStringGroups != len(truth.DuplicateStrings) {
				t.Errorf("%d groups of duplicate Strings, the truth has %d: %v", sum.DuplicateStringGroups, len(truth.DuplicateStrings), truth.DuplicateStrings)
			}
			if left := d.Files("/data/local/tmp"); len(left) > 0 {
				t.Errorf("left on the device: %v", left)
			}
			var ran []string
			for _, argv := range d.ShellLog() {
				ran = append(ran, strings.Join(argv, " "))
			}
			for _, want := range []string{"am dumpheap", "rm -f /data/local/tmp/alloctrack-", "echo alloctrack-rc=0"} {
				ranIt := slices.ContainsFunc(ran, func(s string) bool { return strings.HasPrefix(s, want) })
				if v1 := strings.HasPrefix(want, "echo"); !ranIt && (!v1 || api < 24) {
					t.Errorf("the shell ran no %q: %q", want, ran)
				} else if ranIt && v1 && api >= 24 {
					t.Errorf("API %d has shell v2, yet the shell ran %q: %q", api, want, ran)
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound)
			defer cancel()
			dst, err := os.CreateTemp(t.TempDir(), "x")
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			dev := adbDumpDevice{adb.NewClient(addr), serials[d.Serial()]}
			remote := "/data/local/tmp/alloctrack-unknown.hprof"
			_, err = offline.TakeHeapDump(ctx, dev, offline.DumpRequest{PID: 99999, API: api, Remote: remote}, dst)
			if err == nil || !strings.Contains(err.Error(), "Unknown process: 99999") {
				t.Errorf("dump of an unknown pid: %v, want am's Unknown process", err)
			}
			if left := d.Files("/data/local/tmp"); len(left) > 0 {
				t.Errorf("left on the device after a failed dump: %v", left)
			}
		})
	}
}
