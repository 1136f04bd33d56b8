package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/sim"
)

// soak runs the daemon binary against a simulated farm that changes all
// the time: apps restart, devices are unplugged and come back, apps come
// and go, and the adb server restarts. Each minute it prints the daemon's
// RSS, goroutines, open file descriptors and series; every scrape it checks
// that no counter went down; at the end it stops every workload, waits for
// the last reports and compares the daemon's per-app totals with the
// simulator's ground truth.
func soak(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	duration := fs.Duration("duration", 35*time.Minute, "how long the farm changes")
	window := fs.Duration("window", 10*time.Second, "daemon window")
	devices := fs.Int("devices", 8, "devices")
	apps := fs.Int("apps", 4, "apps per device at the start")
	rate := fs.Float64("rate", 2000, "allocations per second per app")
	every := fs.Duration("event.interval", 15*time.Second, "time between farm events")
	adbRestart := fs.Duration("adb.restart", 10*time.Minute, "how often the adb server restarts")
	scrape := fs.Duration("scrape", 15*time.Second, "how often /metrics is read and checked")
	port := fs.Int("port", 19854, "daemon's port on 127.0.0.1")
	daemonFlags := fs.String("daemon.flags", "", "more flags for alloctrack serve, such as \"--log.level debug\"")
	seed := fs.Uint64("seed", 1, "seed of the event schedule")
	names := fs.Int("extra.names", 3, "package names the apps that come and go are drawn from (per device), so that the set of apps the daemon keeps counters for stops growing early")
	fs.Parse(args)

	w := sim.DefaultWorkload()
	w.Rate = *rate
	farm := sim.NewFarm(sim.FarmConfig{Devices: *devices, AppsPerDevice: *apps, Workload: w, APIs: []int{30, 28, 26, 23}})
	defer farm.Close()

	// Every package name the soak will ever start runs from the start, so
	// the set of apps the daemon keeps counters for (which it never
	// forgets) is complete before minute 5: RSS growth after that is not
	// new apps' counters but something kept that should not be.
	extraSeed := 0
	for _, d := range farm.Devices() {
		for i := 0; i < *names; i++ {
			extraSeed++
			wl := w
			wl.Seed = uint64(500 + extraSeed)
			if _, err := farm.AddApp(d.Serial(), sim.AppConfig{Package: fmt.Sprintf("com.example.extra%d", i), Workload: wl}); err != nil {
				return err
			}
		}
	}

	// Our own stand-in adb server, so that it can be restarted on the
	// same address.
	host := sim.NewHostServer()
	for _, d := range farm.Devices() {
		host.AddDevice(d)
	}
	addr, err := host.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer func() { host.Close() }()

	listen := fmt.Sprintf("127.0.0.1:%d", *port)
	d, err := startDaemon(addr.String(), listen, *window, strings.Fields(*daemonFlags)...)
	if err != nil {
		return err
	}
	defer d.stop()
	pid := d.pid()
	fmt.Printf("soak: %d devices x (%d apps + %d that come and go) at the start, %.0f allocations/s each, window %v, a farm event every %v, adb server restart every %v, for %v; daemon pid %d\n",
		*devices, *apps, *names, *rate, *window, *every, *adbRestart, *duration, pid)
	// The live heap is what the last collection found reachable (the
	// median of the minute's scrapes); the heap goal is where the next
	// cycle starts: about twice that (GOGC=100), less when the memory
	// limit binds. A flat live heap with a moving RSS is the collector's
	// timing, not memory kept.
	// The Go heap's pages held (in use, or free and not yet given back
	// to the system) and the free report buffers, outside the heap, are
	// the two parts of RSS that move; both are read at the minute's end.
	fmt.Printf("%6s %9s %9s %9s %9s %9s %9s %9s %10s %5s %7s %5s %8s  %s\n", "minute", "RSS MiB", "anon MiB", "HWM MiB", "live MiB", "goal MiB", "heap MiB", "bufs MiB", "goroutines", "fds", "series", "apps", "CPU s", "events")

	rng := rand.New(rand.NewPCG(*seed, 7))
	// Apps come and go within a band of half an app per device either
	// side of the starting count.
	startApps, band := 0, max(1, *devices/2)
	for _, d := range farm.Devices() {
		startApps += len(d.VMs())
	}
	var (
		start      = time.Now()
		unplugged  = map[string]time.Time{}
		extra      = 0
		events     = map[string]int{}
		prev       = map[string]float64{}
		decreases  []string
		scrapes    int
		nextScrape = start
		nextEvent  = start.Add(*every)
		nextAdb    = start.Add(*adbRestart)
		nextMinute = start.Add(time.Minute)
		minute     = 0
		nextRSS    = start
		rssMinute  []int64
		rssFrom5   []float64 // each minute's median RSS from minute 5
		// The heap live after the last collection, from every scrape:
		// what the daemon holds, without the collector's headroom.
		liveMinute []float64
		liveFrom5  []float64
		// Anonymous RSS (RssAnon): RSS less the binary's and libraries'
		// pages, which grow as code runs for the first time.
		anonMinute []int64
		anonFrom5  []float64
	)
	alive := func() []*sim.VM {
		var out []*sim.VM
		for _, d := range farm.Devices() {
			out = append(out, d.VMs()...)
		}
		return out
	}
	check := func() (metrics, error) {
		m, err := readMetrics(listen)
		if err != nil {
			return m, err
		}
		scrapes++
		if v, ok := m.gauges["go_gc_heap_live_bytes"]; ok {
			liveMinute = append(liveMinute, v)
		}
		for k, v := range m.counters {
			if p, ok := prev[k]; ok && v < p {
				decreases = append(decreases, fmt.Sprintf("%s: %v then %v", k, p, v))
			}
		}
		prev = m.counters
		return m, nil
	}
	for time.Since(start) < *duration {
		now := time.Now()
		if !now.Before(nextScrape) {
			if _, err := check(); err != nil {
				fmt.Printf("scrape failed: %v\n", err)
			}
			nextScrape = now.Add(*scrape)
		}
		if !now.Before(nextEvent) {
			nextEvent = now.Add(*every)
			// Devices unplugged for 30 s come back.
			for serial, at := range unplugged {
				if now.Sub(at) >= 30*time.Second {
					host.AddDevice(farm.Device(serial))
					delete(unplugged, serial)
					events["replug"]++
				}
			}
			switch k := rng.IntN(10); {
			case k < 4: // an app restarts
				if vms := alive(); len(vms) > 0 {
					vm := vms[rng.IntN(len(vms))]
					if serial := serialOf(farm, vm); serial != "" {
						if _, err := farm.RestartApp(serial, vm.PID()); err == nil {
							events["restart"]++
						}
					}
				}
			case k < 6: // a device is unplugged
				d := farm.Devices()[rng.IntN(*devices)]
				if _, gone := unplugged[d.Serial()]; !gone {
					host.RemoveDevice(d.Serial())
					d.Disconnect()
					unplugged[d.Serial()] = now
					events["unplug"]++
				}
			default: // an app starts, or one ends for good
				// The way back towards the farm's starting size is the
				// likelier, in proportion to how far off it is, so that
				// the count wanders around its start rather than drifting
				// (a farm that shrinks over the run would hide growth).
				vms := alive()
				if rng.IntN(2*band) < startApps+band-len(vms) {
					var room []*sim.Device
					for _, d := range farm.Devices() {
						if len(d.VMs()) < 2**apps {
							room = append(room, d)
						}
					}
					if len(room) > 0 {
						d := room[rng.IntN(len(room))]
						extra++
						wl := w
						wl.Seed = uint64(1000 + extra)
						if _, err := farm.AddApp(d.Serial(), sim.AppConfig{Package: fmt.Sprintf("com.example.extra%d", extra%*names), Workload: wl}); err == nil {
							events["app+"]++
						}
					}
				} else if len(vms) > *devices {
					vm := vms[rng.IntN(len(vms))]
					if serial := serialOf(farm, vm); serial != "" && len(farm.Device(serial).VMs()) > 1 {
						if err := farm.KillApp(serial, vm.PID()); err == nil {
							events["app-"]++
						}
					}
				}
			}
		}
		if !now.Before(nextAdb) {
			nextAdb = now.Add(*adbRestart)
			host.Close()
			host = sim.NewHostServer()
			for _, d := range farm.Devices() {
				if _, gone := unplugged[d.Serial()]; !gone {
					host.AddDevice(d)
				}
			}
			// The daemon sees the server go away and come back on the
			// same address a second later.
			time.Sleep(time.Second)
			if _, err := host.Listen(addr.String()); err != nil {
				return fmt.Errorf("restarting the adb server on %s: %w", addr, err)
			}
			events["adb-restart"]++
		}
		if !now.Before(nextRSS) {
			// RSS swings with each window's report buffers and the
			// collector's timing; a minute's figure is the median of a
			// sample every 5 s.
			nextRSS = now.Add(5 * time.Second)
			if rss, _, anon, err := procMem(pid); err == nil {
				rssMinute = append(rssMinute, rss)
				anonMinute = append(anonMinute, anon)
			}
		}
		if !now.Before(nextMinute) {
			nextMinute = nextMinute.Add(time.Minute)
			minute++
			m, err := check()
			if err != nil {
				fmt.Printf("minute %d: scrape failed: %v\n", minute, err)
				continue
			}
			_, hwm, _, _ := procMem(pid)
			rss, anon, live := median(rssMinute), median(anonMinute), median(liveMinute)
			rssMinute, anonMinute, liveMinute = rssMinute[:0], anonMinute[:0], liveMinute[:0]
			cpu, _, _ := procStat(pid)
			fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			if minute >= 5 {
				rssFrom5 = append(rssFrom5, float64(rss))
				liveFrom5 = append(liveFrom5, live)
				anonFrom5 = append(anonFrom5, float64(anon))
			}
			heap := m.gauges["go_memstats_heap_inuse_bytes"] + m.gauges["go_memstats_heap_idle_bytes"] - m.gauges["go_memstats_heap_released_bytes"]
			row := fmt.Sprintf("%6d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %10.0f %5d %7d %5d %8.1f  %v", minute, float64(rss)/(1<<20), float64(anon)/(1<<20), float64(hwm)/(1<<20),
				live/(1<<20), m.gauges["go_memstats_next_gc_bytes"]/(1<<20), heap/(1<<20), m.gauges[`alloctrack_report_buffer_bytes{state="free"}`]/(1<<20),
				m.gauges["go_goroutines"], len(fds), m.series, len(alive()), cpu.Seconds(), fmtEvents(events))
			fmt.Println(row)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The end: every device back, every workload stopped, then three
	// windows for the last reports.
	for serial := range unplugged {
		host.AddDevice(farm.Device(serial))
		events["replug"]++
	}
	for _, vm := range alive() {
		vm.Pause(true)
	}
	fmt.Printf("farm changes stopped after %v; waiting %v for the last reports\n", time.Since(start).Round(time.Second), 4**window)
	time.Sleep(4 * *window)
	m, err := check()
	if err != nil {
		return err
	}
	cpu, hwm, _ := procStat(pid)
	elapsed := time.Since(start)

	type appKey struct{ serial, pkg string }
	truth := map[appKey][3]uint64{} // reported allocations, bytes; allocated
	for _, d := range farm.Devices() {
		for _, vm := range farm.VMs(d.Serial(), "") {
			k := appKey{d.Serial(), vm.ProcessName()}
			if _, ok := truth[k]; ok {
				continue
			}
			allocated, reported := farm.Truth(d.Serial(), vm.ProcessName())
			truth[k] = [3]uint64{reported.Total.Allocations, reported.Total.Bytes, allocated.Total.Allocations}
		}
	}
	var exact, lostInTransport, wrong int
	var sumTruth, sumDaemon, sumAllocated, sumLost float64
	for k, tr := range truth {
		labels := fmt.Sprintf(`{package=%q,serial=%q}`, k.pkg, k.serial)
		ga, oka := m.counters["alloctrack_app_allocations_total"+labels]
		gb := m.counters["alloctrack_app_allocated_bytes_total"+labels]
		sumTruth += float64(tr[0])
		sumDaemon += ga
		sumAllocated += float64(tr[2])
		if oka && ga == float64(tr[0]) && gb == float64(tr[1]) {
			exact++
			continue
		}
		// Reports whose connection ended before the daemon asked for
		// more may have been lost by the transport: the daemon must then
		// equal the truth less exactly some of them.
		doubt := farm.InDoubt(k.serial, k.pkg)
		if lost, ok := lostSubset(doubt, tr[0]-uint64(ga), tr[1]-uint64(gb)); oka && ga <= float64(tr[0]) && ok {
			lostInTransport++
			sumLost += float64(tr[0]) - ga
			fmt.Printf("  %s %s: daemon %v allocations, %v bytes = simulator reported %d, %d bytes less %d reports the transport lost (sent as the connection ended: %v)\n",
				k.serial, k.pkg, ga, gb, tr[0], tr[1], len(lost), lost)
			continue
		}
		wrong++
		fmt.Printf("  %s %s: daemon %v allocations, %v bytes; simulator reported %d, %d bytes (allocated while tracked %d; reports in doubt %v)\n",
			k.serial, k.pkg, ga, gb, tr[0], tr[1], tr[2], doubt)
		for _, vm := range farm.VMs(k.serial, k.pkg) {
			tr := vm.Trace()
			tr = tr[max(0, len(tr)-60):]
			fmt.Printf("    pid %d, newest requests: %v\n", vm.PID(), tr)
			// Each closed window's last report, to set against the
			// daemon's "report counted" lines (--log.level debug).
			var sent []uint64
			for _, w := range vm.Windows() {
				if n := w.Reported.Total.Allocations; n > 0 {
					sent = append(sent, n)
				}
			}
			fmt.Printf("    pid %d, reports of closed windows (allocations): %v\n", vm.PID(), sent)
		}
	}
	fmt.Printf("soak: %v; events %v; %d scrapes\n", elapsed.Round(time.Second), fmtEvents(events), scrapes)
	fmt.Printf("daemon CPU %v (%.1f%% of one core); peak RSS %.1f MiB\n",
		cpu.Round(10*time.Millisecond), 100*cpu.Seconds()/elapsed.Seconds(), float64(hwm)/(1<<20))
	if n := len(rssFrom5); n > 0 {
		first, last := rssFrom5[0], rssFrom5[n-1]
		fmt.Printf("RSS (median of the minute) at minute 5 %.1f MiB, in the last minute %.1f MiB (%+.1f%%)\n",
			first/(1<<20), last/(1<<20), 100*(last/first-1))
	}
	if n := len(rssFrom5); n >= 10 {
		// Five minutes against five: each minute's median moves with
		// where the collector happens to be (by tens of MiB), a median of
		// five of them much less.
		first, last := median(rssFrom5[:5]), median(rssFrom5[n-5:])
		fmt.Printf("RSS, median of minutes 5-9 %.1f MiB, of the last 5 minutes %.1f MiB (%+.1f%%)\n",
			first/(1<<20), last/(1<<20), 100*(last/first-1))
	}
	if len(rssFrom5) >= 2 {
		// One minute's median against another is at the mercy of where
		// the collector and the windows happen to be; the least-squares
		// line through every minute from 5 on says whether RSS grows.
		printTrend(fmt.Sprintf("RSS trend from minute 5 (least squares over %d minutes)", len(rssFrom5)), rssFrom5)
		printTrend("live heap trend from minute 5 (least squares, each minute's median)", liveFrom5)
		printTrend("anonymous RSS trend from minute 5 (least squares, each minute's median)", anonFrom5)
	}
	fmt.Printf("ground truth: %d apps (serial, package) exact, %d exact but for whole reports lost in transport (%.0f allocations), %d wrong; daemon %.0f allocations, simulator reported %.0f, allocated while tracked %.0f\n",
		exact, lostInTransport, sumLost, wrong, sumDaemon, sumTruth, sumAllocated)
	fmt.Printf("counters that went down between scrapes: %d\n", len(decreases))
	for i, d := range decreases {
		if i == 20 {
			fmt.Printf("  … and %d more\n", len(decreases)-20)
			break
		}
		fmt.Println("  " + d)
	}
	fmt.Printf("after SIGTERM: daemon exit %v\n", d.terminate())
	return nil
}

// median is the median of ys (the upper one of an even count; 0 for
// none), leaving ys as it is.
func median[T int64 | float64](ys []T) T {
	if len(ys) == 0 {
		return 0
	}
	s := slices.Clone(ys)
	slices.Sort(s)
	return s[len(s)/2]
}

// printTrend prints the least-squares line through ys (bytes, one a
// minute): its first and last values, the change between them and the
// slope.
func printTrend(what string, ys []float64) {
	slope, first := fitLine(ys)
	last := first + slope*float64(len(ys)-1)
	fmt.Printf("%s: %.1f MiB -> %.1f MiB (%+.1f%%), %+.2f MiB a minute\n",
		what, first/(1<<20), last/(1<<20), 100*(last/first-1), slope/(1<<20))
}

// fitLine fits y = a + b·x by least squares to ys at x = 0, 1, 2, … and
// returns b and a.
func fitLine(ys []float64) (slope, intercept float64) {
	n := float64(len(ys))
	var sx, sy, sxx, sxy float64
	for i, y := range ys {
		x := float64(i)
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	slope = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	return slope, (sy - slope*sx) / n
}

// lostSubset finds reports among doubt whose allocations and bytes add up
// to exactly the shortfall, trying every subset (there are a handful at
// most). It returns them, or false if none adds up.
func lostSubset(doubt []alloctrack.Count, allocs, bytes uint64) ([]alloctrack.Count, bool) {
	if len(doubt) > 16 {
		return nil, false
	}
	for mask := 1; mask < 1<<len(doubt); mask++ {
		var a, b uint64
		var set []alloctrack.Count
		for i, c := range doubt {
			if mask&(1<<i) != 0 {
				a += c.Allocations
				b += c.Bytes
				set = append(set, c)
			}
		}
		if a == allocs && b == bytes {
			return set, true
		}
	}
	return nil, false
}

func serialOf(f *sim.Farm, vm *sim.VM) string {
	for _, d := range f.Devices() {
		if d.VM(vm.PID()) == vm {
			return d.Serial()
		}
	}
	return ""
}

func fmtEvents(e map[string]int) string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, e[k])
	}
	return b.String()
}

