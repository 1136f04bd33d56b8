package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/adb/transcript"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// TestDoctorReplay: doctor --record on a live simulated device writes a
// transcript; served back by a replay device through another real adb
// server, doctor prints the same table (the serial aside), with its live
// checks, and the replay met no request it does not hold and
// left none unasked but polls and trace reads. A request the
// transcript does not hold gets an error naming it. Run on an Android 11
// device (the DDM live check) and an Android 13 one (the heapprofd check,
// whose trace reads and polls depend on when they come: the replay answers
// them by rule, sim/replay_files.go; docs/doctor.md). There the replay's
// check runs 6 s, the recorded one 2 s (--check.length): its reads come at
// offsets the recording never asked, and it polls perfetto more often
// before the kill than the recording did in all.
func TestDoctorReplay(t *testing.T) {
	for _, api := range []int{30, 33} {
		t.Run(strconv.Itoa(api), func(t *testing.T) {
			f := newCaptureFarm(t, sim.FarmConfig{Devices: 1, AppsPerDevice: 1, APIs: []int{api}, SerialPrefix: "rec", Workload: quietCaptureWorkload()})
			addr, serials := serveRealADB(t, f)
			live := serials[f.Devices()[0].Serial()]
			rec := filepath.Join(t.TempDir(), "doctor.transcript")
			args := []string{"doctor", "--package", "com.example.app1"}
			replayArgs := slices.Clone(args)
			if api >= 31 {
				// The app allocates nothing: the check runs its length.
				args = append(args, "--check.length", "2s")
				replayArgs = append(replayArgs, "--check.length", "6s")
			}
			want, errOut, code := runCmd(t, append(args, "--adb.address", addr, "--record", rec)...)
			if code != exitOK {
				t.Fatalf("doctor on the live device: exit %d: %s\n%s", code, errOut, want)
			}
			srv, rp, replayed := serveDoctorReplay(t, rec)
			got, errOut, code := runCmd(t, append(replayArgs, "--adb.address", srv.Addr())...)
			if code != exitOK {
				t.Fatalf("doctor on the replay: exit %d: %s\n%s", code, errOut, got)
			}
			if errs := rp.Errors(); len(errs) > 0 {
				t.Errorf("the replay met requests it does not hold: %v", errs)
			}
			if left := rp.Unreplayed(); len(left) > 0 {
				t.Errorf("doctor on the replay did not ask for %q", left)
			}
			if norm := timings(strings.ReplaceAll(got, replayed, live)); norm != timings(want) {
				t.Errorf("doctor on the replay printed\\n%s\\non the live device\\n%s", got, want)
			}
			_, _, _, err := adb.NewClient(srv.Addr()).Exec(testwait.Context(t), replayed, nil, "echo", "unheard")
			var ue *sim.UnknownServiceError
			if errs := rp.Errors(); err != nil || len(errs) != 1 || !errors.As(errs[0], &ue) || !strings.Contains(ue.Service, "echo unheard") {
				t.Errorf("a request not in the transcript: %v, replay errors %v", err, errs)
			}
		})
	}
}

// timings blanks what doctor measured in time (round trips, a check's
// length): a replay answers as fast as it is asked, not as the device did.
func timings(s string) string {
	return timingRe.ReplaceAllString(s, "${1}T${2}")
}

var timingRe = regexp.MustCompile(`(round trip |\()[0-9.]+( ms| s\))`)

// serveDoctorReplay serves the transcript in file as a device of a new
// real adb server; it returns the server, the replay and its serial.
func serveDoctorReplay(t *testing.T, file string) (*adbtest.Server, *sim.Replay, string) {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	tr, err := transcript.Read(fh)
	if err != nil {
		t.Fatalf("reading doctor's transcript: %v", err)
	}
	rp := sim.NewReplay(tr)
	a := rp.Adbd()
	addr, err := a.Listen("127.0.0.1:" + strconv.Itoa(adbtest.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		rp.Close()
	})
	rp.SetSerial(addr.String())
	srv := adbtest.StartServer(t)
	srv.Connect(t, addr.String())
	return srv, rp, addr.String()
}
