package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v2"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	"github.com/alloctrack/alloctrack/exporter"
	"github.com/alloctrack/alloctrack/internal/source"
	"github.com/alloctrack/alloctrack/sim"
	webview "github.com/alloctrack/alloctrack/web"
)

// DefaultListenAddress is where serve listens unless told otherwise.
const DefaultListenAddress = ":9853"

type serveCmd struct {
	session         *sessionFlags
	cmd             *kingpin.CmdClause
	web             *web.FlagConfig
	log             *logFlags
	adbAddrs        *[]string
	serials         *[]string
	serialsExclude  *[]string
	packages        *[]string
	packagesExclude *[]string
	topClasses      *int
	topSites        *int
	topExpiry       *time.Duration
	reportsPerDev   *int
	reportsFlight   *int
	reprobe         *time.Duration
	heldRetry       *time.Duration
	waitingRetry    *time.Duration
	retention       *time.Duration
	maxGone         *int
	turnOffOrphans  *bool
	shutdownTimeout *time.Duration
	hpRotate        *time.Duration
	hpMaxFile       *units.Base2Bytes
	dumpDir         *string
	dumpTimeout     *time.Duration
	dumpNoAuth      *bool
	simulate        *bool
	simDevices      *int
	simApps         *int
	simRate         *float64
}

func newServeCmd(app *kingpin.Application) *serveCmd {
	c := &serveCmd{cmd: app.Command("serve", "Run the daemon: follow devices and debuggable apps through adb servers, track allocations in windows, export Prometheus metrics.")}
	f := c.cmd.Flag
	c.web = kingpinflag.AddFlags(c.cmd, DefaultListenAddress)
	c.log = addLogFlags(c.cmd)
	c.session = addSessionFlags(c.cmd)
	c.adbAddrs = f("adb.address", "adb server address host:port; repeat to watch several servers. Default: $ADB_SERVER_SOCKET (tcp:host:port), $ANDROID_ADB_SERVER_PORT, 127.0.0.1:5037.").Strings()
	c.serials = f("serial", "Track only devices whose serial matches this regular expression (whole serial); repeatable.").Strings()
	c.serialsExclude = f("serial.exclude", "Skip devices whose serial matches this regular expression; repeatable.").Strings()
	c.packages = f("package", "Track only apps whose name matches this regular expression (whole name); repeatable.").Strings()
	c.packagesExclude = f("package.exclude", "Skip apps whose name matches this regular expression; repeatable.").Strings()
	c.topClasses = f("top.classes", "Classes per app with a series of their own; the rest count as class=\"other\".").Default("100").Int()
	c.topSites = f("top.sites", "Allocation sites per app with a series of their own; the rest count as site=\"other\".").Default("100").Int()
	c.topExpiry = f("top.expiry", "Drop a class or site series idle this long, making room for others (0: never).").Default("1h").Duration()
	c.reportsPerDev = f("reports.per-device", "Concurrent report transfers per device (USB bandwidth).").Default("2").Int()
	c.reportsFlight = f("reports.in-flight", "Reports read at once across all devices: each holds a whole report (up to about 9 MB) in memory, and that many report buffers, plus 4 for reports still being counted, are kept for reuse between windows. A VM building its report takes no turn.").Default("8").Int()
	c.reprobe = f("reprobe.interval", "How often an app without tracking support is probed again.").Default("30m").Duration()
	c.heldRetry = f("held.retry", "On Android 9 to 13, how long the daemon keeps its connection to an app another debugger (Android Studio) holds waiting: the app's VM leaves it unread and takes it once the debugger lets go, and tracking then starts at once. Every new try would queue one more unread connection in the app, so keep it long.").Default("5m").Duration()
	c.waitingRetry = f("waiting.retry", "How long an app waiting for a debugger (it sent WAIT) is left alone before it is tried again.").Default("1m").Duration()
	c.retention = f("devices.retention", "How long a device gone from its adb server, or an app that exited or whose device left, is kept before it is forgotten with its counters, errors and series (serials such as wireless debugging's ip:port change on every reconnect). One that comes back later starts from zero.").Default("1h").Duration()
	c.maxGone = f("devices.max-gone", "Gone devices kept within --devices.retention, with their apps and series; past this the longest gone are forgotten at once.").Default("64").Int()
	c.turnOffOrphans = f("orphans.turn-off", "Turn allocation tracking off in apps the package filters exclude when it was found left on (by an earlier run with wider filters; no VM turns it off when its client leaves). Without it such apps are counted in alloctrack_device_orphaned_trackers and left alone.").Bool()
	c.shutdownTimeout = f("shutdown.timeout", "On SIGINT/SIGTERM, how long to wait while every app's tracking is turned off. A second signal exits at once.").Default("10s").Duration()
	c.hpRotate = f("heapprofd.rotate", "How long one perfetto session of a device runs before the next replaces it, which bounds its trace file and heapprofd's own memory on the device. The switch leaves a gap of about one stop and start (see docs/heapprofd-devices.md).").Default("30m").Duration()
	c.hpMaxFile = f("heapprofd.max-file-size", "Bound of a session's trace file on the device (max_file_size_bytes): the tracing service ends the session there, and the next one starts.").Default("256MiB").Bytes()
	c.dumpDir = f("heapdump.dir", "Let the web view take heap dumps of apps (a button on each app's page; POST /api/v1/apps/SERIAL/PACKAGE/heapdump) and keep each in a directory here. A dump freezes the app while it is written, so none is taken unless asked; the web config's authentication applies. Off by default.").PlaceHolder("DIR").String()
	c.dumpNoAuth = f("heapdump.no-auth", "Allow --heapdump.dir without basic auth users in --web.config.file: anyone who reaches the web port may then take heap dumps.").Bool()
	c.dumpTimeout = f("heapdump.timeout", "How long a heap dump may take, from am dumpheap to the pulled file.").Default("5m").Duration()
	c.simulate = f("simulate", "Serve a simulated farm instead of real devices: an in-process adb server with simulated devices and apps (its control API is at /sim/devices).").Bool()
	c.simDevices = f("simulate.devices", "Simulated devices (with --simulate).").Default("3").Int()
	c.simApps = f("simulate.apps", "Simulated apps per device (with --simulate).").Default("2").Int()
	c.simRate = f("simulate.rate", "Allocations per second of each simulated app (with --simulate).").Default("500").Float64()
	return c
}

