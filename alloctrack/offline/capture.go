package offline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/agentlog"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"

	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/ddms/hprof"

	"github.com/alloctrack/alloctrack/perfetto"
	"github.com/alloctrack/alloctrack/tialloc"
)

// CaptureMeta says what a capture is of.
type CaptureMeta struct {
	Serial  string `json:"serial"`
	Model   string `json:"model,omitempty"`
	API     int    `json:"api,omitempty"`
	Package string `json:"package"`
	PID     int    `json:"pid"`
	// AppVersion and AppVersionCode are the app's versionName and
	// versionCode as AppVersionSource read them ("" and 0: unknown).
	AppVersion       string `json:"app_version,omitempty"`
	AppVersionCode   int64  `json:"app_version_code,omitempty"`
	AppVersionSource string `json:"app_version_source,omitempty"`
	// APK is the APK file the version was read from, as named.
	APK string `json:"apk,omitempty"`
}

// SummaryClass and SummarySite are entries of a capture summary.
type (
	SummaryClass struct {
		Class       string `json:"class"`
		Allocations uint64 `json:"allocations"`
		Bytes       uint64 `json:"bytes"`
	}
	SummarySite struct {
		ID          string   `json:"site"`
		Class       string   `json:"class"`
		AppFrame    string   `json:"app_frame"`
		Frames      []string `json:"frames"`
		Allocations uint64   `json:"allocations"`
		Bytes       uint64   `json:"bytes"`
		// Heapprofd sites: allocations and bytes are estimates (rounded),
		// sampled_* what the traces held.
		Estimated          bool   `json:"estimated,omitempty"`
		SampledAllocations uint64 `json:"sampled_allocations,omitempty"`
		SampledBytes       uint64 `json:"sampled_bytes,omitempty"`
	}
)

// Summary is a capture's summary.json.
type Summary struct {
	CaptureMeta
	Start           time.Time      `json:"start"`
	End             time.Time      `json:"end"`
	DurationSeconds float64        `json:"duration_seconds"`
	Windows         int            `json:"windows"`
	Overflowed      int            `json:"overflowed_windows"`
	ParseErrors     int            `json:"parse_errors"`
	Allocations     uint64         `json:"allocations"`
	Bytes           uint64         `json:"bytes"`
	TopClasses      []SummaryClass `json:"top_classes"`
	TopSites        []SummarySite  `json:"top_sites"`
	Interrupted     bool           `json:"interrupted,omitempty"`
	Error           string         `json:"error,omitempty"`
	// RequestedSeconds is the duration the capture was asked to run
	// (--duration); 0 in captures older than the field.
	RequestedSeconds float64 `json:"requested_seconds,omitempty"`

	// Backend is how the app was watched: "ddm" ("" in captures older
	// than the field) or "heapprofd". A heapprofd capture is sampled:
	// Estimated is true, allocations and bytes (and the sites') are
	// estimates, rounded, and the sampled_* fields are what its trace
	// held, exactly. It has no classes.
	Backend             string `json:"backend,omitempty"`
	Estimated           bool   `json:"estimated,omitempty"`
	SampledAllocations  uint64 `json:"sampled_allocations,omitempty"`
	SampledBytes        uint64 `json:"sampled_bytes,omitempty"`
	SamplingInterval    uint64 `json:"sampling_interval_bytes,omitempty"`
	Dumps               int    `json:"dumps,omitempty"`
	ErrorStackSamples   uint64 `json:"error_stack_samples,omitempty"`
	UnknownStackSamples uint64 `json:"unknown_stack_samples,omitempty"`

	// Tests sums up an instrumentation run's tests (a test run's capture;
	// the tests themselves are in Tests.File).
	Tests *TestsSummary `json:"tests,omitempty"`
}

// TraceFile is the name of a heapprofd capture's raw trace.
const TraceFile = "trace.perfetto-trace"

// CaptureWriter writes a capture directory: each window's raw report as
// <n>.alloc (the bytes Android Studio saves), then summary.json and
// profile.pb.gz. Every file is written to a temporary name and renamed, so
// an interrupted capture leaves only whole files.
type CaptureWriter struct {
	dir   string
	meta  CaptureMeta
	start time.Time
	n     int
	sum   Summary
	tally *alloctrack.Tally
	prof  *alloctrack.ProfileBuilder
	trace *os.File // heapprofd captures: the raw trace
}

