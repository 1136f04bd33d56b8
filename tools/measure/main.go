// Command measure produces the daemon's figures: coverage (the share of
// allocations that reach the counters) and load (CPU time, peak RSS and
// /metrics render time for a farm of saturated apps). It runs simulated
// devices in-process behind a simulated adb server; these are measurements,
// not tests, and print their figures.
//
//	go run ./tools/measure coverage -duration 2m -window 10s -latency 20ms
//	go run ./tools/measure load -devices 16 -apps 4 -duration 3m
//	go run ./tools/measure soak -duration 35m
//	go run ./tools/measure hostile -duration 10m
//	go run ./tools/measure gates -trials 200
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	"github.com/alloctrack/alloctrack/internal/source"
	"github.com/alloctrack/alloctrack/sim"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: measure coverage|load|heapprofd|soak|heapdump|hostile|gates [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "coverage":
		err = coverage(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	case "heapprofd":
		err = heapprofd(os.Args[2:])
	case "soak":
		err = soak(os.Args[2:])
	case "heapdump":
		err = heapdumpCmd(os.Args[2:])
	case "hostile":
		err = hostile(os.Args[2:])
	case "gates":
		err = gates(os.Args[2:])
	default:
		err = fmt.Errorf("unknown measurement %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "measure:", err)
		os.Exit(1)
	}
}

func coverage(args []string) error {
	fs := flag.NewFlagSet("coverage", flag.ExitOnError)
	duration := fs.Duration("duration", 2*time.Minute, "how long the daemon runs")
	window := fs.Duration("window", 10*time.Second, "daemon window")
	latency := fs.Duration("latency", 20*time.Millisecond, "latency injected on every app's link")
	devices := fs.Int("devices", 2, "devices")
	apps := fs.Int("apps", 2, "apps per device")
	rate := fs.Float64("rate", 2000, "allocations per second per app (keep windows from overflowing)")
	fs.Parse(args)

	w := sim.DefaultWorkload()
	w.Rate = *rate
	farm := sim.NewFarm(sim.FarmConfig{Devices: *devices, AppsPerDevice: *apps, Workload: w})
	defer farm.Close()
	for _, d := range farm.Devices() {
		for _, vm := range d.VMs() {
			vm.SetFaults(sim.Faults{Latency: *latency})
		}
	}
	addr, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		return err
	}
	d := supervisor.NewDaemon(supervisor.DaemonConfig{
		Session:   ddm.Config{Window: *window, MinWindow: time.Second},
		Aggregate: alloctrack.AggregateConfig{TopClasses: 1000, TopSites: 10000},
	}, []supervisor.Source{source.New(addr.String())}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	fmt.Printf("coverage: %d devices x %d apps, %.0f allocations/s each, window %v, latency %v, for %v\n",
		*devices, *apps, *rate, *window, *latency, *duration)
	time.Sleep(*duration)
	cancel()
	<-done

	counted := map[string]uint64{}
	overflowed := uint64(0)
	for _, a := range d.Snapshot().Apps {
		counted[a.Serial+"/"+a.Package] = a.Counts.Total.Allocations
		overflowed += a.Overflowed
	}
	var num, den, reported uint64
	for _, dev := range farm.Devices() {
		for _, vm := range dev.VMs() {
			st := vm.Stats()
			seen := st.AllocationsAtLastReport - st.AllocationsAtFirstEnable
			c := counted[dev.Serial()+"/"+vm.ProcessName()]
			rep := vm.TotalReported().Total.Allocations
			fmt.Printf("  %s %s: counted %d, reported by the VM %d, allocated between first enable and last report %d: %.4f%%\n",
				dev.Serial(), vm.ProcessName(), c, rep, seen, 100*float64(c)/float64(seen))
			num += c
			den += seen
			reported += rep
		}
	}
	fmt.Printf("coverage: %.4f%% (%d of %d allocations); counted %s reported; %d overflowed windows\n",
		100*float64(num)/float64(den), num, den, map[bool]string{true: "==", false: "!="}[num == reported], overflowed)
	return nil
}

// procStat returns user+system CPU time and peak RSS of a process.
func procStat(pid int) (cpu time.Duration, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	cpu = time.Duration(ut+st) * time.Second / 100 // USER_HZ
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return cpu, 0, err
	}
	for _, line := range strings.Split(string(s), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			hwm = kb * 1024
		}
	}
	return cpu, hwm, nil
}

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	duration := fs.Duration("duration", 3*time.Minute, "how long the daemon runs")
	window := fs.Duration("window", 10*time.Second, "daemon window")
	devices := fs.Int("devices", 16, "devices")
	apps := fs.Int("apps", 4, "apps per device")
	rate := fs.Float64("rate", 8000, "allocations per second per app (above 6,554/s a 10 s window overflows)")
	renders := fs.Int("renders", 20, "/metrics fetches timed at the end")
	port := fs.Int("port", 19853, "daemon's port on 127.0.0.1")
	extra := fs.String("serve.flags", "", "more flags for alloctrack serve, space-separated")
	fs.Parse(args)

	w := sim.DefaultWorkload()
	w.Rate = *rate
	farm := sim.NewFarm(sim.FarmConfig{Devices: *devices, AppsPerDevice: *apps, Workload: w})
	defer farm.Close()
	addr, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		return err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", *port)
	d, err := startDaemon(addr.String(), listen, *window, strings.Fields(*extra)...)
	if err != nil {
		return err
	}
	defer d.stop()
	fmt.Printf("load: %d devices x %d apps at %.0f allocations/s each, window %v, for %v; daemon pid %d %s\n",
		*devices, *apps, *rate, *window, *duration, d.pid(), *extra)
	start := time.Now()
	time.Sleep(*duration)
	elapsed := time.Since(start)
	cpu, hwm, err := procStat(d.pid())
	if err != nil {
		return err
	}

	var times []time.Duration
	var size int
	var series int
	for range *renders {
		t0 := time.Now()
		resp, err := http.Get("http://" + listen + "/metrics")
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		times = append(times, time.Since(t0))
		size = len(b)
		series = 0
		for _, line := range strings.Split(string(b), "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				series++
			}
		}
	}
	slices.Sort(times)
	s, counted := metricsSummary(listen)
	werr := d.terminate()
	fmt.Printf("daemon CPU time %v over %v (%.1f%% of one core); peak RSS %.1f MiB\n",
		cpu.Round(10*time.Millisecond), elapsed.Round(time.Second), 100*cpu.Seconds()/elapsed.Seconds(), float64(hwm)/(1<<20))
	fmt.Printf("/metrics: %d series, %d bytes; render median %v, max %v over %d fetches\n",
		series, size, times[len(times)/2].Round(100*time.Microsecond), times[len(times)-1].Round(100*time.Microsecond), len(times))
	fmt.Print(s)
	fmt.Printf("coverage: %.1f%% of the %.0f allocations the farm made\n", 100*counted/(float64(*devices**apps)**rate*elapsed.Seconds()), float64(*devices**apps)**rate*elapsed.Seconds())
	off := 0
	for _, d := range farm.Devices() {
		for _, vm := range d.VMs() {
			if vm.Tracking() {
				off++
			}
		}
	}
	fmt.Printf("after SIGTERM: daemon exit %v; apps with tracking still on: %d\n", werr, off)
	return nil
}

