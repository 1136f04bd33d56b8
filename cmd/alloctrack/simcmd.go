package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alloctrack/alloctrack/exporter"
	"github.com/alloctrack/alloctrack/sim"
)

type simCmd struct {
	cmd       *kingpin.CmdClause
	log       *logFlags
	devices   *int
	apps      *int
	apis      *[]int
	rate      *float64
	sites     *int
	threads   *int
	skew      *float64
	depth     *int
	seed      *uint64
	listen    *string
	adbServer *string
	control   *string
}

func newSimCmd(app *kingpin.Application) *simCmd {
	c := &simCmd{cmd: app.Command("sim", "Serve simulated Android devices and debuggable apps: as adbd endpoints for a real adb server (--listen), or as a self-contained adb server (--adb-server).")}
	f := c.cmd.Flag
	c.log = addLogFlags(c.cmd)
	c.devices = f("devices", "Number of simulated devices.").Default(strconv.Itoa(defaultFarm.Devices)).Int()
	c.apps = f("apps", "Apps per device.").Default(strconv.Itoa(defaultFarm.AppsPerDevice)).Int()
	c.apis = f("api", "API level of the devices, used in turn; repeatable (31 and later simulate Android 12+: no allocation tracker over DDM, apps sampled through perfetto's heapprofd).").Default(apiStrings(defaultFarm.APIs)...).Ints()
	c.rate = f("rate", "Allocations per second of each app.").Default(strconv.FormatFloat(defaultFarm.Workload.Rate, 'g', -1, 64)).Float64()
	c.sites = f("sites", "Distinct allocation sites per app.").Default("200").Int()
	c.threads = f("threads", "Allocating threads per app.").Default("4").Int()
	c.skew = f("skew", "Zipf exponent over sites (> 1; higher is more skewed).").Default("1.2").Float64()
	c.depth = f("depth", "Recorded stack depth (16 by default; up to 128 on API 24+).").Default("16").Int()
	c.seed = f("seed", "Workload seed.").Default("1").Uint64()
	c.listen = f("listen", "Serve each device over the adbd wire protocol, device i on port PORT+i of HOST (HOST:PORT); attach with `adb connect`.").String()
	c.adbServer = f("adb-server", "Serve the devices through a simulated adb server on HOST:PORT.").String()
	c.control = f("control", "Serve the control API (add/remove apps, inject faults) on HOST:PORT, a loopback address: it takes changes without authentication.").Default("127.0.0.1:0").String()
	return c
}

// simControlHTTP bounds the control API's clients as serve's defaults do.
var simControlHTTP = exporter.ServerConfig{
	ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
	IdleTimeout: 2 * time.Minute, MaxConnections: 256,
}

