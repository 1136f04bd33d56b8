package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/alloctrack/alloctrack/internal/xsrf"
)

// AppView is an app as the control API shows it.
type AppView struct {
	PID      int        `json:"pid"`
	Package  string     `json:"package"`
	API      int        `json:"api"`
	Alive    bool       `json:"alive"`
	Tracking bool       `json:"tracking"`
	Rate     float64    `json:"rate"`
	Depth    int        `json:"depth"`
	Tracked  uint64     `json:"tracked_allocations"`
	Reported uint64     `json:"reported_allocations"`
	Windows  int        `json:"windows"`
	NonDDM   int        `json:"non_ddm_commands"`
	Faults   FaultsView `json:"faults"`
}

// FaultsView is Faults in JSON, latency as a Go duration string.
type FaultsView struct {
	Latency          string `json:"latency,omitempty"`
	DebuggerAttached bool   `json:"debugger_attached,omitempty"`
	HangREAL         int    `json:"hang_real,omitempty"`
	DropREAL         int    `json:"drop_real,omitempty"`
	CorruptREAL      int    `json:"corrupt_real,omitempty"`
	TruncateREAL     int    `json:"truncate_real,omitempty"`
	// Android 12+ apps: another tool's heapprofd session holds the app;
	// the next N dumps overrun the buffer, or hit a guardrail.
	ForeignProfiler    bool `json:"foreign_profiler,omitempty"`
	HeapprofdOverrun   int  `json:"heapprofd_overrun,omitempty"`
	HeapprofdGuardrail int  `json:"heapprofd_guardrail,omitempty"`
}

// DeviceView is a device as the control API shows it.
type DeviceView struct {
	Serial string    `json:"serial"`
	API    int       `json:"api"`
	Model  string    `json:"model"`
	Apps   []AppView `json:"apps"`
}

func viewApp(vm *VM) AppView {
	st := vm.Stats()
	f := vm.Faults()
	cfg := vm.Config()
	v := AppView{
		PID: cfg.PID, Package: cfg.Package, API: cfg.API, Alive: vm.Alive(), Tracking: st.TrackingOn,
		Rate: cfg.Workload.Rate, Depth: cfg.Depth,
		Tracked: vm.TotalTracked().Total.Allocations, Reported: vm.TotalReported().Total.Allocations,
		Windows: st.WindowsEnded, NonDDM: st.NonDDM,
		Faults: FaultsView{DebuggerAttached: f.DebuggerAttached, HangREAL: f.HangREAL, DropREAL: f.DropREAL,
			CorruptREAL: f.CorruptREAL, TruncateREAL: f.TruncateREAL,
			ForeignProfiler: f.ForeignProfiler, HeapprofdOverrun: f.HeapprofdOverrun, HeapprofdGuardrail: f.HeapprofdGuardrail},
	}
	if f.Latency > 0 {
		v.Faults.Latency = f.Latency.String()
	}
	return v
}

// controlIndex is what GET / answers: the control API's endpoints.
const controlIndex = `The simulated farm's control API (paths below this one):

GET    devices                                   devices and apps (JSON)
POST   devices/{serial}/apps                     start an app: {"package":…,"api":…,"rate":…,"depth":…,"not_debuggable":…,"profileable":…,"broken_unwind":…}
DELETE devices/{serial}/apps/{pid}               kill an app
POST   devices/{serial}/apps/{pid}/restart       restart it with a new pid
PUT    devices/{serial}/apps/{pid}/faults        set faults
POST   devices/{serial}/disconnect               pull the cable
POST   devices/{serial}/reconnect                plug it back
POST   devices/{serial}/suites                   install a seeded test suite: {"test_package":…,"target":…,"tests":…,"seed":…,…} or {"orchestrator":true}
GET    devices/{serial}/runs                     instrumentation runs and each test's true allocations (JSON)

Every POST, PUT and DELETE needs the header X-Alloctrack-Request (any value).
`

