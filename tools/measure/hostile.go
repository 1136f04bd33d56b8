package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alloctrack/alloctrack/adb/adbtest"
)

// hostile runs `alloctrack serve` against fake adb servers (adb/adbtest)
// whose devices answer in every hostile mode, and samples the daemon's RSS
// every second. It fails if RSS reaches the memory limit the daemon logs
// at start (memory_limit="96 MiB" with the defaults), or if the daemon
// exits. One server lists a device per mode (with honest and with hostile
// getprop, on API 30 and 31, so that DDM and heapprofd sessions both meet
// them); the other answers its host services in the next hostile mode at
// each connection. Both restart every -adb.restart, so that the daemon
// asks its devices' facts again.
//
//	go run ./tools/measure hostile -duration 10m
func hostile(args []string) error {
	fs := flag.NewFlagSet("hostile", flag.ExitOnError)
	duration := fs.Duration("duration", 10*time.Minute, "how long the daemon runs against the hostile servers")
	restart := fs.Duration("adb.restart", time.Minute, "how often the fake adb servers restart")
	pace := fs.Duration("pace", 5*time.Millisecond, "pause between two 32 KiB writes of an endless reply (0: as fast as the daemon reads)")
	port := fs.Int("port", 19855, "daemon's port on 127.0.0.1")
	logPath := fs.String("log", filepath.Join(os.TempDir(), "alloctrack-hostile.log"), "where the daemon's log goes")
	daemonFlags := fs.String("daemon.flags", "", "more flags for alloctrack serve")
	modes := fs.String("modes", "", "comma-separated modes of the devices (default: rotate and every hostile mode)")
	host := fs.String("host", string(adbtest.Rotate), "mode of the second server's host services")
	variants := fs.String("variants", "30,31,props", "devices per mode: honest getprop on API 30 and 31, hostile getprop")
	fs.Parse(args)

	ms := append([]adbtest.Mode{adbtest.Rotate}, adbtest.Hostile...)
	if *modes != "" {
		ms = nil
		for _, m := range strings.Split(*modes, ",") {
			ms = append(ms, adbtest.Mode(m))
		}
	}
	devs := hostileDevices(ms, strings.Split(*variants, ","))
	cfgs := []adbtest.Config{{Devices: devs}, {Host: adbtest.Mode(*host), Devices: devs[:min(3, len(devs))]}}
	servers := make([]*adbtest.Server, len(cfgs))
	var addrs []string
	for i := range cfgs {
		cfgs[i].Pace = *pace
		servers[i] = adbtest.NewServer(cfgs[i])
		cfgs[i].Listen = servers[i].Addr()
		addrs = append(addrs, "--adb.address", servers[i].Addr())
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	logf, err := os.Create(*logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	listen := fmt.Sprintf("127.0.0.1:%d", *port)
	d, limitc, err := startHostileDaemon(append(addrs, append([]string{"--web.listen-address", listen}, strings.Fields(*daemonFlags)...)...), logf)
	if err != nil {
		return err
	}
	defer d.stop()
	var limit int64
	select {
	case limit = <-limitc:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("no memory_limit in the daemon's start log (%s)", *logPath)
	}
	fmt.Printf("hostile: %d devices in modes %v, host services %s, endless replies paced %v, servers restarted every %v, for %v; daemon pid %d, memory limit %d MiB, log %s\n",
		len(cfgs[0].Devices), ms, *host, *pace, *restart, *duration, d.pid(), limit>>20, *logPath)
	return sampleHostile(d, servers, cfgs, listen, limit, *duration, *restart)
}

// hostileDevices is a device per mode and variant: getprop answered
// honestly with an API level (30: DDM, 31: heapprofd), or in the mode
// ("props").
func hostileDevices(modes []adbtest.Mode, variants []string) []adbtest.Device {
	var out []adbtest.Device
	for _, m := range modes {
		for _, v := range variants {
			d := adbtest.Device{Serial: "h-" + string(m) + "-" + v, Mode: m}
			if api, err := strconv.Atoi(v); err == nil {
				d.HonestProps, d.API = true, api
			}
			out = append(out, d)
		}
	}
	return out
}

var memoryLimitRE = regexp.MustCompile(`memory_limit="?(\d+) MiB`)

// startHostileDaemon builds alloctrack and starts serve with args, its
// log (info level) going to w; the channel gets the memory limit the log
// states.
func startHostileDaemon(args []string, w io.Writer) (*daemon, <-chan int64, error) {
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("alloctrack-measure-%d", os.Getpid()))
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/alloctrack").CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("building the daemon: %v\n%s", err, out)
	}
	d := &daemon{bin: bin, done: make(chan struct{})}
	d.cmd = exec.Command(bin, append([]string{"serve", "--log.level", "info"}, args...)...)
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := d.cmd.Start(); err != nil {
		os.Remove(bin)
		return nil, nil, err
	}
	limitc := make(chan int64, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if m := memoryLimitRE.FindStringSubmatch(sc.Text()); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				select {
				case limitc <- n << 20:
				default:
				}
			}
			fmt.Fprintln(w, sc.Text())
		}
		io.Copy(w, stderr) // a line over 1 MiB: the rest as it comes
	}()
	go func() { <-logDone; d.err = d.cmd.Wait(); close(d.done) }()
	return d, limitc, nil
}

