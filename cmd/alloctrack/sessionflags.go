package main

import (
	"fmt"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
)

// sessionFlags are the flags serve and capture share: how an app is
// watched, and how a DDM session paces its windows.
type sessionFlags struct {
	window, windowMin             *time.Duration
	requestTimeout, reportTimeout *time.Duration
	backend                       *string
	hpInterval                    *uint64
}

func addSessionFlags(cmd *kingpin.CmdClause) *sessionFlags {
	f := cmd.Flag
	return &sessionFlags{
		window:         f("window", "Length of a window: how often each app's report is fetched (DDM) or its heapprofd dumps are read. Shorter windows stall the app less per report.").Default("10s").Duration(),
		windowMin:      f("window.min", "Shortest window after reports overflow (65,535 entries, or the device's dalvik.vm.recentAllocMax); default 3s, or --window if shorter. A window is never shorter than 20 report round trips: each costs the app its round trip, blind and partly stalled.").Duration(),
		requestTimeout: f("request.timeout", "Timeout of the JDWP handshake, HELO, and the REAQ probe (no answer: tracking unsupported, Android 12+).").Default("5s").Duration(),
		reportTimeout:  f("report.timeout", "Timeout of a REAL (allocation report) request.").Default("30s").Duration(),
		backend: enum(f("backend", "How apps are watched: auto (the VM's allocation tracker over JDWP on devices below API 31, perfetto's heapprofd sampling from API 31, Android 12, on), ddm (the allocation tracker; Android 12+ apps show as unsupported), or heapprofd (heapprofd sampling). Heapprofd numbers are samples and estimates; see the README."),
			"backend", alloctrack.BackendAuto, alloctrack.BackendDDM, alloctrack.BackendAuto, alloctrack.BackendHeapprofd),
		hpInterval: f("heapprofd.sampling-interval", "Mean bytes allocated between two heapprofd samples. 1 samples every allocation: exact counts, at the cost of a stack unwind in the app on every allocation, which slows an allocation-heavy app many times over.").Default("4096").Uint64(),
	}
}

// validate checks the shared flags' values.
func (s *sessionFlags) validate() error {
	switch {
	case *s.window <= 0:
		return fmt.Errorf("--window must be positive, got %v", *s.window)
	case *s.windowMin < 0 || *s.windowMin > *s.window:
		return fmt.Errorf("--window.min must be positive and at most --window (%v), got %v", *s.window, *s.windowMin)
	case *s.requestTimeout <= 0 || *s.reportTimeout <= 0:
		return fmt.Errorf("--request.timeout and --report.timeout must be positive")
	case *s.hpInterval < 1:
		return fmt.Errorf("--heapprofd.sampling-interval must be at least 1 byte")
	}
	return nil
}

// ddmConfig is the DDM sessions' config the flags give (the rest default).
func (s *sessionFlags) ddmConfig() ddm.Config {
	return ddm.Config{Window: *s.window, MinWindow: *s.windowMin, RequestTimeout: *s.requestTimeout, ReportTimeout: *s.reportTimeout}
}

// heapprofdFor tells whether an app on a device of API level api is
// watched with heapprofd.
func (s *sessionFlags) heapprofdFor(api int) bool {
	return *s.backend == alloctrack.BackendHeapprofd || *s.backend == alloctrack.BackendAuto && api >= alloctrack.APIHeapprofd
}