// NewCaptureWriter creates dir (and parents) and returns a writer into it.
// A directory that already holds a capture is refused.
func NewCaptureWriter(dir string, meta CaptureMeta, start time.Time) (*CaptureWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "summary.json")); err == nil {
		return nil, fmt.Errorf("capture: %s already holds a capture (summary.json); choose another --out", dir)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.alloc")); len(m) > 0 {
		return nil, fmt.Errorf("capture: %s already holds .alloc files; choose another --out", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, TraceFile)); err == nil {
		return nil, fmt.Errorf("capture: %s already holds a trace (%s); choose another --out", dir, TraceFile)
	}
	return &CaptureWriter{dir: dir, meta: meta, start: start, tally: alloctrack.NewTally(), prof: alloctrack.NewProfileBuilder(),
		sum: Summary{CaptureMeta: meta, Start: start}}, nil
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory and a rename; the file is readable by all (0644).
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	// CreateTemp makes the file 0600; a capture is an artefact others
	// (a CI collector running as another user) read.
	err = f.Chmod(0o644)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// heapprofd makes the capture a heapprofd one, before its first dump or
// trace byte.
func (w *CaptureWriter) heapprofd() error {
	if w.sum.Backend == alloctrack.BackendHeapprofd {
		return nil
	}
	if w.n > 0 {
		return errors.New("capture: heapprofd dumps in a capture of DDM windows")
	}
	w.sum.Backend = alloctrack.BackendHeapprofd
	w.sum.Estimated = true
	w.prof = alloctrack.NewHeapprofdProfileBuilder()
	return nil
}

