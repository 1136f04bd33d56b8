package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/google/pprof/profile"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/sim"
)

// A capture backend serves a farm through one kind of adb server and
// returns the server's address and, by farm serial, the serial the server
// gives each device.
type captureBackend struct {
	name  string
	serve func(t *testing.T, f *sim.Farm) (addr string, serials map[string]string)
}

var captureBackends = []captureBackend{
	{"adb", serveRealADB},
	{"simhost", serveSimHost},
}

// serveRealADB serves each device of f over the adbd wire protocol on a
// free loopback port and attaches it to a private, real adb server (skips
// without adb). The server is killed before the farm closes.
func serveRealADB(t *testing.T, f *sim.Farm) (string, map[string]string) {
	t.Helper()
	adbtest.Binary(t)
	addrs, err := f.ServeAdbd("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := adbtest.StartServer(t)
	serials := map[string]string{}
	for i, d := range f.Devices() {
		srv.Connect(t, addrs[i].String())
		serials[d.Serial()] = addrs[i].String()
	}
	return srv.Addr(), serials
}

// serveSimHost serves f through the simulator's own adb server.
func serveSimHost(t *testing.T, f *sim.Farm) (string, map[string]string) {
	t.Helper()
	a, err := f.ServeHost("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serials := map[string]string{}
	for _, d := range f.Devices() {
		serials[d.Serial()] = d.Serial()
	}
	return a.String(), serials
}

// newCaptureFarm builds a farm that is closed when the test ends (after
// any adb server the test starts later, since cleanups run last first).
func newCaptureFarm(t *testing.T, cfg sim.FarmConfig) *sim.Farm {
	t.Helper()
	f := sim.NewFarm(cfg)
	t.Cleanup(func() { f.Close() })
	return f
}

// quietCaptureWorkload allocates only when the test says so.
func quietCaptureWorkload() sim.Workload {
	w := sim.DefaultWorkload()
	w.Rate = 0
	return w
}

func onlyVM(t *testing.T, f *sim.Farm, serial, pkg string) *sim.VM {
	t.Helper()
	for _, vm := range f.Device(serial).VMs() {
		if vm.ProcessName() == pkg {
			return vm
		}
	}
	t.Fatalf("no %s on %s", pkg, serial)
	return nil
}

// captureRun is an in-process run of `alloctrack capture`.
type captureRun struct {
	done           chan struct{}
	stdout, stderr bytes.Buffer // read once done is closed
	code           int
}

// startCapture runs `alloctrack capture args...` in-process.
func startCapture(args ...string) *captureRun {
	c := &captureRun{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.code = run(append([]string{"capture"}, args...), &c.stdout, &c.stderr)
	}()
	return c
}

func (c *captureRun) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	timeout = testwait.AtLeast(timeout)
	select {
	case <-c.done:
	case <-time.After(timeout):
		t.Fatalf("capture still running after %v", timeout)
	}
}

// waitTracking waits until the VM's allocation tracking is on, failing
// the test when the capture ends first (ended closed; say tells why).
func waitTracking(t *testing.T, vm *sim.VM, ended <-chan struct{}, say func() string) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound)
	for !vm.Tracking() {
		select {
		case <-ended:
			t.Fatalf("the capture ended before tracking was on: %s", say())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: tracking not on after %v (trace %q)", vm.PID(), testwait.Bound, vm.Trace())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (c *captureRun) say() string {
	return fmt.Sprintf("exit %d, stderr:\n%s", c.code, c.stderr.String())
}

// driveAllocations makes batches of allocations on vm for d while
// tracking is on, and says how many of them could have been lost.
//
// A session ends each window with REAL, REAE 0, REAE 1 in one burst. An
// allocation the VM tracks after building the REAL reply but before it
// handles the REAE 0 is counted by TotalTracked but is in no report: it
// is lost by design. A batch is made only when every REAL so far has been
// followed by its REAE 0, and it is safe when no REAL arrived until after
// it; a batch raced by a window boundary is counted as possibly lost.
func driveAllocations(vm *sim.VM, d time.Duration, batch int) (made, raced uint64) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		before := vm.Stats()
		if !before.TrackingOn || before.Chunks["REAL"] != before.Disables {
			time.Sleep(time.Millisecond)
			continue
		}
		vm.Allocate(batch)
		made += uint64(batch)
		if after := vm.Stats(); after.Chunks["REAL"] != before.Chunks["REAL"] {
			raced += uint64(batch)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return made, raced
}

// captureFiles is what a capture directory holds, checked.
type captureFiles struct {
	allocs  int // <n>.alloc files
	counts  sim.Counts
	summary offline.Summary
	profile *profile.Profile
}

var allocName = regexp.MustCompile(`^([1-9][0-9]*)\.alloc$`)

// checkCaptureDir checks that dir holds only whole files: 1.alloc … n.alloc
// that each parse, summary.json and profile.pb.gz, and no temporary file.
// The summary's and the profile's totals must equal the files'.
func checkCaptureDir(t *testing.T, dir string) *captureFiles {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	cf := &captureFiles{counts: sim.Counts{ByClass: map[string]alloctrack.Count{}, BySite: map[string]alloctrack.Count{}}}
	var nums []int
	var haveSummary, haveProfile bool
	for _, e := range ents {
		switch name := e.Name(); {
		case name == "summary.json":
			haveSummary = true
		case name == "profile.pb.gz":
			haveProfile = true
		case allocName.MatchString(name):
			n, _ := strconv.Atoi(allocName.FindStringSubmatch(name)[1])
			nums = append(nums, n)
		default:
			t.Errorf("%s: unexpected file %q (a temporary file left behind?)", dir, name)
		}
	}
	if !haveSummary || !haveProfile {
		t.Fatalf("%s: summary.json %v, profile.pb.gz %v: want both", dir, haveSummary, haveProfile)
	}
	slices.Sort(nums)
	for i, n := range nums {
		if n != i+1 {
			t.Fatalf("%s: report files %v are not numbered 1…%d", dir, nums, len(nums))
		}
	}
	cf.allocs = len(nums)
	for _, n := range nums {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(n)+".alloc"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := allocreport.Parse(b)
		if err != nil {
			t.Fatalf("%d.alloc does not parse: %v", n, err)
		}
		addReportCounts(&cf.counts, r)
	}

	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cf.summary); err != nil {
		t.Fatalf("summary.json: %v\n%s", err, b)
	}
	s := &cf.summary
	if s.Windows != cf.allocs || s.ParseErrors != 0 {
		t.Errorf("summary.json: %d windows, %d parse errors; the directory holds %d reports", s.Windows, s.ParseErrors, cf.allocs)
	}
	if s.Allocations != cf.counts.Total.Allocations || s.Bytes != cf.counts.Total.Bytes {
		t.Errorf("summary.json totals %d allocations, %d bytes; the files hold %+v", s.Allocations, s.Bytes, cf.counts.Total)
	}
	if s.DurationSeconds <= 0 || !s.End.After(s.Start) {
		t.Errorf("summary.json: start %v, end %v, duration %v", s.Start, s.End, s.DurationSeconds)
	}
	for _, c := range s.TopClasses {
		if got := (alloctrack.Count{Allocations: c.Allocations, Bytes: c.Bytes}); got != cf.counts.ByClass[c.Class] {
			t.Errorf("summary.json: class %s %+v; the files hold %+v", c.Class, got, cf.counts.ByClass[c.Class])
		}
	}
	for _, site := range s.TopSites {
		k := sim.SiteKey(site.Class, site.Frames)
		if got := (alloctrack.Count{Allocations: site.Allocations, Bytes: site.Bytes}); got != cf.counts.BySite[k] {
			t.Errorf("summary.json: site %q %+v; the files hold %+v", k, got, cf.counts.BySite[k])
		}
	}
	if cf.counts.Total.Allocations > 0 && (len(s.TopClasses) == 0 || len(s.TopSites) == 0) {
		t.Errorf("summary.json lists no top classes or sites")
	}

	f, err := os.Open(filepath.Join(dir, "profile.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("profile.pb.gz: %v", err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatalf("profile.pb.gz: %v", err)
	}
	var objs, space int64
	for _, smp := range p.Sample {
		objs += smp.Value[0]
		space += smp.Value[1]
	}
	if uint64(objs) != cf.counts.Total.Allocations || uint64(space) != cf.counts.Total.Bytes {
		t.Errorf("profile.pb.gz: %d objects, %d bytes; the files hold %+v", objs, space, cf.counts.Total)
	}
	cf.profile = p
	return cf
}

// addReportCounts counts r per class and per site, sites named as the
// simulator's ground truth names them.
func addReportCounts(c *sim.Counts, r *allocreport.Report) {
	for i := range r.Allocations {
		a := &r.Allocations[i]
		n := alloctrack.Count{Allocations: 1, Bytes: uint64(a.Size)}
		var frames []string
		for _, f := range r.Stack(a).All() {
			frames = append(frames, r.FrameString(f))
		}
		addTo(c.ByClass, r.ClassName(a), n)
		addTo(c.BySite, sim.SiteKey(r.ClassName(a), frames), n)
		c.Total.Allocations += n.Allocations
		c.Total.Bytes += n.Bytes
	}
}

func addTo(m map[string]alloctrack.Count, k string, n alloctrack.Count) {
	v := m[k]
	v.Allocations += n.Allocations
	v.Bytes += n.Bytes
	m[k] = v
}

// sameCounts reports every class and site whose counts differ.
func sameCounts(t *testing.T, what string, got, want sim.Counts) {
	t.Helper()
	if got.Total != want.Total {
		t.Errorf("%s: total %+v, want %+v", what, got.Total, want.Total)
	}
	for _, m := range []struct {
		kind      string
		got, want map[string]alloctrack.Count
	}{{"class", got.ByClass, want.ByClass}, {"site", got.BySite, want.BySite}} {
		bad := 0
		for k, w := range m.want {
			if g := m.got[k]; g != w && bad < 5 {
				bad++
				t.Errorf("%s: %s %q: %+v, want %+v", what, m.kind, k, g, w)
			}
		}
		for k, g := range m.got {
			if _, ok := m.want[k]; !ok && bad < 5 {
				bad++
				t.Errorf("%s: %s %q: %+v, want none", what, m.kind, k, g)
			}
		}
	}
}

// TestCaptureEndToEnd records an app the test makes allocate, through a
// real adb server and through the simulated one: every window's file
// parses, the files together hold exactly what the VM reported (and what
// it allocated while tracked, but for batches a window boundary raced),
// summary.json and profile.pb.gz agree with them, and tracking is off
// afterwards.
func TestCaptureEndToEnd(t *testing.T) {
	for _, be := range captureBackends {
		t.Run(be.name, func(t *testing.T) {
			f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, Workload: quietCaptureWorkload()})
			addr, serials := be.serve(t, f)
			const pkg = "com.example.app1"
			serial := serials["sim-1"]
			vm := onlyVM(t, f, "sim-1", pkg)
			dir := filepath.Join(t.TempDir(), "capture")

			res := startCapture("--adb.address", addr, "--serial", serial, "--package", pkg,
				"--duration", "2s", "--window", "500ms", "--window.min", "250ms", "--out", dir)
			waitTracking(t, vm, res.done, res.say)
			// Allocate over the first second only: the windows after it
			// are empty, so the capture's end cannot cut into a batch.
			made, raced := driveAllocations(vm, time.Second, 40)
			res.wait(t, 10*time.Second)
			if res.code != exitOK {
				t.Fatalf("%s", res.say())
			}
			if vm.Tracking() {
				t.Error("tracking still on after the capture")
			}
			if st := vm.Stats(); st.NonDDM != 0 {
				t.Errorf("the capture sent %d non-DDM JDWP commands", st.NonDDM)
			}

			cf := checkCaptureDir(t, dir)
			if cf.allocs < 3 {
				t.Errorf("%d windows in 2 s of 500 ms windows, want at least 3", cf.allocs)
			}
			reported, tracked := vm.TotalReported(), vm.TotalTracked()
			sameCounts(t, "files vs VM reported", cf.counts, reported)
			_, farmReported := f.Truth("sim-1", pkg)
			sameCounts(t, "files vs farm truth", cf.counts, farmReported)
			if raced == 0 {
				sameCounts(t, "files vs VM tracked", cf.counts, tracked)
			} else if lost := tracked.Total.Allocations - reported.Total.Allocations; lost > raced {
				t.Errorf("%d tracked allocations in no report; only %d were made while a window ended", lost, raced)
			}
			if cf.counts.Total.Allocations == 0 || cf.counts.Total.Allocations > made {
				t.Errorf("the files hold %d allocations; the test made %d", cf.counts.Total.Allocations, made)
			}
			t.Logf("%d windows, %d allocations made, %d raced a window boundary, %d in the files", cf.allocs, made, raced, cf.counts.Total.Allocations)

			s := cf.summary
			if s.Package != pkg || s.Serial != serial || s.API != 30 || s.PID != vm.PID() || s.Interrupted || s.Error != "" {
				t.Errorf("summary.json: %+v", s.CaptureMeta)
				t.Errorf("summary.json: interrupted %v, error %q", s.Interrupted, s.Error)
			}
			want := fmt.Sprintf("%s: %d windows (0 overflowed), %d allocations, %d bytes in ", dir, cf.allocs, s.Allocations, s.Bytes)
			if !strings.HasPrefix(res.stdout.String(), want) {
				t.Errorf("stdout %q, want it to start %q", res.stdout.String(), want)
			}
			// in does what report and diff read: the directory as a whole.
			in, err := offline.ReadInput(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(in.Reports) != cf.allocs || in.Duration <= 0 {
				t.Errorf("ReadInput: %d reports, duration %v", len(in.Reports), in.Duration)
			}
		})
	}
}