// procMem returns a process's resident, peak resident and anonymous
// resident set sizes.
func procMem(pid int) (rss, hwm, anon int64, err error) {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb * 1024
		case "VmHWM:":
			hwm = kb * 1024
		case "RssAnon:":
			anon = kb * 1024
		}
	}
	return rss, hwm, anon, nil
}

type metrics struct {
	series   int
	counters map[string]float64 // counter samples (…_total, histogram _count/_sum/_bucket) by name and labels
	gauges   map[string]float64 // unlabelled gauges
}

// readMetrics reads /metrics (text format).
func readMetrics(listen string) (metrics, error) {
	m := metrics{counters: map[string]float64{}, gauges: map[string]float64{}}
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return m, err
	}
	counterFamilies := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			if len(f) == 4 && (f[3] == "counter" || f[3] == "histogram") {
				counterFamilies[f[2]] = true
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		m.series++
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		key := line[:i]
		name := key
		if j := strings.IndexByte(key, '{'); j >= 0 {
			name = key[:j]
			if name == "alloctrack_report_buffer_bytes" {
				m.gauges[key] = v
			}
		} else {
			m.gauges[name] = v
		}
		base := name
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			base = strings.TrimSuffix(base, suf)
		}
		if (counterFamilies[name] || counterFamilies[base]) && strings.HasPrefix(name, "alloctrack_") {
			m.counters[key] = v
		}
	}
	return m, nil
}
