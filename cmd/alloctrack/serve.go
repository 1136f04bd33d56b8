package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/coreos/go-systemd/v22/activation"
	"github.com/mdlayher/vsock"
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
	hpSilence       *time.Duration
	hpMaxFile       *units.Base2Bytes
	dumpDir         *string
	dumpTimeout     *time.Duration
	dumpNoAuth      *bool
	simulate        *bool
	simDevices      *int
	simApps         *int
	simRate         *float64
	simControl      *string
	testsFollow     *bool
	testsRecent     *int
	testsDump       *time.Duration
	http            exporter.ServerConfig
}

func newServeCmd(app *kingpin.Application) *serveCmd {
	c := &serveCmd{cmd: app.Command("serve", "Run the daemon: follow devices and debuggable apps through adb servers, track allocations in windows, export Prometheus metrics.")}
	f := c.cmd.Flag
	c.web = kingpinflag.AddFlags(c.cmd, DefaultListenAddress)
	f("web.read-header-timeout", "How long a client may take to send a request's headers; a connection that sends nothing is closed then.").Default("10s").DurationVar(&c.http.ReadHeaderTimeout)
	f("web.read-timeout", "How long a client may take to send a whole request, headers and body (the handler's work afterwards is not bounded by it).").Default("1m").DurationVar(&c.http.ReadTimeout)
	f("web.write-timeout", "How long each part of a response may wait for the client to take it: a client that stops reading is cut, a long download that keeps moving is not.").Default("1m").DurationVar(&c.http.WriteTimeout)
	f("web.idle-timeout", "How long a kept-alive connection may wait idle for its next request.").Default("2m").DurationVar(&c.http.IdleTimeout)
	f("web.max-connections", "Connections served at once per listening address; more wait to be accepted until one closes.").Default("256").IntVar(&c.http.MaxConnections)
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
	c.hpSilence = f("heapprofd.silence", "How long an app may send no sample in a device's perfetto session before that session is ended early and the next started: only a session's stop makes heapprofd say that another heapprofd session (Android Studio's, say) holds the app, which is then shown held; an idle app stays tracking. Each app's next such check waits twice as long, up to --heapprofd.rotate. Looked at once a window. 0: never (held apps show only at rotations).").Default("30s").Duration()
	c.hpMaxFile = f("heapprofd.max-file-size", "Bound of a session's trace file on the device (max_file_size_bytes): the tracing service ends the session there, and the next one starts.").Default("256MiB").Bytes()
	c.dumpDir = f("heapdump.dir", "Let the web view take heap dumps of apps (a button on each app's page; POST /api/v1/apps/SERIAL/PACKAGE/heapdump) and keep each in a directory here. A dump freezes the app while it is written, so none is taken unless asked; the web config's authentication applies. Off by default.").PlaceHolder("DIR").String()
	c.dumpNoAuth = f("heapdump.no-auth", "Allow --heapdump.dir without basic auth users in --web.config.file: anyone who reaches the web port may then take heap dumps.").Bool()
	c.dumpTimeout = f("heapdump.timeout", "How long a heap dump may take, from am dumpheap to the pulled file.").Default("5m").Duration()
	c.testsFollow = f("tests.follow-logcat", "Follow instrumentation runs on every device: read the test runner's TestRunner lines in their logcat and split each window (DDM, Android 4.4-11: exact) or heapprofd dump (Android 12+: estimates, see --tests.dump-interval) of a process that runs tests among its tests, shown on the app's page and in alloctrack_test_info and alloctrack_tests_total (docs/test-runs.md). --no-tests.follow-logcat runs no logcat.").Default("true").Bool()
	c.testsDump = f("tests.dump-interval", "On Android 12+ (heapprofd), how often heapprofd dumps while a followed run is open on the device (and for a minute after): each test boundary may be off by this much. The device's session is restarted to change it, once when a run opens and once after. Shorter costs the device more (each dump rewrites every call stack the app holds: about 96 KB/s at 250ms for 2,000 stacks; docs/test-runs.md). At least 100ms.").Default("250ms").Duration()
	c.testsRecent = f("tests.recent", "Finished tests each app keeps, with their figures, for its page (at most 10000).").Default("50").Int()
	c.simulate = f("simulate", "Serve a simulated farm instead of real devices: an in-process adb server with simulated devices and apps (its control API on --simulate.control-address; read-only at /sim/devices).").Bool()
	c.simDevices = f("simulate.devices", "Simulated devices (with --simulate; as alloctrack sim's --devices).").Default(strconv.Itoa(defaultFarm.Devices)).Int()
	c.simApps = f("simulate.apps", "Simulated apps per device (with --simulate; as alloctrack sim's --apps).").Default(strconv.Itoa(defaultFarm.AppsPerDevice)).Int()
	c.simRate = f("simulate.rate", "Allocations per second of each simulated app (with --simulate; as alloctrack sim's --rate).").Default(strconv.FormatFloat(defaultFarm.Workload.Rate, 'g', -1, 64)).Float64()
	c.simControl = f("simulate.control-address", "Where the simulated farm's control API takes changes (start, kill and restart apps, faults, cables), printed at start (with --simulate). A loopback address, unless the web config file names basic auth users.").Default("127.0.0.1:0").String()
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
	case *c.testsDump < 100*time.Millisecond:
		return fmt.Errorf("--tests.dump-interval must be at least 100ms (heapprofd's least), not %v", *c.testsDump)
	case *c.testsRecent < 1 || *c.testsRecent > 10000:
		return fmt.Errorf("--tests.recent must be 1 to 10000, not %d", *c.testsRecent)
	case *c.maxGone < 1:
		return fmt.Errorf("--devices.max-gone must be at least 1, got %d", *c.maxGone)
	case *c.hpRotate < *c.session.window:
		return fmt.Errorf("--heapprofd.rotate must be at least --window (%v), got %v", *c.session.window, *c.hpRotate)
	case *c.hpSilence < 0:
		return fmt.Errorf("--heapprofd.silence must not be negative, got %v", *c.hpSilence)
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
	case c.http.ReadHeaderTimeout < 0 || c.http.ReadTimeout < 0 || c.http.WriteTimeout < 0 || c.http.IdleTimeout < 0 || c.http.MaxConnections < 0:
		return fmt.Errorf("--web.*-timeout and --web.max-connections must not be negative (0: no bound)")
	case *c.simulate && !loopback(*c.simControl) && !c.basicAuth():
		return fmt.Errorf("--simulate.control-address %s: the control API starts, kills and restarts apps; serve it on a loopback address (127.0.0.1, ::1, localhost), or give users in --web.config.file (basic_auth_users)", *c.simControl)
	}
	return nil
}