// metricsSummary sums a few counters from /metrics.
func metricsSummary(listen string) (string, float64) {
	sums, err := scrapeSums(listen)
	if err != nil {
		return "", 0
	}
	return fmt.Sprintf("windows %.0f (overflowed %.0f), allocations counted %.0f, report bytes %.0f\n",
		sums["alloctrack_windows_total"], sums["alloctrack_overflowed_windows_total"], sums["alloctrack_app_allocations_total"], sums["alloctrack_report_bytes_total"]), sums["alloctrack_app_allocations_total"]
}

// daemon is a running `alloctrack serve`.
type daemon struct {
	cmd  *exec.Cmd
	bin  string
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// startDaemon builds alloctrack and starts `serve` against an adb server,
// listening on listen, with window and more flags; its errors go to
// standard error. It returns once the daemon answers /-/healthy, so that
// the first scrape does not race its start.
func startDaemon(adbAddr, listen string, window time.Duration, flags ...string) (*daemon, error) {
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("alloctrack-measure-%d", os.Getpid()))
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/alloctrack").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the daemon: %v\n%s", err, out)
	}
	d := &daemon{bin: bin, done: make(chan struct{})}
	args := []string{"serve", "--adb.address", adbAddr, "--web.listen-address", listen, "--window", window.String()}
	if !slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, "--log.level") }) {
		args = append(args, "--log.level", "warn")
	}
	d.cmd = exec.Command(bin, append(args, flags...)...)
	d.cmd.Stderr = os.Stderr
	if err := d.cmd.Start(); err != nil {
		os.Remove(bin)
		return nil, err
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + listen + "/-/healthy")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d, nil
			}
		}
		select {
		case <-d.done:
			os.Remove(bin)
			return nil, fmt.Errorf("the daemon exited before answering on %s: %v", listen, d.err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("the daemon did not answer http://%s/-/healthy within 30s", listen)
		}
	}
}

// pid is the daemon's process id.
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// terminate sends SIGTERM and returns the exit status.
func (d *daemon) terminate() error {
	d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.done
	return d.err
}

// stop kills the daemon if it still runs and removes its binary.
func (d *daemon) stop() {
	d.cmd.Process.Kill()
	<-d.done
	os.Remove(d.bin)
}