// Handler is the farm's control API (GET / lists it):
//
//	GET    /devices                                   devices and apps
//	POST   /devices/{serial}/apps                     start an app: {"package":…,"api":…,"rate":…,"depth":…,"not_debuggable":…,"profileable":…,"broken_unwind":…}
//	DELETE /devices/{serial}/apps/{pid}               kill an app
//	POST   /devices/{serial}/apps/{pid}/restart       restart it with a new pid
//	PUT    /devices/{serial}/apps/{pid}/faults        set faults (FaultsView)
//	POST   /devices/{serial}/disconnect               pull the cable
//	POST   /devices/{serial}/reconnect                plug it back
//
// Every request but a GET needs the header xsrf.Header, so that a page
// of another site cannot change the farm through a browser.
func (f *Farm) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, controlIndex)
	})
	mux.HandleFunc("GET /devices", func(w http.ResponseWriter, r *http.Request) {
		var out []DeviceView
		for _, d := range f.Devices() {
			dv := DeviceView{Serial: d.Serial(), API: d.Config().API, Model: d.Config().Model, Apps: []AppView{}}
			for _, vm := range d.VMs() {
				dv.Apps = append(dv.Apps, viewApp(vm))
			}
			out = append(out, dv)
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /devices/{serial}/apps", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Package string  `json:"package"`
			API     int     `json:"api"`
			Rate    float64 `json:"rate"`
			Depth   int     `json:"depth"`
			Seed    uint64  `json:"seed"`
			// Android 12+: a release build (not in track-jdwp), profileable
			// or not; the ART unwinding bug.
			NotDebuggable bool `json:"not_debuggable"`
			Profileable   bool `json:"profileable"`
			BrokenUnwind  bool `json:"broken_unwind"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		if req.Package == "" {
			writeError(w, http.StatusBadRequest, errors.New("package is required"))
			return
		}
		wl := f.cfg.Workload
		if req.Rate > 0 {
			wl.Rate = req.Rate
		}
		if req.Seed != 0 {
			wl.Seed = req.Seed
		}
		vm, err := f.AddApp(r.PathValue("serial"), AppConfig{Package: req.Package, API: req.API, Depth: req.Depth, Workload: wl,
			NotDebuggable: req.NotDebuggable, Profileable: req.Profileable, BrokenUnwind: req.BrokenUnwind})
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusCreated, viewApp(vm))
	})
	mux.HandleFunc("DELETE /devices/{serial}/apps/{pid}", func(w http.ResponseWriter, r *http.Request) {
		pid, ok := pathPID(w, r)
		if !ok {
			return
		}
		if err := f.KillApp(r.PathValue("serial"), pid); err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /devices/{serial}/apps/{pid}/restart", func(w http.ResponseWriter, r *http.Request) {
		pid, ok := pathPID(w, r)
		if !ok {
			return
		}
		vm, err := f.RestartApp(r.PathValue("serial"), pid)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, viewApp(vm))
	})
	mux.HandleFunc("PUT /devices/{serial}/apps/{pid}/faults", func(w http.ResponseWriter, r *http.Request) {
		pid, ok := pathPID(w, r)
		if !ok {
			return
		}
		var fv FaultsView
		if !readJSON(w, r, &fv) {
			return
		}
		var faults Faults
		if fv.Latency != "" {
			d, err := time.ParseDuration(fv.Latency)
			if err != nil || d < 0 {
				writeError(w, http.StatusBadRequest, fmt.Errorf("latency %q: not a duration such as 20ms", fv.Latency))
				return
			}
			faults.Latency = d
		}
		faults.DebuggerAttached, faults.HangREAL, faults.DropREAL = fv.DebuggerAttached, fv.HangREAL, fv.DropREAL
		faults.CorruptREAL, faults.TruncateREAL = fv.CorruptREAL, fv.TruncateREAL
		faults.ForeignProfiler, faults.HeapprofdOverrun, faults.HeapprofdGuardrail = fv.ForeignProfiler, fv.HeapprofdOverrun, fv.HeapprofdGuardrail
		d := f.Device(r.PathValue("serial"))
		if d == nil {
			writeError(w, http.StatusNotFound, fmt.Errorf("%w: %q", ErrNoDevice, r.PathValue("serial")))
			return
		}
		vm := d.VM(pid)
		if vm == nil {
			writeError(w, http.StatusNotFound, fmt.Errorf("%w: pid %d", ErrNoApp, pid))
			return
		}
		vm.SetFaults(faults)
		writeJSON(w, http.StatusOK, viewApp(vm))
	})
	mux.HandleFunc("POST /devices/{serial}/disconnect", func(w http.ResponseWriter, r *http.Request) {
		if err := f.Disconnect(r.PathValue("serial")); err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /devices/{serial}/reconnect", func(w http.ResponseWriter, r *http.Request) {
		if err := f.Reconnect(r.PathValue("serial")); err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	f.suiteRoutes(mux) // control_suites.go
	return xsrf.Guard(mux)
}

func pathPID(w http.ResponseWriter, r *http.Request) (int, bool) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 0 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("pid %q is not a positive number", r.PathValue("pid")))
		return 0, false
	}
	return pid, true
}

func statusOf(err error) int {
	if errors.Is(err, ErrNoDevice) || errors.Is(err, ErrNoApp) {
		return http.StatusNotFound
	}
	return http.StatusBadRequest
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
