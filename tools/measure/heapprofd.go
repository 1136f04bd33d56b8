package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/sim"
)

// heapprofd measures the heapprofd path: a farm of Android 12+ devices,
// the daemon following every app through perfetto sessions, and at the
// end the daemon's CPU time and the trace bytes it read per dump, and the
// estimates' error against the simulator's ground truth (every app's
// workload paused first, so the daemon has read every dump).
func heapprofd(args []string) error {
	fs := flag.NewFlagSet("heapprofd", flag.ExitOnError)
	duration := fs.Duration("duration", 2*time.Minute, "how long the apps allocate")
	window := fs.Duration("window", 10*time.Second, "daemon window (heapprofd dumps every window)")
	devices := fs.Int("devices", 2, "devices (Android 12 and 13 in turn)")
	apps := fs.Int("apps", 4, "apps per device")
	rate := fs.Float64("rate", 2000, "allocations per second per app")
	interval := fs.Int("interval", 4096, "--heapprofd.sampling-interval")
	port := fs.Int("port", 19854, "daemon's port on 127.0.0.1")
	rotate := fs.Duration("rotate", 30*time.Minute, "--heapprofd.rotate")
	fs.Parse(args)

	w := sim.DefaultWorkload()
	w.Rate = *rate
	farm := sim.NewFarm(sim.FarmConfig{Devices: *devices, AppsPerDevice: *apps, Workload: w, APIs: []int{31, 33}})
	defer farm.Close()
	addr, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		return err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", *port)
	d, err := startDaemon(addr.String(), listen, *window, "--backend", "heapprofd", "--heapprofd.sampling-interval", strconv.Itoa(*interval), "--heapprofd.rotate", rotate.String())
	if err != nil {
		return err
	}
	defer d.stop()
	fmt.Printf("heapprofd: %d devices x %d apps (API 31/33) at %.0f allocations/s each, window %v, interval %d, for %v; daemon pid %d\n",
		*devices, *apps, *rate, *window, *interval, *duration, d.pid())
	start := time.Now()
	// The device side: the largest trace file and the most sessions of
	// ours a device held at once, sampled every 200 ms.
	watchDone, watched := make(chan struct{}), make(chan [2]int)
	go func() {
		var biggest, most int
		for {
			select {
			case <-watchDone:
				watched <- [2]int{biggest, most}
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, dev := range farm.Devices() {
				for _, n := range dev.TraceFiles() {
					biggest = max(biggest, n)
				}
				most = max(most, len(dev.PerfettoSessions()))
			}
		}
	}()
	time.Sleep(*duration)
	var vms []*sim.VM
	for _, d := range farm.Devices() {
		vms = append(vms, d.VMs()...)
	}
	for _, vm := range vms {
		vm.Pause(true)
	}
	// Two windows: the paused apps' last samples are dumped and read.
	time.Sleep(2**window + time.Second)
	elapsed := time.Since(start)
	cpu, hwm, err := procStat(d.pid())
	if err != nil {
		return err
	}
	m, err := scrapeSums(listen)
	if err != nil {
		return err
	}
	werr := d.terminate()
	close(watchDone)
	dev := <-watched

	var allocated, allocBytes, sampled uint64
	for _, vm := range vms {
		tr := vm.HeapprofdTruth()
		allocated += tr.Allocated.Total.Allocations
		allocBytes += tr.Allocated.Total.Bytes
		sampled += tr.Sampled.Total.Allocations
	}
	dumps := m["alloctrack_heapprofd_dumps_total"]
	fmt.Printf("daemon CPU %v over %v (%.2f%% of one core), peak RSS %.1f MiB\n",
		cpu.Round(10*time.Millisecond), elapsed.Round(time.Second), 100*cpu.Seconds()/elapsed.Seconds(), float64(hwm)/(1<<20))
	fmt.Printf("dumps %.0f: %.2f ms of daemon CPU and %.0f trace bytes read per dump (all the daemon's CPU, HTTP and adb included)\n",
		dumps, 1000*cpu.Seconds()/dumps, m["alloctrack_heapprofd_trace_bytes_total"]/dumps)
	fmt.Printf("samples: daemon %.0f, simulator %d (exact: %v)\n", m["alloctrack_app_sampled_allocations_total"], sampled, uint64(m["alloctrack_app_sampled_allocations_total"]) == sampled)
	est, estB := m["alloctrack_app_estimated_allocations_total"], m["alloctrack_app_estimated_allocated_bytes_total"]
	fmt.Printf("estimates: allocations %.0f vs %d true (%+.2f%%), bytes %.0f vs %d true (%+.2f%%)\n",
		est, allocated, 100*(est/float64(allocated)-1), estB, allocBytes, 100*(estB/float64(allocBytes)-1))
	left := 0
	for _, d := range farm.Devices() {
		left += len(d.PerfettoSessions()) + len(d.TraceFiles())
	}
	appMinutes := float64(len(vms)) * elapsed.Minutes()
	fmt.Printf("device side: largest trace file %.1f KiB, most sessions of ours on a device at once %d, sessions started %.0f (per app), trace bytes %.1f KiB per app-minute\n",
		float64(dev[0])/1024, dev[1], m["alloctrack_heapprofd_sessions_total"]/float64(len(vms)), m["alloctrack_heapprofd_trace_bytes_total"]/1024/appMinutes)
	fmt.Printf("after SIGTERM: daemon exit %v; sessions and trace files left: %d\n", werr, left)
	if math.IsNaN(est) {
		return fmt.Errorf("no estimates")
	}
	return nil
}

// scrapeSums sums every family of /metrics over its series.
func scrapeSums(listen string) (map[string]float64, error) {
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	sums := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sums[name] += v
	}
	return sums, nil
}