func (c *serveCmd) validate() error {
	if err := c.session.validate(); err != nil {
		return err
	}
	switch {
	case *c.topClasses < 1 || *c.topSites < 1:
		return fmt.Errorf("--top.classes and --top.sites must be at least 1")
	case *c.topExpiry < 0:
		return fmt.Errorf("--top.expiry must not be negative")
	case *c.reprobe <= 0 || *c.shutdownTimeout <= 0 || *c.heldRetry <= 0 || *c.waitingRetry <= 0 || *c.retention <= 0:
		return fmt.Errorf("timeouts and intervals must be positive")
	case *c.reportsPerDev < 1:
		return fmt.Errorf("--reports.per-device must be at least 1")
	case *c.maxGone < 1:
		return fmt.Errorf("--devices.max-gone must be at least 1, got %d", *c.maxGone)
	case *c.hpRotate < *c.session.window:
		return fmt.Errorf("--heapprofd.rotate must be at least --window (%v), got %v", *c.session.window, *c.hpRotate)
	case *c.hpMaxFile < 64<<10:
		return fmt.Errorf("--heapprofd.max-file-size must be at least 64KiB, got %v", *c.hpMaxFile)
	case *c.reportsFlight < 1:
		return fmt.Errorf("--reports.in-flight must be at least 1")
	case *c.simulate && (*c.simDevices < 1 || *c.simApps < 0 || *c.simRate < 0):
		return fmt.Errorf("--simulate.devices must be at least 1, --simulate.apps and --simulate.rate not negative")
	case *c.dumpTimeout <= 0:
		return fmt.Errorf("--heapdump.timeout must be positive")
	case *c.dumpDir != "" && !*c.dumpNoAuth && !c.basicAuth():
		return fmt.Errorf("--heapdump.dir lets whoever reaches the web port freeze apps with heap dumps: give users in --web.config.file (basic_auth_users), or --heapdump.no-auth to allow it without")
	}
	return nil
}

