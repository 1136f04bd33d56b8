package web

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// RateWindows is how many of an app's newest windows its rates
// (allocations_per_second, bytes_per_second) are over, on every page and
// in every JSON document: an app's, each of its classes' and sites', and
// each app's on a site page. Only an app being tracked has a current rate.
const RateWindows = 3

// Source is what the web view reads. Neither method may do I/O.
type Source interface {
	Snapshot() alloctrack.Snapshot
	Recent(serial, pkg string, n int) (alloctrack.Recent, bool)
}

// Row is one line of a top classes or top sites table (JSON and HTML).
type Row struct {
	Class       string   `json:"class"`
	Site        string   `json:"site,omitempty"`
	Frame       string   `json:"frame,omitempty"`
	Stack       []string `json:"stack,omitempty"`
	Other       bool     `json:"other,omitempty"`
	Allocations uint64   `json:"allocations"`
	Bytes       uint64   `json:"bytes"`
	// Estimated: a heapprofd site (Android 12+), whose allocations and
	// bytes are estimates from samples, rounded; Samples is exact.
	Estimated bool   `json:"estimated,omitempty"`
	Samples   uint64 `json:"samples,omitempty"`
	// Rates per second over the app's last RateWindows windows (0 for
	// an app with no current rate, see AppSummary.RateSeconds).
	AllocRate float64 `json:"allocations_per_second"`
	ByteRate  float64 `json:"bytes_per_second"`
	// Share of the app's allocations (or bytes, when sorted by bytes)
	// since start, 0..1.
	Share float64 `json:"share"`
}

// AppSummary is one app on the farm page.
type AppSummary struct {
	Serial      string     `json:"serial"`
	Package     string     `json:"package"`
	PID         int        `json:"pid"`
	State       string     `json:"state"`
	Backend     string     `json:"backend"`
	Window      float64    `json:"window_seconds"`
	LastReport  *time.Time `json:"last_report,omitempty"`
	Allocations uint64     `json:"allocations"`
	Bytes       uint64     `json:"bytes"`
	// Estimated: a heapprofd app (Android 12+): allocations, bytes and
	// rates are estimates from its samples; Samples and SampledBytes are
	// what its traces held, exactly.
	Estimated    bool   `json:"estimated,omitempty"`
	Samples      uint64 `json:"samples,omitempty"`
	SampledBytes uint64 `json:"sampled_bytes,omitempty"`
	// AllocRate and ByteRate are per second over the app's last
	// RateWindows windows (RateN of them, RateSeconds long). An app that
	// is not being tracked (exited, disconnected, backing off, …) has no
	// current rate: RateN and RateSeconds are 0, and so are the rates.
	AllocRate   float64           `json:"allocations_per_second"`
	ByteRate    float64           `json:"bytes_per_second"`
	RateN       int               `json:"rate_windows"`
	RateSeconds float64           `json:"rate_seconds"`
	Errors      map[string]uint64 `json:"errors"`
	ErrorTotal  uint64            `json:"error_total"`
}

// Server is an adb server on the farm page.
type Server struct {
	Addr   string `json:"address"`
	Up     bool   `json:"up"`
	Errors uint64 `json:"errors"`
	// LastError is why the server was last found down, while it is.
	LastError string `json:"last_error,omitempty"`
}

// Device is a device on the farm page.
type Device struct {
	Server string `json:"server"`
	Serial string `json:"serial"`
	State  string `json:"state"`
	API    int    `json:"api_level,omitempty"`
	Model  string `json:"model,omitempty"`
	// Facts is "unknown" while the daemon reads the device's facts
	// (it runs no backend there until then), with the last error.
	Facts      string            `json:"facts,omitempty"`
	FactsError string            `json:"facts_error,omitempty"`
	Errors     map[string]uint64 `json:"errors"`
}

// Farm is the farm page's data.
type Farm struct {
	Servers []Server     `json:"servers"`
	Devices []Device     `json:"devices"`
	Apps    []AppSummary `json:"apps"`
}

// App is an app page's data.
type App struct {
	AppSummary
	// Windows are the recent windows the chart draws (the n query
	// parameter; all kept by default), RecentN of them, Span long.
	Windows  []WindowPoint `json:"windows"`
	RecentN  int           `json:"recent_windows"`
	Span     float64       `json:"recent_seconds"`
	Classes  []Row         `json:"classes"`
	Sites    []Row         `json:"sites"`
	Sort     string        `json:"sort"`
	Filter   string        `json:"filter,omitempty"`
	NClasses int           `json:"classes_total"`
	NSites   int           `json:"sites_total"`
	// Tests are the app's instrumentation tests (absent for an app that
	// never ran one).
	Tests *Tests `json:"tests,omitempty"`
}