// TestCaptureShortWindow: a --window shorter than the default --window.min
// (1 s), with --window.min left out, should just work: the user set no
// minimum, and the session itself clamps MinWindow to Window
// (SessionConfig.fill). The other tests pass --window.min because of it.
func TestCaptureShortWindow(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, Workload: quietCaptureWorkload()})
	addr, _ := serveSimHost(t, f)
	vm := onlyVM(t, f, "sim-1", "com.example.app1")
	dir := filepath.Join(t.TempDir(), "capture")
	res := startCapture("--adb.address", addr, "--serial", "sim-1", "--package", "com.example.app1",
		"--duration", "1s", "--window", "500ms", "--out", dir)
	res.wait(t, 10*time.Second)
	if res.code == exitUsage && strings.Contains(res.stderr.String(), "--window.min") {
		t.Fatalf("regression: capture --window 500ms without --window.min is a usage error (the default --window.min 1s is larger): %s", strings.TrimSpace(res.stderr.String()))
	}
	if res.code != exitOK {
		t.Fatalf("%s", res.say())
	}
	if vm.Tracking() {
		t.Error("tracking still on after the capture")
	}
	if cf := checkCaptureDir(t, dir); cf.allocs < 2 {
		t.Errorf("%d windows in 1 s of 500 ms windows", cf.allocs)
	}
}