// sampleHostile samples the daemon's RSS each second, prints each
// minute's figures, restarts the servers, and at the end stops the daemon
// with SIGTERM.
func sampleHostile(d *daemon, servers []*adbtest.Server, cfgs []adbtest.Config, listen string, limit int64, duration, restart time.Duration) error {
	fmt.Printf("%6s %9s %9s %9s %10s %5s %9s %7s\n", "minute", "RSS MiB", "peak MiB", "HWM MiB", "goroutines", "fds", "requests", "CPU s")
	start := time.Now()
	var maxRSS, samples int64
	nextRestart, nextMinute, requests := start.Add(restart), start.Add(time.Minute), 0
	for t := range time.Tick(time.Second) {
		select {
		case <-d.done:
			return fmt.Errorf("the daemon exited after %v: %v (log above)", t.Sub(start).Round(time.Second), d.err)
		default:
		}
		rss, hwm, _, err := procMem(d.pid())
		if err != nil {
			return err
		}
		// VmHWM, the peak RSS, catches what happens between samples.
		samples++
		maxRSS = max(maxRSS, rss, hwm)
		if maxRSS >= limit {
			return fmt.Errorf("peak RSS %d MiB at %v, at or over the memory limit of %d MiB", maxRSS>>20, t.Sub(start).Round(time.Second), limit>>20)
		}
		if t.After(nextRestart) {
			for i, s := range servers {
				requests += len(s.Requests())
				s.Close()
				servers[i] = adbtest.NewServer(cfgs[i])
			}
			nextRestart = t.Add(restart)
		}
		if t.After(nextMinute) || t.Sub(start) >= duration {
			m, _ := readMetrics(listen)
			n := requests
			for _, s := range servers {
				n += len(s.Requests())
			}
			fmt.Printf("%6.0f %9.1f %9.1f %9.1f %10.0f %5.0f %9d %7.1f\n", t.Sub(start).Minutes(), mib(rss), mib(maxRSS), mib(hwm),
				m.gauges["go_goroutines"], m.gauges["process_open_fds"], n, m.gauges["process_cpu_seconds_total"])
			nextMinute = nextMinute.Add(time.Minute)
		}
		if t.Sub(start) >= duration {
			break
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.done
	fmt.Printf("hostile: %d samples, peak RSS (VmHWM) %.1f MiB of a %d MiB limit; the daemon ran %v and exited on SIGTERM: %v\n",
		samples, mib(maxRSS), limit>>20, time.Since(start).Round(time.Second), exitText(d.err))
	return d.err
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