// loopback tells whether addr (host:port) names only loopback addresses.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// basicAuth tells whether the web config file names basic auth users.
func (c *serveCmd) basicAuth() bool {
	cfg, ok := c.webConfig()
	return ok && len(cfg.Users) > 0
}

func (c *serveCmd) run(stderr io.Writer) int {
	serials, packages, code := c.filters(stderr)
	if code != exitOK {
		return code
	}
	log, slogger, err := c.log.newLogger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack serve: %v\n", err)
		return exitUsage
	}
	defer log.Sync()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	defer onSignals(log, *c.shutdownTimeout, stop)()
	if pid, ok := goRunParent(); ok {
		go followGoRun(ctx, log, pid, os.Getppid, time.Second, stop)
	}
	w := &serveParts{extra: map[string]http.Handler{}, srvErr: make(chan error, 2), log: log, slogger: slogger, stderr: stderr}
	defer w.close()
	started := time.Now()
	addrs := *c.adbAddrs
	if *c.simulate {
		addr, ok := c.startSim(w)
		if !ok {
			return exitFailure
		}
		addrs = []string{addr}
	}
	if len(addrs) == 0 {
		addrs = []string{adb.DefaultAddress()}
	}
	var sources []supervisor.Source
	for _, a := range addrs {
		sources = append(sources, source.New(a))
	}
	d := supervisor.NewDaemon(c.daemonConfig(serials, packages), sources, log)
	if !c.startWeb(w, d, started) {
		return exitFailure
	}
	log.Info("starting alloctrack", zap.String("version", version.Info()), zap.Strings("adb_servers", addrs), zap.Duration("window", *c.session.window), zap.String("memory_limit", c.setMemoryLimit()))
	return c.serveUntil(ctx, stop, d, w)
}

// filters reads --serial and --package (with their excludes) after the
// other flags are checked.
func (c *serveCmd) filters(stderr io.Writer) (serials, packages supervisor.Filter, code int) {
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "alloctrack serve: %v\n", err)
		return serials, packages, exitUsage
	}
	serials, err := supervisor.NewFilter(*c.serials, *c.serialsExclude)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack serve: --serial: %v\n", err)
		return serials, packages, exitUsage
	}
	packages, err = supervisor.NewFilter(*c.packages, *c.packagesExclude)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack serve: --package: %v\n", err)
		return serials, packages, exitUsage
	}
	return serials, packages, exitOK
}