// TestCaptureByPID records an app named by its pid: summary.json names
// the app by the name its VM gave.
func TestCaptureByPID(t *testing.T) {
	f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, Workload: quietCaptureWorkload()})
	addr, _ := serveSimHost(t, f)
	vm := onlyVM(t, f, "sim-1", "com.example.app1")
	dir := filepath.Join(t.TempDir(), "capture")
	res := startCapture("--adb.address", addr, "--pid", strconv.Itoa(vm.PID()),
		"--duration", "1s", "--window", "500ms", "--window.min", "250ms", "--out", dir)
	waitTracking(t, vm, res.done, res.say)
	driveAllocations(vm, 300*time.Millisecond, 20)
	res.wait(t, 10*time.Second)
	if res.code != exitOK {
		t.Fatalf("%s", res.say())
	}
	if vm.Tracking() {
		t.Error("tracking still on after the capture")
	}
	cf := checkCaptureDir(t, dir)
	sameCounts(t, "files vs VM reported", cf.counts, vm.TotalReported())
	if cf.summary.PID != vm.PID() || cf.summary.Serial != "sim-1" {
		t.Errorf("summary.json: %+v", cf.summary.CaptureMeta)
	}
	if cf.summary.Package != "com.example.app1" {
		t.Fatalf("regression: summary.json of a --pid capture has package %q, want %q: Bind sets meta.Package after NewCaptureWriter copied meta (cmd/alloctrack/capture.go)",
			cf.summary.Package, "com.example.app1")
	}
}

