package alloctrack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CaptureMeta says what a capture is of.
type CaptureMeta struct {
	Serial  string `json:"serial"`
	Model   string `json:"model,omitempty"`
	API     int    `json:"api,omitempty"`
	Package string `json:"package"`
	PID     int    `json:"pid"`
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
}

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
	tally *Tally
	prof  *ProfileBuilder
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
	return &CaptureWriter{dir: dir, meta: meta, start: start, tally: NewTally(), prof: NewProfileBuilder(),
		sum: Summary{CaptureMeta: meta, Start: start}}, nil
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory and a rename.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
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

// Window writes one window's report and counts it.
func (w *CaptureWriter) Window(win *Window) error {
	w.n++
	if err := WriteFileAtomic(filepath.Join(w.dir, strconv.Itoa(w.n)+".alloc"), win.Raw); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	w.sum.Windows++
	if win.Report == nil {
		w.sum.ParseErrors++
		return nil
	}
	if win.Report.Overflowed() {
		w.sum.Overflowed++
	}
	w.tally.Add(win.Report)
	w.prof.AddReport(win.Report)
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

// Windows is the number of windows written.
func (w *CaptureWriter) Windows() int { return w.n }

// Total is what the windows written so far hold.
func (w *CaptureWriter) Total() Count { return w.tally.Total }

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
	s.TopClasses, s.TopSites = w.tally.Summary(top)
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

// Summary returns the top classes and sites by bytes.
func (t *Tally) Summary(top int) ([]SummaryClass, []SummarySite) {
	var classes []SummaryClass
	for _, c := range t.TopClasses(top, true) {
		classes = append(classes, SummaryClass{Class: c.Class, Allocations: c.Allocations, Bytes: c.Bytes})
	}
	var sites []SummarySite
	for _, s := range t.TopSites(top, true) {
		sites = append(sites, SummarySite{ID: s.ID, Class: s.Class, AppFrame: s.AppFrame, Frames: s.Frames, Allocations: s.Allocations, Bytes: s.Bytes})
	}
	return classes, sites
}

// Input is a set of reports read from files or capture directories.
type Input struct {
	Name     string
	Reports  []*Report
	Files    []string      // one per report
	Summary  *Summary      // from a capture directory's summary.json
	Duration time.Duration // 0 when unknown (bare files)
}

// ReadInput reads a report file, or a capture directory (every <n>.alloc
// in number order, and summary.json for the duration). A file that does
// not parse is an error naming the file.
func ReadInput(path string) (*Input, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	in := &Input{Name: path}
	if !st.IsDir() {
		r, err := readReportFile(path)
		if err != nil {
			return nil, err
		}
		in.Reports, in.Files = []*Report{r}, []string{path}
		return in, nil
	}
	files, err := filepath.Glob(filepath.Join(path, "*.alloc"))
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
	for _, f := range files {
		r, err := readReportFile(f)
		if err != nil {
			return nil, err
		}
		in.Reports = append(in.Reports, r)
		in.Files = append(in.Files, f)
	}
	b, err := os.ReadFile(filepath.Join(path, "summary.json"))
	switch {
	case err == nil:
		var s Summary
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(path, "summary.json"), err)
		}
		in.Summary = &s
		in.Duration = time.Duration(s.DurationSeconds * float64(time.Second))
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if len(files) == 0 && in.Summary == nil {
		return nil, fmt.Errorf("%s: no .alloc files and no summary.json: not a capture directory", path)
	}
	return in, nil
}

func readReportFile(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