// basicAuth tells whether the web config file names basic auth users.
func (c *serveCmd) basicAuth() bool {
	cfg, ok := c.webConfig()
	return ok && len(cfg.Users) > 0
}

func (c *serveCmd) run(stderr io.Writer) int {
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "alloctrack serve: %v\n", err)
		return exitUsage
	}
	serials, err := supervisor.NewFilter(*c.serials, *c.serialsExclude)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack serve: --serial: %v\n", err)
		return exitUsage
	}
	packages, err := supervisor.NewFilter(*c.packages, *c.packagesExclude)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack serve: --package: %v\n", err)
		return exitUsage
	}
	log, slogger, err := c.log.newLogger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack serve: %v\n", err)
		return exitUsage
	}
	defer log.Sync()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	finished := make(chan struct{})
	defer close(finished) // ends the signal goroutine when run returns
	go func() {
		var s os.Signal
		select {
		case s = <-sigs:
		case <-finished:
			return
		}
		log.Info("signal received; turning tracking off in every app", zap.String("signal", s.String()), zap.Duration("timeout", *c.shutdownTimeout))
		stop()
		select {
		case <-sigs:
			log.Warn("second signal: exiting at once")
			os.Exit(exitFailure)
		case <-finished:
		}
	}()

	if *c.simulate {
		// A demo started by `go run` (the README's first command): go run
		// ends on SIGTERM without passing it on, so the daemon follows its
		// parent out instead of serving on alone.
		go watchParent(ctx, os.Getppid, time.Second, func() {
			select {
			case sigs <- syscall.SIGTERM:
			default:
			}
		})
	}

	extra := map[string]http.Handler{}
	var links []web.LandingLinks
	started := time.Now()
	addrs := *c.adbAddrs
	if *c.simulate {
		farm, addr, err := c.simulatedFarm(log)
		if err != nil {
			log.Error("starting the simulated adb server", zap.Error(err))
			return exitFailure
		}
		defer farm.Close()
		addrs = []string{addr}
		extra["/sim/"] = http.StripPrefix("/sim", farm.Handler())
		links = append(links, web.LandingLinks{Address: "sim/devices", Text: "Simulated devices (control API)"})
	}
	if len(addrs) == 0 {
		addrs = []string{adb.DefaultAddress()}
	}
	var sources []supervisor.Source
	for _, a := range addrs {
		sources = append(sources, source.New(a))
	}

	d := supervisor.NewDaemon(c.daemonConfig(serials, packages), sources, log)

	extra["/debug/pprof/allocs"] = exporter.ProfileHandler(d, started)
	extra["/debug/pprof/targets"] = exporter.TargetsHandler(d)
	links = append(links, web.LandingLinks{Address: "debug/pprof/targets", Text: "Profile targets (Alloy discovery.http)"})
	handler, err := c.handler(d, extra, links)
	if err != nil {
		log.Error("building the HTTP handler", zap.Error(err))
		return exitFailure
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	srvErr := make(chan error, 1)
	listeners, err := c.listen()
	if err != nil {
		log.Error("listening", zap.Error(err))
		return exitFailure
	}
	if listeners == nil {
		go func() { srvErr <- web.ListenAndServe(srv, c.web, slogger) }()
	} else {
		url := viewURL(listeners[0].Addr(), c.tlsEnabled())
		fmt.Fprintf(stderr, "alloctrack: web view at %s (metrics at %smetrics)\n", url, url)
		log.Info("web view", zap.String("url", url))
		go func() { srvErr <- web.ServeMultiple(listeners, srv, c.web, slogger) }()
	}

	memLimit := "GOMEMLIMIT"
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft limit sized for the reports the daemon may count at
		// once keeps the garbage between collections from doubling the
		// heap (GOGC=100) after a burst, at a small CPU cost.
		limit := defaultMemoryLimit(*c.reportsFlight)
		debug.SetMemoryLimit(limit)
		memLimit = fmt.Sprintf("%d MiB", limit>>20)
	}
	log.Info("starting alloctrack", zap.String("version", version.Info()), zap.Strings("adb_servers", addrs), zap.Duration("window", *c.session.window), zap.String("memory_limit", memLimit))
	daemonDone := make(chan struct{})
	go func() {
		d.Run(ctx)
		close(daemonDone)
	}()

	status := exitOK
	select {
	case err := <-srvErr:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server failed", zap.Error(err))
			status = exitFailure
		}
		stop()
	case <-ctx.Done():
	}
	select {
	case <-daemonDone:
		log.Info("every session ended; tracking is off")
	case <-time.After(*c.shutdownTimeout):
		log.Warn("shutdown timeout: some apps may still have tracking on", zap.Duration("timeout", *c.shutdownTimeout))
		status = exitFailure
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	srv.Shutdown(sctx)
	cancel()
	return status
}