// buildAlloctrack builds the command into a directory of the test.
func buildAlloctrack(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "alloctrack")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestCaptureInterrupted stops a long capture with SIGINT, as Ctrl-C does:
// it exits 0, turns tracking off, and leaves only whole files whose counts
// are what the VM reported, with "interrupted" in summary.json.
func TestCaptureInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := buildAlloctrack(t)
	for _, be := range captureBackends {
		t.Run(be.name, func(t *testing.T) {
			w := sim.DefaultWorkload()
			w.Rate = 300
			f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, Workload: w})
			addr, serials := be.serve(t, f)
			const pkg = "com.example.app1"
			vm := onlyVM(t, f, "sim-1", pkg)
			dir := filepath.Join(t.TempDir(), "capture")

			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, "capture", "--adb.address", addr, "--serial", serials["sim-1"], "--package", pkg,
				"--duration", "1m", "--window", "500ms", "--window.min", "250ms", "--out", dir)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			done2 := make(chan struct{})
			go func() { done <- cmd.Wait(); close(done2) }()
			killed := false
			t.Cleanup(func() {
				if !killed {
					cmd.Process.Kill()
					<-done
				}
			})
			waitTracking(t, vm, done2, func() string { return stderr.String() })
			testwait.Until(t, 50*time.Millisecond, "two windows written", func() (bool, string) {
				ents, _ := os.ReadDir(dir)
				n := 0
				for _, e := range ents {
					if allocName.MatchString(e.Name()) {
						n++
					}
				}
				return n >= 2, fmt.Sprintf("%d files", n)
			})
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-done:
				killed = true
			case <-time.After(testwait.Bound):
				cmd.Process.Kill()
				<-done
				killed = true
				t.Fatalf("capture still running %v after SIGINT; stderr:\n%s", testwait.Bound, stderr.String())
			}
			if err != nil {
				t.Fatalf("capture: %v; stderr:\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "interrupted") {
				t.Errorf("stderr does not say it was interrupted:\n%s", stderr.String())
			}
			if vm.Tracking() {
				t.Error("tracking still on after the interrupted capture")
			}
			cf := checkCaptureDir(t, dir)
			if !cf.summary.Interrupted {
				t.Error(`summary.json lacks "interrupted": true`)
			}
			if cf.allocs < 2 || cf.counts.Total.Allocations == 0 {
				t.Errorf("%d windows, %d allocations at 300/s", cf.allocs, cf.counts.Total.Allocations)
			}
			// The app allocates on its own clock here, so some allocations
			// fall between a REAL and its REAE 0; what was reported is exact.
			sameCounts(t, "files vs VM reported", cf.counts, vm.TotalReported())
			b, _ := os.ReadFile(filepath.Join(dir, "summary.json"))
			if !bytes.Contains(b, []byte(`"interrupted": true`)) {
				t.Errorf("summary.json:\n%s", b)
			}
		})
	}
}