// Trace returns the writer the capture's raw perfetto trace is copied to
// (TraceFile in the capture directory): every byte read from the device,
// in order, so the file opens in the Perfetto UI. The file is created on
// the first call and closed by Close.
func (w *CaptureWriter) Trace() (io.Writer, error) {
	if err := w.heapprofd(); err != nil {
		return nil, err
	}
	if w.trace != nil {
		return w.trace, nil
	}
	f, err := os.OpenFile(filepath.Join(w.dir, TraceFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	w.trace = f
	return f, nil
}

// Report writes one DDM window's REAL payload as <n>.alloc; r is its
// parse, nil when it did not parse. The window is counted by Add.
func (w *CaptureWriter) Report(raw []byte, r *allocreport.Report) error {
	if w.sum.Backend == alloctrack.BackendHeapprofd {
		return errors.New("capture: a DDM window in a heapprofd capture")
	}
	w.n++
	if err := WriteFileAtomic(filepath.Join(w.dir, strconv.Itoa(w.n)+".alloc"), raw); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	w.sum.Windows++
	switch {
	case r == nil:
		w.sum.ParseErrors++
	case r.Overflowed():
		w.sum.Overflowed++
	}
	return nil
}

// Add counts one window into the capture's summary and profile, written
// at Close. A sampled window (heapprofd) makes the capture a heapprofd one.
func (w *CaptureWriter) Add(win *alloctrack.Window) error {
	if win.Sampling != nil {
		if err := w.heapprofd(); err != nil {
			return err
		}
		w.sum.Dumps++
	} else if w.sum.Backend == alloctrack.BackendHeapprofd {
		return errors.New("capture: a DDM window in a heapprofd capture")
	}
	if err := w.prof.Add(win); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	w.tally.Add(win)
	return nil
}

// SetPackage records the app's name, as HELO or APNM gave it, when the
// capture was started by pid.
func (w *CaptureWriter) SetPackage(app string) {
	if w.sum.Package == "" {
		w.sum.Package = app
		w.meta.Package = app
	}
}

// SetRequested records how long the capture was asked to run, so that a
// reader can tell a capture that ended early.
func (w *CaptureWriter) SetRequested(d time.Duration) { w.sum.RequestedSeconds = d.Seconds() }

// Dumps is the number of heapprofd dumps counted.
func (w *CaptureWriter) Dumps() int { return w.sum.Dumps }

// Windows is the number of windows written.
func (w *CaptureWriter) Windows() int { return w.n }

// Total is what the windows written so far hold.
func (w *CaptureWriter) Total() alloctrack.Count { return w.tally.Total }

// Close writes summary.json and profile.pb.gz. runErr, if any, is noted in
// the summary; interrupted marks a capture ended early by the user.
func (w *CaptureWriter) Close(end time.Time, interrupted bool, runErr error, top int) (*Summary, error) {
	s := &w.sum
	s.End = end
	s.DurationSeconds = end.Sub(w.start).Seconds()
	s.Allocations, s.Bytes = w.tally.Total.Allocations, w.tally.Total.Bytes
	s.Interrupted = interrupted
	if runErr != nil {
		s.Error = runErr.Error()
	}
	s.TopClasses, s.TopSites = TopByBytes(w.tally, top)
	if s.Backend == alloctrack.BackendHeapprofd {
		t := w.tally
		s.SampledAllocations, s.SampledBytes = t.Sampled.Allocations, t.Sampled.Bytes
		s.SamplingInterval = t.SamplingInterval
		s.ErrorStackSamples, s.UnknownStackSamples = t.ErrorStackSamples, t.UnknownStackSamples
	}
	if w.trace != nil {
		err := w.trace.Sync()
		if cerr := w.trace.Close(); err == nil {
			err = cerr
		}
		w.trace = nil
		if err != nil {
			return nil, fmt.Errorf("capture: %s: %w", TraceFile, err)
		}
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := WriteFileAtomic(filepath.Join(w.dir, "summary.json"), append(b, '\n')); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	var buf bytes.Buffer
	if err := w.prof.Profile(w.start, end.Sub(w.start)).Write(&buf); err != nil {
		return nil, fmt.Errorf("capture: encoding profile: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(w.dir, "profile.pb.gz"), buf.Bytes()); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return s, nil
}

// TopByBytes returns t's top classes and sites by bytes, as a summary
// lists them.
func TopByBytes(t *alloctrack.Tally, top int) ([]SummaryClass, []SummarySite) {
	var classes []SummaryClass
	for _, c := range t.TopClasses(top, true) {
		classes = append(classes, SummaryClass{Class: c.Class, Allocations: c.Allocations, Bytes: c.Bytes})
	}
	var sites []SummarySite
	for _, s := range t.TopSites(top, true) {
		sites = append(sites, SummarySite{ID: s.ID, Class: s.Class, AppFrame: s.AppFrame, Frames: s.Frames, Allocations: s.Allocations, Bytes: s.Bytes,
			Estimated: s.Estimated, SampledAllocations: s.Sampled.Allocations, SampledBytes: s.Sampled.Bytes})
	}
	return classes, sites
}

// Input is a set of reports read from files or capture directories.
type Input struct {
	Name     string
	Reports  []*allocreport.Report
	Files    []string      // one per report
	Summary  *Summary      // from a capture directory's summary.json
	Dir      bool          // read from a directory (a capture)
	Duration time.Duration // 0 when unknown (bare files)

	// A perfetto trace (a bare trace file, or a heapprofd capture
	// directory's TraceFile): Trace is its path and Dumps its dumps of the
	// Java heap (perfetto.ArtHeap), in trace order; OtherHeapDumps counts
	// dumps of other heaps, left out. Reports is then empty.
	Trace          string
	Dumps          []*perfetto.Dump
	OtherHeapDumps int

	// A tiallocsample agent log: Log is it, and Every the agent's
	// sample rate (one allocation in Every per thread), which the log
	// does not hold: the caller sets it (0: unknown). Reports is then
	// empty.
	Log   *tialloc.Log
	Every uint64
}

// Estimated tells whether the input's counts are estimates from samples:
// a perfetto trace, or an agent log of known rate.
func (in *Input) Estimated() bool { return in.Trace != "" || (in.Log != nil && in.Every > 0) }

// Samples tells whether the input's counts are samples of an unknown rate
// (an agent log without Every): neither allocations nor estimates of them.
func (in *Input) Samples() bool { return in.Log != nil && in.Every == 0 }

// Kind names what the input's counts are, for messages and for keeping
// profiles of different kinds apart: "exact", "heapprofd", "agent" (an
// agent log of known rate) or "samples" (of unknown rate).
func (in *Input) Kind() string {
	switch {
	case in.Trace != "":
		return "heapprofd"
	case in.Samples():
		return "samples"
	case in.Log != nil:
		return "agent"
	}
	return "exact"
}

// LogWindow returns the window of the input's agent log (nil without one).
func (in *Input) LogWindow() (*alloctrack.Window, error) {
	if in.Log == nil {
		return nil, nil
	}
	w, err := agentlog.Window(in.Log, in.Every, time.Time{}, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", in.Name, err)
	}
	return w, nil
}

// AddTo counts the input into t: its reports, its dumps, or its log. A sum
// past 2^64 is an error (see AddWindow).
func (in *Input) AddTo(t *alloctrack.Tally) error {
	w, err := in.LogWindow()
	if err != nil {
		return err
	}
	if w != nil {
		if err := AddWindow(t, w); err != nil {
			return fmt.Errorf("%s: %w", in.Name, err)
		}
	}
	for _, r := range in.Reports {
		w := ddm.WindowOfReport(r, time.Time{}, time.Time{})
		err := AddWindow(t, w)
		w.Release()
		if err != nil {
			return fmt.Errorf("%s: %w", in.Name, err)
		}
	}
	for _, d := range in.Dumps {
		if err := AddWindow(t, heapprofd.WindowOfDump(d, time.Time{}, time.Time{})); err != nil {
			return fmt.Errorf("%s: %w", in.Name, err)
		}
	}
	return nil
}

// ErrOverflow is returned when a sum of counts would pass 2^64.
var ErrOverflow = errors.New("the counts sum past 2^64: not data a device writes")

// AddWindow adds w to t, unless t's total allocations or bytes would pass
// 2^64 (a float64 sum, so a sum within a few thousand of 2^64 is refused
// too): every class's and site's count is part of the total, so none of
// them wraps either.
func AddWindow(t *alloctrack.Tally, w *alloctrack.Window) error {
	a, b := float64(t.Total.Allocations), float64(t.Total.Bytes)
	if w.Sampling != nil {
		a, b = a+w.Estimated.Allocations, b+w.Estimated.Bytes
	} else {
		a, b = a+float64(w.Total.Allocations), b+float64(w.Total.Bytes)
	}
	if a >= math.MaxUint64 || b >= math.MaxUint64 {
		return ErrOverflow
	}
	t.Add(w)
	return nil
}

// fileHead returns up to the first 32 bytes of a file: enough to tell
// what it is.
func fileHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 32)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	return b[:n], nil
}

// isTrace tells, from its first bytes, whether a file is a perfetto trace:
// a trace begins with a TracePacket (field 1, length-delimited: byte
// 0x0a), which no REAL payload can (its first byte is a header length of
// at least HeaderLen).
func isTrace(head []byte) bool { return len(head) > 0 && head[0] == 0x0a }

// readTrace decodes a perfetto trace file into in. A malformed trace is an
// error naming the file and, through *perfetto.FormatError, the packet and
// byte offset.
func readTrace(in *Input, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := perfetto.NewDecoder(bufio.NewReaderSize(f, 64<<10), nil)
	for {
		d, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if d.Heap != perfetto.ArtHeap {
			in.OtherHeapDumps++
			continue
		}
		in.Dumps = append(in.Dumps, d)
	}
	in.Trace = path
	return nil
}

// ErrUnknownInput is a file that is none of the inputs report and diff
// read; its message lists them.
var ErrUnknownInput = errors.New("not an input alloctrack reads: give allocation reports (.alloc: REAL payloads, as DDM and Android Studio save them), perfetto traces (heapprofd), tiallocsample agent logs, heap dumps (hprof) or capture directories (capture, heapdump)")

// notTraceError is a file whose first byte is a perfetto trace's but whose
// first packet does not decode: a damaged trace, or no trace at all.
type notTraceError struct {
	path string
	fe   *perfetto.FormatError
}

func (e *notTraceError) Error() string {
	return fmt.Sprintf("%s: %v; or a perfetto trace (it starts as one) whose first packet is damaged at byte %d", e.path, ErrUnknownInput, e.fe.Offset)
}

func (e *notTraceError) Unwrap() []error { return []error{ErrUnknownInput, e.fe} }

// ReadInput reads a report file, or a capture directory (every <n>.alloc
// in number order, and summary.json for the duration). A file that does
// not parse is an error naming the file.
func ReadInput(path string) (*Input, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	in := &Input{Name: path, Dir: st.IsDir()}
	if !st.IsDir() {
		if err := readInputFile(in, path); err != nil {
			return nil, err
		}
		return in, nil
	}
	files, err := reportFiles(path)
	if err != nil {
		return nil, err
	}
	trace := filepath.Join(path, TraceFile)
	if _, err := os.Stat(trace); err == nil {
		if len(files) > 0 {
			return nil, fmt.Errorf("%s: holds both .alloc files and %s: not one capture", path, TraceFile)
		}
		if err := readTrace(in, trace); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		r, err := readReportFile(f)
		if err != nil {
			return nil, err
		}
		in.Reports = append(in.Reports, r)
		in.Files = append(in.Files, f)
	}
	if err := readInputSummary(in, path); err != nil {
		return nil, err
	}
	if len(files) == 0 && in.Summary == nil && in.Trace == "" {
		return nil, fmt.Errorf("%s: no .alloc files, no %s and no summary.json: not a capture directory", path, TraceFile)
	}
	return in, nil
}

// readInputFile reads one file into in: an agent log, a perfetto trace
// or a report; an error names what else it is.
func readInputFile(in *Input, path string) error {
	head, err := fileHead(path)
	if err != nil {
		return err
	}
	if isAgentLog(head) {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in.Log, err = tialloc.Parse(f, path)
		return err
	}
	if isTrace(head) {
		err := readTrace(in, path)
		if fe, ok := errors.AsType[*perfetto.FormatError](err); ok && fe.Packet == 0 {
			return &notTraceError{path, fe} // its first byte may only look like a trace's
		}
		return err
	}
	r, err := readReportFile(path)
	if pe, ok := errors.AsType[*allocreport.ParseError](err); ok && hprof.IsHprof(head) {
		return fmt.Errorf("%s: a heap dump (hprof): it holds what an app keeps, not what it allocated; alloctrack report summarises it on its own", path)
	} else if ok && pe.Offset < allocreport.HeaderLen {
		return fmt.Errorf("%s: %w", path, ErrUnknownInput)
	} else if ok {
		return fmt.Errorf("%s: a damaged allocation report (.alloc): %s at byte %d", path, pe.What, pe.Offset)
	}
	if err != nil {
		return err
	}
	in.Reports, in.Files = []*allocreport.Report{r}, []string{path}
	return nil
}

// reportFiles lists a capture directory's reports in window order
// (1.alloc, 2.alloc, ... 10.alloc).
func reportFiles(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.alloc"))
	if err != nil {
		return nil, err
	}
	num := func(f string) int {
		n, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".alloc"))
		if err != nil {
			return -1
		}
		return n
	}
	slices.SortFunc(files, func(a, b string) int {
		if d := num(a) - num(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return files, nil
}

// readInputSummary reads a capture directory's summary.json, if it has
// one, into in.
func readInputSummary(in *Input, dir string) error {
	path := filepath.Join(dir, "summary.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var kind struct{ Kind string }
	if json.Unmarshal(b, &kind); kind.Kind == "heapdump" {
		// HeapDumpPath did not find the dump it summarises.
		return fmt.Errorf("%s: a heap dump capture without its %s: nothing to read", dir, HeapDumpFile)
	}
	in.Summary = &s
	in.Duration = time.Duration(s.DurationSeconds * float64(time.Second))
	return nil
}

func readReportFile(path string) (*allocreport.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := allocreport.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// isAgentLog tells, from its first bytes, whether a file is a
// tiallocsample log: its first line defines key 0, the first
// allocation ("+0,jthread["), or, in the agent's first development
// layout, "#0(VMObjectAlloc(" follows a key (which tialloc.Parse names as
// unsupported). No REAL payload begins with '+' or '#' (its first byte is
// a header length) and no perfetto trace does (0x0a).
func isAgentLog(head []byte) bool {
	s := string(head)
	if strings.HasPrefix(s, "+0,jthread[") {
		return true
	}
	k := strings.TrimLeft(strings.TrimPrefix(s, "#"), "0123456789")
	return s != "" && s[0] == '#' && len(k) < len(s)-1 && strings.HasPrefix(k, "(VMObjectAlloc(")
}

// IsHeapDump tells, from its first bytes, whether a file is an hprof dump.
func IsHeapDump(path string) bool {
	head, err := fileHead(path)
	return err == nil && hprof.IsHprof(head)
}