// serveParts is what serve started and stops at the end: its HTTP
// servers and the simulated farm, with the handlers and links the web
// page gets beside the daemon's own.
type serveParts struct {
	extra   map[string]http.Handler
	links   []web.LandingLinks
	servers []*http.Server
	farm    *sim.Farm
	srvErr  chan error // a server's end
	log     *zap.Logger
	slogger *slog.Logger
	stderr  io.Writer
}

func (w *serveParts) close() {
	shutdown(w.servers)
	if w.farm != nil {
		w.farm.Close()
	}
}

// startSim starts the simulated farm (--simulate) and its control API,
// and returns the simulated adb server's address.
func (c *serveCmd) startSim(w *serveParts) (string, bool) {
	f, addr, err := c.simulatedFarm(w.log)
	if err != nil {
		w.log.Error("starting the simulated adb server", zap.Error(err))
		return "", false
	}
	w.farm = f
	ctl, url, err := c.serveControl(f.Handler(), w.log, w.slogger, w.stderr, w.srvErr)
	if err != nil {
		w.log.Error("serving the simulator's control API", zap.Error(err))
		return "", false
	}
	w.servers = append(w.servers, ctl)
	w.extra["/sim/"] = http.StripPrefix("/sim", readOnly(f.Handler(), url))
	w.links = append(w.links, web.LandingLinks{Address: "sim/devices", Text: "Simulated devices"})
	return addr, true
}

// startWeb serves the daemon's pages, metrics and profiles.
func (c *serveCmd) startWeb(w *serveParts, d *supervisor.Daemon, started time.Time) bool {
	w.extra["/debug/pprof/allocs"] = exporter.ProfileHandler(d, started)
	w.extra["/debug/pprof/targets"] = exporter.TargetsHandler(d)
	w.links = append(w.links, web.LandingLinks{Address: "debug/pprof/targets", Text: "Profile targets (Alloy discovery.http)"})
	handler, err := c.handler(d, w.extra, w.links)
	if err != nil {
		w.log.Error("building the HTTP handler", zap.Error(err))
		return false
	}
	srv, err := c.serveWeb(handler, w.log, w.slogger, w.stderr, w.srvErr)
	if err != nil {
		w.log.Error("listening", zap.Error(err))
		return false
	}
	w.servers = append(w.servers, srv)
	return true
}

// setMemoryLimit sets a soft memory limit unless GOMEMLIMIT does, and
// says which applies.
func (c *serveCmd) setMemoryLimit() string {
	if os.Getenv("GOMEMLIMIT") != "" {
		return "GOMEMLIMIT"
	}
	// A soft limit sized for the reports the daemon may count at once
	// keeps the garbage between collections from doubling the heap
	// (GOGC=100) after a burst, at a small CPU cost.
	limit := defaultMemoryLimit(*c.reportsFlight)
	debug.SetMemoryLimit(limit)
	return fmt.Sprintf("%d MiB", limit>>20)
}

// serveUntil runs the daemon until ctx ends or a server fails, then waits
// up to --shutdown.timeout for every session to turn tracking off.
func (c *serveCmd) serveUntil(ctx context.Context, stop context.CancelFunc, d *supervisor.Daemon, w *serveParts) int {
	daemonDone := make(chan struct{})
	go func() {
		d.Run(ctx)
		close(daemonDone)
	}()
	status := exitOK
	select {
	case err := <-w.srvErr:
		if !errors.Is(err, http.ErrServerClosed) {
			w.log.Error("HTTP server failed", zap.Error(err))
			status = exitFailure
		}
		stop()
	case <-ctx.Done():
	}
	select {
	case <-daemonDone:
		w.log.Info("every session ended; tracking is off")
	case <-time.After(*c.shutdownTimeout):
		w.log.Warn("shutdown timeout: some apps may still have tracking on", zap.Duration("timeout", *c.shutdownTimeout))
		status = exitFailure
	}
	return status
}

// onSignals stops the daemon on the first SIGINT or SIGTERM, and exits at
// once on a second; the function it returns ends the watch.
func onSignals(log *zap.Logger, timeout time.Duration, stop func()) (end func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	finished := make(chan struct{})
	go func() {
		var s os.Signal
		select {
		case s = <-sigs:
		case <-finished:
			return
		}
		log.Info("signal received; turning tracking off in every app", zap.String("signal", s.String()), zap.Duration("timeout", timeout))
		stop()
		select {
		case <-sigs:
			log.Warn("second signal: exiting at once")
			os.Exit(exitFailure)
		case <-finished:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(finished)
	}
}

// shutdown ends the HTTP servers, giving requests under way 2 seconds.
func shutdown(servers []*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		s.Shutdown(ctx)
	}
}