// TestCaptureErrors: each failure exits with its status and says what is
// wrong, and no app is left tracking.
func TestCaptureErrors(t *testing.T) {
	for _, be := range captureBackends {
		t.Run(be.name, func(t *testing.T) {
			// sim-1 runs Android 11, sim-2 Android 12 without perfetto.
			f := newCaptureFarm(t, sim.FarmConfig{Devices: 2, APIs: []int{30, 31}, AppsPerDevice: 1, Workload: quietCaptureWorkload(),
				Device: func(i int, c *sim.DeviceConfig) { c.NoPerfetto = i == 1 }})
			held, err := f.AddApp("sim-1", sim.AppConfig{Package: "com.example.held", Workload: quietCaptureWorkload()})
			if err != nil {
				t.Fatal(err)
			}
			held.SetFaults(sim.Faults{DebuggerAttached: true})
			addr, serials := be.serve(t, f)
			s1, s2 := serials["sim-1"], serials["sim-2"]
			app1 := onlyVM(t, f, "sim-1", "com.example.app1")

			heldDir := filepath.Join(t.TempDir(), "held")
			full := t.TempDir()
			os.WriteFile(filepath.Join(full, "summary.json"), []byte("{}\n"), 0o644)
			allocs := t.TempDir()
			os.WriteFile(filepath.Join(allocs, "1.alloc"), nil, 0o644)

			for _, tc := range []struct {
				name string
				args []string
				out  string // --out; a new directory when empty
				code int
				want []string // in stderr
			}{
				{"no such device", []string{"--serial", "no-such-device", "--package", "com.example.app1"}, "", exitFailure,
					[]string{`no such device "no-such-device"`, s1, s2}},
				{"several devices", []string{"--package", "com.example.app1"}, "", exitUsage,
					[]string{"2 devices are attached", "--serial"}},
				{"app not running", []string{"--serial", s1, "--package", "com.nope"}, "", exitFailure,
					[]string{"app com.nope is not running on " + s1}},
				{"pid not debuggable", []string{"--serial", s1, "--pid", "4242"}, "", exitFailure,
					[]string{"pid 4242 on " + s1 + " is not a debuggable process"}},
				{"held by a debugger", []string{"--serial", s1, "--package", "com.example.held", "--request.timeout", "1s"}, heldDir, exitFailure,
					[]string{"another debugger", strconv.Itoa(held.PID())}},
				{"android 12 over ddm", []string{"--serial", s2, "--package", "com.example.app1", "--request.timeout", "1s", "--backend", "ddm"}, "", exitFailure,
					[]string{"Android 12", "API 31"}},
				// A device without perfetto: the heapprofd path reaches the
				// device's shell and says why it stopped.
				{"android 12 without perfetto", []string{"--serial", s2, "--package", "com.example.app1"}, "", exitFailure,
					[]string{"perfetto-start", "perfetto exited 127", "perfetto: inaccessible or not found"}},
				{"sampling interval 0", []string{"--serial", s2, "--package", "com.example.app1", "--heapprofd.sampling-interval", "0"}, "", exitUsage,
					[]string{"--heapprofd.sampling-interval must be at least 1"}},
				{"package and pid", []string{"--serial", s1, "--package", "com.example.app1", "--pid", strconv.Itoa(app1.PID())}, "", exitUsage,
					[]string{"exactly one of --package and --pid"}},
				{"neither package nor pid", []string{"--serial", s1}, "", exitUsage,
					[]string{"exactly one of --package and --pid"}},
				{"out holds a capture", []string{"--serial", s1, "--package", "com.example.app1"}, full, exitFailure,
					[]string{full, "already holds a capture"}},
				{"out holds reports", []string{"--serial", s1, "--package", "com.example.app1"}, allocs, exitFailure,
					[]string{allocs, "already holds .alloc files"}},
			} {
				t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
					out := tc.out
					if out == "" {
						out = filepath.Join(t.TempDir(), "capture")
					}
					// A capture that went on instead of failing would run
					// for its duration, well past testwait.Bound.
					args := append([]string{"capture", "--adb.address", addr, "--duration", "3m", "--window", "500ms", "--window.min", "250ms", "--out", out}, tc.args...)
					start := time.Now()
					stdout, stderr, code := runCmd(t, args...)
					if code != tc.code {
						t.Fatalf("exit %d, want %d; stdout %q, stderr:\n%s", code, tc.code, stdout, stderr)
					}
					for _, w := range tc.want {
						if !strings.Contains(stderr, w) {
							t.Errorf("stderr does not mention %q:\n%s", w, stderr)
						}
					}
					if d := time.Since(start); d > testwait.Bound {
						t.Errorf("took %v to fail", d)
					}
				})
			}
			for _, d := range f.Devices() {
				for _, vm := range d.VMs() {
					if vm.Tracking() {
						t.Errorf("%s %s: tracking on", d.Serial(), vm.ProcessName())
					}
				}
			}
			// Held on API 28+: the VM leaves the connection unread (queued,
			// then stale once the client gave up); below, it refuses it.
			if st := held.Stats(); st.Refused+st.Queued+st.Stale == 0 || st.Connections != 0 {
				t.Errorf("held app: %d connections refused, %d left unread, %d served; want some refused or unread and none served", st.Refused, st.Queued+st.Stale, st.Connections)
			}
			// The failed session still leaves a summary naming the error.
			b, err := os.ReadFile(filepath.Join(heldDir, "summary.json"))
			if err != nil {
				t.Fatal(err)
			}
			var s offline.Summary
			if err := json.Unmarshal(b, &s); err != nil || s.Error == "" || s.Windows != 0 {
				t.Errorf("held capture's summary.json (%v):\n%s", err, b)
			}
		})
	}
}