func (c *simCmd) run(stdout, stderr io.Writer) int {
	if *c.listen == "" && *c.adbServer == "" {
		fmt.Fprintln(stderr, "alloctrack sim: give --listen HOST:PORT (adbd endpoints for a real adb server) and/or --adb-server HOST:PORT")
		return exitUsage
	}
	if *c.devices < 1 || *c.apps < 0 || *c.rate < 0 || *c.sites < 1 || *c.threads < 1 || *c.skew <= 1 || *c.depth < 1 || *c.depth > 128 {
		fmt.Fprintln(stderr, "alloctrack sim: need --devices ≥ 1, --apps ≥ 0, --rate ≥ 0, --sites ≥ 1, --threads ≥ 1, --skew > 1, 1 ≤ --depth ≤ 128")
		return exitUsage
	}
	if !loopback(*c.control) {
		fmt.Fprintf(stderr, "alloctrack sim: --control %s: the control API starts and kills apps without authentication; give a loopback address (127.0.0.1, ::1, localhost)\n", *c.control)
		return exitUsage
	}
	for _, api := range *c.apis {
		if api < 1 || api > 99 {
			fmt.Fprintf(stderr, "alloctrack sim: --api %d is not an Android API level\n", api)
			return exitUsage
		}
	}
	log, _, err := c.log.newLogger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack sim: %v\n", err)
		return exitUsage
	}
	defer log.Sync()

	farm := sim.NewFarm(c.farmConfig())
	defer farm.Close()

	if *c.adbServer != "" {
		a, err := farm.ServeHost(*c.adbServer)
		if err != nil {
			fmt.Fprintf(stderr, "alloctrack sim: --adb-server %s: %v\n", *c.adbServer, err)
			return exitFailure
		}
		_, port, _ := net.SplitHostPort(a.String())
		fmt.Fprintf(stdout, "adb server (simulated) on %s: ANDROID_ADB_SERVER_PORT=%s adb devices -l\n", a, port)
		if ds := farm.Devices(); len(ds) > 0 && len(ds[0].VMs()) > 0 {
			fmt.Fprintf(stdout, "capture one app: alloctrack capture --adb.address %s --serial %s --package %s --duration 30s --out capture/\n",
				a, ds[0].Serial(), ds[0].VMs()[0].ProcessName())
		}
	}
	if *c.listen != "" {
		host, port, err := net.SplitHostPort(*c.listen)
		p, perr := strconv.Atoi(port)
		if err != nil || perr != nil || p < 0 || p > 65535 {
			fmt.Fprintf(stderr, "alloctrack sim: --listen %q is not HOST:PORT\n", *c.listen)
			return exitUsage
		}
		addrs, err := farm.ServeAdbd(host, p)
		if err != nil {
			fmt.Fprintf(stderr, "alloctrack sim: --listen %s: %v\n", *c.listen, err)
			return exitFailure
		}
		for i, a := range addrs {
			fmt.Fprintf(stdout, "device %s (adbd) on %s: adb connect %s\n", farm.Devices()[i].Serial(), a, a)
		}
	}
	for _, d := range farm.Devices() {
		for _, vm := range d.VMs() {
			fmt.Fprintf(stdout, "  %s API %d: pid %d %s\n", d.Serial(), vm.Config().API, vm.PID(), vm.ProcessName())
		}
	}

	cl, err := net.Listen("tcp", *c.control)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack sim: --control %s: %v\n", *c.control, err)
		return exitFailure
	}
	srv := exporter.NewServer(farm.Handler(), simControlHTTP)
	go srv.Serve(exporter.LimitListeners([]net.Listener{cl}, simControlHTTP.MaxConnections)[0])
	fmt.Fprintf(stdout, "control API on http://%s/devices\n", cl.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info("stopping the simulator")
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	srv.Shutdown(sctx)
	cancel()
	return exitOK
}

// defaultFarm is the farm sim and serve --simulate make unless told
// otherwise: one definition, so that both show the same devices and apps
// (an Android 11, an Android 9 and an Android 12 device: DDM and
// heapprofd side by side).
var defaultFarm = sim.FarmConfig{Devices: 3, AppsPerDevice: 2, APIs: []int{30, 28, 31}, Workload: simWorkload(500), Depth: 16}

// simWorkload is the default workload at rate allocations per second.
func simWorkload(rate float64) sim.Workload {
	w := sim.DefaultWorkload()
	w.Rate = rate
	return w
}

func apiStrings(apis []int) []string {
	var s []string
	for _, a := range apis {
		s = append(s, strconv.Itoa(a))
	}
	return s
}

// farmConfig is the farm the flags ask for.
func (c *simCmd) farmConfig() sim.FarmConfig {
	cfg := defaultFarm
	cfg.Devices, cfg.AppsPerDevice, cfg.APIs, cfg.Depth = *c.devices, *c.apps, *c.apis, *c.depth
	w := &cfg.Workload
	w.Rate, w.Sites, w.Threads, w.Skew, w.Seed = *c.rate, *c.sites, *c.threads, *c.skew, *c.seed
	return cfg
}