// simulatedFarm starts --simulate's farm behind an adb server of its own
// and returns its address.
func (c *serveCmd) simulatedFarm(log *zap.Logger) (*sim.Farm, string, error) {
	farm := sim.NewFarm(sim.FarmConfig{
		Devices: *c.simDevices, AppsPerDevice: *c.simApps,
		APIs:     []int{30, 28, 31},
		Workload: simWorkload(*c.simRate),
	})
	a, err := farm.ServeHost("127.0.0.1:0")
	if err != nil {
		farm.Close()
		return nil, "", err
	}
	log.Info("simulated farm", zap.String("adb_server", a.String()), zap.Int("devices", *c.simDevices), zap.Int("apps_per_device", *c.simApps))
	return farm, a.String(), nil
}

// daemonConfig is the supervisor's config the flags give.
func (c *serveCmd) daemonConfig(serials, packages supervisor.Filter) supervisor.DaemonConfig {
	scfg := c.session.ddmConfig()
	// On a stop, a report already asked for is awaited, then tracking
	// turned off, each within half the shutdown timeout: old devices (4 KiB
	// adbd payloads) take seconds to move one.
	scfg.DisableTimeout = *c.shutdownTimeout / 2
	return supervisor.DaemonConfig{
		Serials: serials, Packages: packages,
		Session:          scfg,
		Aggregate:        alloctrack.AggregateConfig{TopClasses: *c.topClasses, TopSites: *c.topSites, Expiry: *c.topExpiry},
		ReportsPerDevice: *c.reportsPerDev,
		ReportsInFlight:  *c.reportsFlight,
		Reprobe:          *c.reprobe,
		HeldRetry:        *c.heldRetry,
		WaitingRetry:     *c.waitingRetry,
		Retention:        *c.retention,
		MaxGone:          *c.maxGone,
		TurnOffOrphans:   *c.turnOffOrphans,
		Backend:          *c.session.backend,
		Heapprofd: heapprofd.Config{
			SamplingInterval: *c.session.hpInterval, StopTimeout: *c.shutdownTimeout,
			Rotate: *c.hpRotate, MaxFileBytes: uint64(*c.hpMaxFile),
		},
	}
}