// serveWeb serves h on --web.listen-address through exporter-toolkit (the
// web config's TLS and basic auth) within the --web.* bounds; the
// servers' end is sent to errs.
func (c *serveCmd) serveWeb(h http.Handler, log *zap.Logger, slogger *slog.Logger, stderr io.Writer, errs chan<- error) (*http.Server, error) {
	ls, tcp, err := c.listen()
	if err != nil {
		return nil, err
	}
	if tcp {
		url := viewURL(ls[0].Addr(), c.tlsEnabled())
		fmt.Fprintf(stderr, "alloctrack: web view at %s (metrics at %smetrics)\n", url, url)
		log.Info("web view", zap.String("url", url))
	}
	srv := exporter.NewServer(h, c.http)
	ls = exporter.LimitListeners(ls, c.http.MaxConnections)
	go func() { errs <- web.ServeMultiple(ls, srv, c.web, slogger) }()
	return srv, nil
}

// serveControl serves the simulated farm's control API, h, on
// --simulate.control-address (loopback unless basic auth protects it),
// as serveWeb serves the rest, and returns its URL.
func (c *serveCmd) serveControl(h http.Handler, log *zap.Logger, slogger *slog.Logger, stderr io.Writer, errs chan<- error) (*http.Server, string, error) {
	l, err := net.Listen("tcp", *c.simControl)
	if err != nil {
		return nil, "", fmt.Errorf("--simulate.control-address %s: %w", *c.simControl, err)
	}
	url := viewURL(l.Addr(), c.tlsEnabled())
	fmt.Fprintf(stderr, "alloctrack: simulator control API at %sdevices (it takes changes only there)\n", url)
	log.Info("simulator control API", zap.String("url", url))
	srv := exporter.NewServer(h, c.http)
	ls := exporter.LimitListeners([]net.Listener{l}, c.http.MaxConnections)
	go func() { errs <- web.Serve(ls[0], srv, c.web, slogger) }()
	return srv, url, nil
}

// readOnly serves GET and HEAD through h and refuses every change: the
// simulated farm takes those on its control address, ctl.
func readOnly(h http.Handler, ctl string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "the simulated farm takes changes only on its control address, "+ctl, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// simulatedFarm starts --simulate's farm behind an adb server of its own
// and returns its address.
func (c *serveCmd) simulatedFarm(log *zap.Logger) (*sim.Farm, string, error) {
	farm := sim.NewFarm(c.simFarmConfig())
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
		Tests:            supervisor.TestsConfig{Follow: *c.testsFollow, Recent: *c.testsRecent, DumpInterval: *c.testsDump},
		Heapprofd: heapprofd.Config{
			SamplingInterval: *c.session.hpInterval, StopTimeout: *c.shutdownTimeout,
			Rotate: *c.hpRotate, MaxFileBytes: uint64(*c.hpMaxFile), Silence: *c.hpSilence,
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

// simFarmConfig is the farm --simulate's flags ask for.
func (c *serveCmd) simFarmConfig() sim.FarmConfig {
	cfg := defaultFarm
	cfg.Devices, cfg.AppsPerDevice, cfg.APIs = *c.simDevices, *c.simApps, slices.Clone(defaultFarm.APIs)
	cfg.Workload.Rate = *c.simRate
	return cfg
}

// listen opens the listeners of --web.listen-address (TCP or vsock://),
// or takes systemd's (--web.systemd-socket), as exporter-toolkit would,
// so that they can be bounded and the address actually bound (port 0
// included) printed; tcp tells whether they are TCP listeners of ours.
func (c *serveCmd) listen() (ls []net.Listener, tcp bool, err error) {
	if *c.web.WebSystemdSocket {
		ls, err := activation.Listeners()
		if err == nil && len(ls) == 0 {
			err = errors.New("no socket activation file descriptors found")
		}
		if err != nil {
			return nil, false, fmt.Errorf("--web.systemd-socket: %w", err)
		}
		return ls, false, nil
	}
	tcp = true
	for _, a := range *c.web.WebListenAddresses {
		var l net.Listener
		if strings.HasPrefix(a, "vsock://") {
			tcp = false
			l, err = listenVsock(a)
		} else {
			l, err = net.Listen("tcp", a)
		}
		if err != nil {
			for _, o := range ls {
				o.Close()
			}
			return nil, false, fmt.Errorf("--web.listen-address %s: %w", a, err)
		}
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return nil, false, errors.New("no --web.listen-address")
	}
	return ls, tcp, nil
}

// listenVsock listens on a vsock://:PORT address.
func listenVsock(a string) (net.Listener, error) {
	u, err := url.Parse(a)
	if err != nil {
		return nil, err
	}
	_, p, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(p, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("port %q is not a number", p)
	}
	return vsock.Listen(uint32(port), nil)
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