func writeCaptureBudget(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "budget.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCaptureBudget checks a capture against a budget: within it exits 0;
// over it exits 3 naming the limit and by how much; a malformed file is a
// usage error before anything is recorded.
func TestCaptureBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget string
		code   int
	}{
		{"pass", "total: {max_allocations: 100000000, max_bytes_per_second: 1.0e12}\nclasses: [{match: '.*', max_bytes: 100000000000}]\n", exitOK},
		{"fail", "total: {max_allocations: 10}\nclasses: [{match: 'no\\.such\\.Class', max_allocations: 0}]\n", exitBudget},
		{"malformed", "total: {max_allocs: 10}\n", exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCaptureFarm(t, sim.FarmConfig{AppsPerDevice: 1, Workload: quietCaptureWorkload()})
			addr, _ := serveSimHost(t, f)
			vm := onlyVM(t, f, "sim-1", "com.example.app1")
			dir := filepath.Join(t.TempDir(), "capture")
			res := startCapture("--adb.address", addr, "--serial", "sim-1", "--package", "com.example.app1",
				"--duration", "1s", "--window", "500ms", "--window.min", "250ms", "--out", dir, "--budget", writeCaptureBudget(t, tc.budget))
			if tc.code == exitUsage {
				res.wait(t, 5*time.Second)
				if res.code != exitUsage || !strings.Contains(res.stderr.String(), "max_allocs") {
					t.Fatalf("%s\nwant exit %d naming the unknown key", res.say(), exitUsage)
				}
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a malformed budget still created %s (%v)", dir, err)
				}
				if st := vm.Stats(); st.Connections != 0 {
					t.Errorf("a malformed budget still attached to the app")
				}
				return
			}
			waitTracking(t, vm, res.done, res.say)
			driveAllocations(vm, 300*time.Millisecond, 20)
			res.wait(t, 10*time.Second)
			if res.code != tc.code {
				t.Fatalf("%s\nwant exit %d", res.say(), tc.code)
			}
			stderr := res.stderr.String()
			cf := checkCaptureDir(t, dir)
			n := cf.counts.Total.Allocations
			if tc.code == exitOK {
				if strings.Contains(stderr, "budget exceeded") || !strings.Contains(stderr, "alloctrack capture: within budget (3 limits)") {
					t.Errorf("stderr:\n%s", stderr)
				}
				return
			}
			if n <= 10 {
				t.Fatalf("only %d allocations captured", n)
			}
			want := fmt.Sprintf("alloctrack capture: budget exceeded: total: %d allocations exceeds the limit 10 by %d", n, n-10)
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr)
			}
			// Over budget wins; the rule that matched nothing is named.
			if !strings.Contains(stderr, "budget rule classes[0] 'no\\.such\\.Class' matched no class") {
				t.Errorf("the class rule that matched nothing was not named:\n%s", stderr)
			}
		})
	}
}
