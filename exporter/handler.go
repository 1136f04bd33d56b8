package exporter

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/alloctrack/alloctrack/internal/xsrf"
)

// HandlerConfig configures the HTTP endpoints.
type HandlerConfig struct {
	Version string
	// Counts, when set, is the daemon's collector, served on /metrics
	// next to reg (which must not hold it): its class and site families
	// are written as cached text (see sites.go), the rest through
	// client_golang.
	Counts *Collector
	// Ready reports readiness for /-/ready (nil: always ready).
	Ready func() bool
	// Extra routes (pprof endpoints, for instance), by pattern.
	Extra map[string]http.Handler
	// ExtraLinks are added to the landing page.
	ExtraLinks []web.LandingLinks
	// Root, when set, serves / and every path not served otherwise (the
	// web view) instead of the landing page.
	Root http.Handler
}

// NewHandler serves /metrics from reg, /-/healthy, /-/ready and a landing
// page at /. Every request that may change something (any method but GET,
// HEAD and OPTIONS, on any route) needs the header xsrf.Header.
func NewHandler(reg *prometheus.Registry, cfg HandlerConfig) (http.Handler, error) {
	mux, err := newMux(reg, cfg)
	if err != nil {
		return nil, err
	}
	return xsrf.Guard(mux), nil
}

func newMux(reg *prometheus.Registry, cfg HandlerConfig) (*http.ServeMux, error) {
	mux := http.NewServeMux()
	if cfg.Counts != nil {
		mux.Handle("/metrics", &metricsHandler{reg: reg, c: cfg.Counts})
	} else {
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			ErrorHandling:     promhttp.ContinueOnError,
			EnableOpenMetrics: true,
			Registry:          reg,
		}))
	}
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "Healthy")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Ready != nil && !cfg.Ready() {
			http.Error(w, "Not ready: no adb server has answered yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "Ready")
	})
	for p, h := range cfg.Extra {
		mux.Handle(p, h)
	}
	if cfg.Root != nil {
		mux.Handle("/", cfg.Root)
		return mux, nil
	}
	links := append([]web.LandingLinks{
		{Address: "metrics", Text: "Metrics"},
		{Address: "-/healthy", Text: "Health"},
		{Address: "-/ready", Text: "Readiness"},
	}, cfg.ExtraLinks...)
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        "alloctrack",
		Description: "Java heap allocations of debuggable Android apps, from the VM's allocation tracker over adb and JDWP/DDM",
		Version:     cfg.Version,
		Links:       links,
		Profiling:   "false", // no Go profiling endpoints; /debug/pprof/allocs is the apps' profile
	})
	if err != nil {
		return nil, err
	}
	mux.Handle("/", landing)
	return mux, nil
}