// WindowPoint is one window for the chart.
type WindowPoint struct {
	End       time.Time `json:"end"`
	Seconds   float64   `json:"seconds"`
	AllocRate float64   `json:"allocations_per_second"`
	ByteRate  float64   `json:"bytes_per_second"`
}

// SiteApp is one app a site appears in.
type SiteApp struct {
	Serial      string `json:"serial"`
	Package     string `json:"package"`
	Allocations uint64 `json:"allocations"`
	Bytes       uint64 `json:"bytes"`
	// Rates over the app's last RateN (up to RateWindows) windows; RateN
	// is 0 for an app with no current rate (see AppSummary).
	AllocRate float64 `json:"allocations_per_second"`
	ByteRate  float64 `json:"bytes_per_second"`
	RateN     int     `json:"rate_windows"`
}

// Site is a site page's data.
type Site struct {
	ID          string   `json:"site"`
	Class       string   `json:"class"`
	Frame       string   `json:"frame"`
	Stack       []string `json:"stack"`
	Allocations uint64   `json:"allocations"`
	Bytes       uint64   `json:"bytes"`
	// Estimated: a heapprofd site (Android 12+): allocations and bytes
	// are estimates from samples, rounded.
	Estimated bool      `json:"estimated,omitempty"`
	Apps      []SiteApp `json:"apps"`
}

// clean makes a device-supplied string valid UTF-8.
func clean(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func stackOf(frames []alloctrack.Frame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = clean(f.String())
	}
	return out
}