// handler serves the metrics, the web view and extra's paths, with links
// to the landing page's.
func (c *serveCmd) handler(d *supervisor.Daemon, extra map[string]http.Handler, links []web.LandingLinks) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		versioncollector.NewCollector("alloctrack"),
		// The default Go metrics, plus the heap live after the last
		// collection: RSS and the heap goal move with the collector's
		// timing, the live heap with what the daemon holds.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	var viewLinks [][2]string
	for _, l := range links {
		viewLinks = append(viewLinks, [2]string{l.Address, l.Text})
	}
	vcfg := webview.Config{Version: version.Info(), Links: viewLinks, Refresh: min(*c.session.window, 5*time.Second)}
	if *c.dumpDir != "" {
		vcfg.Links = append(vcfg.Links, [2]string{"heapdumps", "Heap dumps"})
		dumper, err := newServeDumper(d, *c.dumpDir, *c.dumpTimeout, reg)
		if err != nil {
			return nil, err
		}
		vcfg.HeapDumps = &webview.HeapDumps{Dir: *c.dumpDir, Take: dumper.take}
	}
	view, err := webview.New(d, vcfg)
	if err != nil {
		return nil, fmt.Errorf("building the web view: %w", err)
	}
	return exporter.NewHandler(reg, exporter.HandlerConfig{Version: version.Info(), Counts: exporter.NewCollector(d), Ready: d.Ready, Extra: extra, Root: view})
}

// defaultMemoryLimit is the soft memory limit serve sets unless GOMEMLIMIT
// is given. Report buffers are memory maps of their own, outside the Go
// heap (jdwp.Buffers), so the limit covers the rest: 48 MiB for
// everything but reports, and 4 MiB for every report the daemon may parse
// and count at once (its entry array, 1 MiB at most, and the counting's
// tables): one per report in flight and 4 more, as many as report
// buffers are kept (supervisor.DaemonConfig.ReportBuffers). 96 MiB with
// the default --reports.in-flight of 8.
func defaultMemoryLimit(inFlight int) int64 {
	return (48 + 4*int64(inFlight+4)) << 20
}

func simWorkload(rate float64) sim.Workload {
	w := sim.DefaultWorkload()
	w.Rate = rate
	return w
}

// listen opens the TCP listeners of --web.listen-address, so that the
// address actually bound (port 0 included) can be printed; nil when
// exporter-toolkit must listen itself (systemd sockets, vsock).
func (c *serveCmd) listen() ([]net.Listener, error) {
	if *c.web.WebSystemdSocket {
		return nil, nil
	}
	for _, a := range *c.web.WebListenAddresses {
		if strings.HasPrefix(a, "vsock://") {
			return nil, nil
		}
	}
	var ls []net.Listener
	for _, a := range *c.web.WebListenAddresses {
		l, err := net.Listen("tcp", a)
		if err != nil {
			for _, o := range ls {
				o.Close()
			}
			return nil, fmt.Errorf("--web.listen-address %s: %w", a, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// webConfig reads the web config file, if any and readable
// (exporter-toolkit reads it again itself, and says what is wrong).
func (c *serveCmd) webConfig() (web.Config, bool) {
	var cfg web.Config
	if *c.web.WebConfigFile == "" {
		return cfg, false
	}
	b, err := os.ReadFile(*c.web.WebConfigFile)
	if err != nil || yaml.Unmarshal(b, &cfg) != nil {
		return cfg, false
	}
	return cfg, true
}

// tlsEnabled tells whether the web config file turns TLS on.
func (c *serveCmd) tlsEnabled() bool {
	cfg, ok := c.webConfig()
	return ok && cfg.TLSConfig.IsEnabled()
}

// viewURL is the address to open in a browser: unspecified hosts become
// localhost.
func viewURL(a net.Addr, tls bool) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return scheme + "://" + a.String() + "/"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/"
}

// watchParent calls gone once the process's parent is no longer the one
// it started under (it exited, and the process was handed to another),
// looking every interval; it returns then, or when ctx ends.
func watchParent(ctx context.Context, ppid func() int, every time.Duration, gone func()) {
	first := ppid()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ppid() != first {
			gone()
			return
		}
	}
}