// rate is n per second of d, 0 without a span.
func rate(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// setRate sets s's current rate from its windows: over the last (up to)
// RateWindows of them, and only while the app is tracked.
func (s *AppSummary) setRate(a *alloctrack.AppSnapshot) {
	ws := a.Counts.Windows
	if a.State != alloctrack.StateTracking || len(ws) == 0 {
		return
	}
	ws = ws[max(0, len(ws)-RateWindows):]
	var c alloctrack.Count
	for _, w := range ws {
		c = plus(c, windowCount(w))
	}
	d := ws[len(ws)-1].End.Sub(ws[0].Start)
	if d <= 0 {
		return
	}
	s.RateN, s.RateSeconds = len(ws), d.Seconds()
	s.AllocRate, s.ByteRate = rate(c.Allocations, d), rate(c.Bytes, d)
}

// heapprofd tells whether an app is sampled by heapprofd (Android 12+).
func heapprofd(a *alloctrack.AppSnapshot) bool {
	return a.Backend == alloctrack.BackendHeapprofd || a.Counts.Heapprofd
}

// rounded is an estimate as a count.
func rounded(e alloctrack.Estimate) alloctrack.Count {
	return alloctrack.Count{Allocations: uint64(math.Round(e.Allocations)), Bytes: uint64(math.Round(e.Bytes))}
}

func plus(a, b alloctrack.Count) alloctrack.Count {
	return alloctrack.Count{Allocations: a.Allocations + b.Allocations, Bytes: a.Bytes + b.Bytes}
}

// shown is what the pages show of a site: its exact count, or a heapprofd
// site's estimate, rounded.
func shown(s alloctrack.SiteCount) alloctrack.Count {
	if s.Heapprofd {
		return rounded(s.Estimated)
	}
	return s.Count
}

// windowCount is a window's exact count plus its estimate, rounded (an app
// has one or the other).
func windowCount(w alloctrack.WindowTotal) alloctrack.Count {
	return plus(w.Count, rounded(w.Estimated))
}

func summarize(a *alloctrack.AppSnapshot) AppSummary {
	s := AppSummary{
		Serial: clean(a.Serial), Package: clean(a.Package), PID: a.PID, State: a.State,
		Backend: "ddm", Window: a.Window.Seconds(),
		Allocations: a.Counts.Total.Allocations, Bytes: a.Counts.Total.Bytes,
		Errors: a.Errors,
	}
	if heapprofd(a) {
		s.Backend, s.Estimated = alloctrack.BackendHeapprofd, true
		t := plus(a.Counts.Total, rounded(a.Counts.Estimated))
		s.Allocations, s.Bytes = t.Allocations, t.Bytes
		s.Samples, s.SampledBytes = a.Counts.Sampled.Allocations, a.Counts.Sampled.Bytes
	}
	if s.Errors == nil {
		s.Errors = map[string]uint64{}
	}
	for _, n := range a.Errors {
		s.ErrorTotal += n
	}
	if ws := a.Counts.Windows; len(ws) > 0 {
		t := ws[len(ws)-1].End
		s.LastReport = &t
	}
	s.setRate(a)
	return s
}

func buildFarm(s alloctrack.Snapshot) Farm {
	f := Farm{Servers: make([]Server, 0, len(s.Servers)), Devices: make([]Device, 0, len(s.Devices)), Apps: make([]AppSummary, 0, len(s.Apps))}
	for _, sv := range s.Servers {
		sr := Server{Addr: sv.Addr, Up: sv.Up, Errors: sv.Errors}
		if !sv.Up {
			sr.LastError = clean(sv.LastError)
		}
		f.Servers = append(f.Servers, sr)
	}
	for _, d := range s.Devices {
		errs := d.Errors
		if errs == nil {
			errs = map[string]uint64{}
		}
		f.Devices = append(f.Devices, Device{Server: d.Server, Serial: clean(d.Serial), State: clean(d.State), API: d.API, Model: clean(d.Model),
			Facts: d.Facts, FactsError: clean(d.FactsError), Errors: errs})
	}
	for i := range s.Apps {
		f.Apps = append(f.Apps, summarize(&s.Apps[i]))
	}
	return f
}

// Sort orders of the app page's tables.
var sorts = []string{"allocations", "bytes", "rate", "byte_rate", "name"}

func validSort(s string) string {
	if slices.Contains(sorts, s) {
		return s
	}
	return "allocations"
}

func sortRows(rows []Row, by string) {
	key := func(r Row) float64 {
		switch by {
		case "bytes":
			return float64(r.Bytes)
		case "rate":
			return r.AllocRate
		case "byte_rate":
			return r.ByteRate
		}
		return float64(r.Allocations)
	}
	slices.SortStableFunc(rows, func(a, b Row) int {
		if a.Other != b.Other { // other always last
			if a.Other {
				return 1
			}
			return -1
		}
		if by == "name" {
			return cmp.Or(strings.Compare(a.Class, b.Class), strings.Compare(a.Site, b.Site))
		}
		return cmp.Or(cmp.Compare(key(b), key(a)), strings.Compare(a.Class, b.Class), strings.Compare(a.Site, b.Site))
	})
}

func matches(r Row, q string) bool {
	if q == "" || r.Other {
		return true
	}
	q = strings.ToLower(q)
	if strings.Contains(strings.ToLower(r.Class), q) || strings.Contains(r.Site, q) {
		return true
	}
	for _, f := range r.Stack {
		if strings.Contains(strings.ToLower(f), q) {
			return true
		}
	}
	return false
}

func share(n, total uint64) float64 {
	if total == 0 {
		return 0
	}
	return float64(n) / float64(total)
}

// buildApp builds an app page: chart holds the windows the chart draws,
// rates the app's last RateWindows windows, which its rows are rated over.
func buildApp(a *alloctrack.AppSnapshot, chart, rates alloctrack.Recent, sortBy, q string) App {
	out := App{AppSummary: summarize(a), RecentN: len(chart.Windows), Span: chart.Span().Seconds(), Sort: validSort(sortBy), Filter: q,
		Tests: buildTests(&a.Tests)}
	for _, w := range chart.Windows {
		d := w.End.Sub(w.Start)
		wc := windowCount(w)
		out.Windows = append(out.Windows, WindowPoint{End: w.End, Seconds: d.Seconds(), AllocRate: rate(wc.Allocations, d), ByteRate: rate(wc.Bytes, d)})
	}
	var span time.Duration // 0: no current rate, every row's rate is 0
	if out.RateN > 0 {
		span = rates.Span()
	}
	rt := rowRater{span: span, total: alloctrack.Count{Allocations: out.Allocations, Bytes: out.Bytes},
		byBytes: out.Sort == "bytes" || out.Sort == "byte_rate"}
	out.Classes = classRows(a, rates, rt)
	out.Sites = siteRows(a, rates, rt)
	out.NClasses, out.NSites = len(out.Classes), len(out.Sites)
	if q != "" {
		out.Classes = slices.DeleteFunc(out.Classes, func(r Row) bool { return !matches(r, q) })
		out.Sites = slices.DeleteFunc(out.Sites, func(r Row) bool { return !matches(r, q) })
	}
	sortRows(out.Classes, out.Sort)
	sortRows(out.Sites, out.Sort)
	return out
}

// rowRater fills a row's counts, rates (over span) and share (of total).
type rowRater struct {
	span    time.Duration
	total   alloctrack.Count
	byBytes bool
}

func (rt rowRater) row(r Row, since, recent alloctrack.Count) Row {
	r.Allocations, r.Bytes = since.Allocations, since.Bytes
	r.AllocRate, r.ByteRate = rate(recent.Allocations, rt.span), rate(recent.Bytes, rt.span)
	if rt.byBytes {
		r.Share = share(since.Bytes, rt.total.Bytes)
	} else {
		r.Share = share(since.Allocations, rt.total.Allocations)
	}
	return r
}

func classRows(a *alloctrack.AppSnapshot, rc alloctrack.Recent, rt rowRater) []Row {
	recent := make(map[string]alloctrack.Count, len(rc.Classes))
	for _, c := range rc.Classes {
		recent[c.Class] = c.Count
	}
	var rows []Row
	for _, c := range a.Counts.Classes {
		rows = append(rows, rt.row(Row{Class: clean(c.Class)}, c.Count, recent[c.Class]))
	}
	if !heapprofd(a) { // heapprofd records no class: such an app has no class rows
		rows = append(rows, rt.row(Row{Class: alloctrack.Other, Other: true}, a.Counts.ClassOther, rc.ClassOther))
	}
	return rows
}

func siteRows(a *alloctrack.AppSnapshot, rc alloctrack.Recent, rt rowRater) []Row {
	recent := make(map[string]alloctrack.Count, len(rc.Sites))
	for _, s := range rc.Sites {
		recent[s.ID] = shown(s)
	}
	var rows []Row
	for _, s := range a.Counts.Sites {
		r := Row{Class: clean(s.Class), Site: s.ID, Frame: clean(s.Frame), Stack: stackOf(s.Frames), Estimated: s.Heapprofd, Samples: s.Sampled.Allocations}
		rows = append(rows, rt.row(r, shown(s), recent[s.ID]))
	}
	so := plus(a.Counts.SiteOther, rounded(a.Counts.SiteOtherEstimated))
	ro := plus(rc.SiteOther, rounded(rc.SiteOtherEstimated))
	other := Row{Class: alloctrack.Other, Site: alloctrack.Other, Other: true, Estimated: heapprofd(a), Samples: a.Counts.SiteOtherSampled.Allocations}
	return append(rows, rt.row(other, so, ro))
}

// FlameNode is a node of the flame graph: a frame (or, at the leaves, the
// allocated class) and the weight of everything under it.
type FlameNode struct {
	Name     string       `json:"n"`
	Value    uint64       `json:"v"`
	Children []*FlameNode `json:"c,omitempty"`
}

func (n *FlameNode) child(name string) *FlameNode {
	for _, c := range n.Children {
		if c.Name == name {
			return c
		}
	}
	c := &FlameNode{Name: name}
	n.Children = append(n.Children, c)
	return c
}

// flameSite is one stack and its weight.
type flameSite struct {
	class  string
	frames []alloctrack.Frame
	w      uint64
}

// buildFlame merges stacks into a tree rooted at the outermost frame;
// the allocated class is the leaf, as in pprof's allocation views.
func buildFlame(root string, sites []flameSite) *FlameNode {
	r := &FlameNode{Name: clean(root)}
	for _, s := range sites {
		if s.w == 0 {
			continue
		}
		r.Value += s.w
		n := r
		for i := len(s.frames) - 1; i >= 0; i-- {
			n = n.child(clean(s.frames[i].String()))
			n.Value += s.w
		}
		n = n.child("new " + clean(s.class))
		n.Value += s.w
	}
	var sortTree func(n *FlameNode)
	sortTree = func(n *FlameNode) {
		slices.SortFunc(n.Children, func(a, b *FlameNode) int { return strings.Compare(a.Name, b.Name) })
		for _, c := range n.Children {
			sortTree(c)
		}
	}
	sortTree(r)
	return r
}
