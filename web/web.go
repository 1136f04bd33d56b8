package web

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/alloctrack/alloctrack/alloctrack"
)

//go:embed assets
var assets embed.FS

// Config configures the web view.
type Config struct {
	Version string
	// Links are extra links for the farm page (address relative to /, text).
	Links [][2]string
	// Refresh is how often pages refresh their live part (0: 5s).
	Refresh time.Duration
	// Now is the clock "… ago" is measured against (nil: time.Now).
	Now func() time.Time
	// HeapDumps, if set, lets app pages take heap dumps (heapdump.go).
	HeapDumps *HeapDumps
}

// Handler serves the web view.
type Handler struct {
	src  Source
	cfg  Config
	tmpl *template.Template
	mux  *http.ServeMux
}

// maxShown caps names in tables; the site page shows them whole.
const maxShown = 300

var funcs = template.FuncMap{
	"short": func(s string) string {
		if len(s) <= maxShown {
			return s
		}
		cut := maxShown
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut] + "…"
	},
	"path": url.PathEscape,
	// rateWindows is how many windows every rate is over (RateWindows).
	"rateWindows": func() int { return RateWindows },
	"num": func(n uint64) string {
		s := strconv.FormatUint(n, 10)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	},
	"bytes": humanBytes,
	"rate": func(f float64) string {
		switch {
		case f >= 100:
			return strconv.FormatFloat(f, 'f', 0, 64)
		case f >= 1:
			return strconv.FormatFloat(f, 'f', 1, 64)
		}
		return strconv.FormatFloat(f, 'f', 2, 64)
	},
	"pct": func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"sortURL": func(q url.Values, by string) string {
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("sort", by)
		v.Del("fragment")
		return "?" + v.Encode()
	},
	"errs": func(m map[string]uint64) string {
		var parts []string
		for _, st := range []string{alloctrack.StageConnect, alloctrack.StageHello, alloctrack.StageProbe, alloctrack.StageReport, alloctrack.StageParse, alloctrack.StageDisable} {
			if m[st] > 0 {
				parts = append(parts, st+" "+strconv.FormatUint(m[st], 10))
			}
		}
		return strings.Join(parts, ", ")
	},
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	f, i := float64(n), 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + []string{"B", "KiB", "MiB", "GiB", "TiB"}[i]
}

// New returns the web view over src.
func New(src Source, cfg Config) (*Handler, error) {
	if cfg.Refresh <= 0 {
		cfg.Refresh = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	t, err := template.New("").Funcs(funcs).Funcs(template.FuncMap{
		"bytesf": func(f float64) string { return humanBytes(uint64(f)) + "/s" },
		"ago": func(t *time.Time) string {
			if t == nil {
				return "never"
			}
			return cfg.Now().Sub(*t).Truncate(100*time.Millisecond).String() + " ago"
		},
	}).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("web: templates: %w", err)
	}
	h := &Handler{src: src, cfg: cfg, tmpl: t, mux: http.NewServeMux()}
	static, _ := fs.Sub(assets, "assets")
	fileServer := http.FileServerFS(static)
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".html") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		fileServer.ServeHTTP(w, r)
	})))
	h.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h.mux.HandleFunc("GET /{$}", h.farm)
	h.mux.HandleFunc("GET /apps/{serial}/{package}", h.app)
	h.mux.HandleFunc("GET /apps/{serial}/{package}/flame", h.flame)
	h.mux.HandleFunc("GET /sites/{site}", h.site)
	h.mux.HandleFunc("GET /api/v1/apps", h.apiApps)
	h.mux.HandleFunc("GET /api/v1/apps/{serial}/{package}", h.apiApp)
	h.mux.HandleFunc("GET /api/v1/apps/{serial}/{package}/flame", h.apiFlame)
	h.mux.HandleFunc("GET /api/v1/sites/{site}", h.apiSite)
	h.heapDumpRoutes()
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

type page struct {
	Title    string
	Version  string
	Links    [][2]string
	Refresh  int // milliseconds
	Fragment bool
	Query    url.Values
	Data     any
	// HeapDumps: app pages offer to take a heap dump.
	HeapDumps bool
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	p := page{Title: title, Version: h.cfg.Version, Links: h.cfg.Links, Refresh: int(h.cfg.Refresh / time.Millisecond),
		Fragment: r.URL.Query().Get("fragment") == "1", Query: r.URL.Query(), Data: data, HeapDumps: h.cfg.HeapDumps != nil}
	var b bytes.Buffer
	tmpl := name
	if p.Fragment {
		tmpl = name + "-live"
	}
	if err := h.tmpl.ExecuteTemplate(&b, tmpl, p); err != nil {
		http.Error(w, "web: rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	writeBody(w, r, b.Bytes())
}

// writeBody writes b, gzipped when the client takes it and b is not tiny:
// an app page with 200 stacks shrinks about tenfold, and it is fetched
// again at every refresh.
func writeBody(w http.ResponseWriter, r *http.Request, b []byte) {
	w.Header().Add("Vary", "Accept-Encoding")
	if len(b) < 1024 || !acceptsGzip(r) {
		w.Write(b)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	zw.Write(b)
	zw.Close()
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "web: encoding JSON: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	writeBody(w, r, b)
}

// notFound answers 404 with a plain-text message; device-supplied names in
// it are quoted, and text/plain with nosniff is never rendered as HTML.
func notFound(w http.ResponseWriter, format string, args ...any) {
	http.Error(w, fmt.Sprintf(format, args...), http.StatusNotFound)
}

func (h *Handler) farm(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, "farm", "alloctrack", buildFarm(h.src.Snapshot()))
}

func (h *Handler) apiApps(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, buildFarm(h.src.Snapshot()))
}

// findApp looks the app up in a fresh snapshot; on failure it has answered.
func (h *Handler) findApp(w http.ResponseWriter, r *http.Request) (*alloctrack.AppSnapshot, bool) {
	serial, pkg := r.PathValue("serial"), r.PathValue("package")
	s := h.src.Snapshot()
	knownSerial := false
	for i := range s.Apps {
		a := &s.Apps[i]
		if a.Serial == serial {
			knownSerial = true
			if a.Package == pkg {
				return a, true
			}
		}
	}
	for _, d := range s.Devices {
		knownSerial = knownSerial || d.Serial == serial
	}
	if !knownSerial {
		notFound(w, "no device with serial %q (the farm page / lists devices)", clean(serial))
	} else {
		notFound(w, "no app %q on device %q (the farm page / lists apps)", clean(pkg), clean(serial))
	}
	return nil, false
}

// windowsParam reads n, the number of recent windows (0: all remembered).
func windowsParam(w http.ResponseWriter, r *http.Request) (int, bool) {
	v := r.URL.Query().Get("n")
	if v == "" {
		return 0, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		http.Error(w, fmt.Sprintf("query parameter n: want a number of windows ≥ 0, got %q", v), http.StatusBadRequest)
		return 0, false
	}
	return n, true
}

func (h *Handler) appData(w http.ResponseWriter, r *http.Request) (App, bool) {
	n, ok := windowsParam(w, r)
	if !ok {
		return App{}, false
	}
	a, ok := h.findApp(w, r)
	if !ok {
		return App{}, false
	}
	chart, _ := h.src.Recent(a.Serial, a.Package, n)
	rates, _ := h.src.Recent(a.Serial, a.Package, RateWindows)
	q := r.URL.Query()
	return buildApp(a, chart, rates, q.Get("sort"), strings.TrimSpace(q.Get("q"))), true
}

func (h *Handler) app(w http.ResponseWriter, r *http.Request) {
	if a, ok := h.appData(w, r); ok {
		h.render(w, r, "app", a.Package+" on "+a.Serial, a)
	}
}

func (h *Handler) apiApp(w http.ResponseWriter, r *http.Request) {
	if a, ok := h.appData(w, r); ok {
		writeJSON(w, r, a)
	}
}

// flameParams are a flame graph's choices.
type flameParams struct {
	Serial, Package string
	By              string // "bytes" or "count"
	N               int    // recent windows; 0: since start
}

func flameQuery(w http.ResponseWriter, r *http.Request) (flameParams, bool) {
	p := flameParams{By: r.URL.Query().Get("by")}
	switch p.By {
	case "":
		p.By = "bytes"
	case "bytes", "count":
	default:
		http.Error(w, fmt.Sprintf("query parameter by: want bytes or count, got %q", p.By), http.StatusBadRequest)
		return p, false
	}
	n, ok := windowsParam(w, r)
	p.N = n
	return p, ok
}

func (h *Handler) flameTree(a *alloctrack.AppSnapshot, p flameParams) *FlameNode {
	weight := func(c alloctrack.Count) uint64 {
		if p.By == "count" {
			return c.Allocations
		}
		return c.Bytes
	}
	var sites []flameSite
	var other alloctrack.Count
	if p.N == 0 {
		for _, s := range a.Counts.Sites {
			sites = append(sites, flameSite{s.Class, s.Frames, weight(shown(s))})
		}
		other = plus(a.Counts.SiteOther, rounded(a.Counts.SiteOtherEstimated))
	} else {
		rc, _ := h.src.Recent(a.Serial, a.Package, p.N)
		for _, s := range rc.Sites {
			sites = append(sites, flameSite{s.Class, s.Frames, weight(shown(s))})
		}
		other = plus(rc.SiteOther, rounded(rc.SiteOtherEstimated))
	}
	sites = append(sites, flameSite{"<other sites>", nil, weight(other)})
	return buildFlame(a.Package, sites)
}

func (h *Handler) flame(w http.ResponseWriter, r *http.Request) {
	p, ok := flameQuery(w, r)
	if !ok {
		return
	}
	a, ok := h.findApp(w, r)
	if !ok {
		return
	}
	p.Serial, p.Package = clean(a.Serial), clean(a.Package)
	h.render(w, r, "flame", "flame graph of "+p.Package, p)
}

func (h *Handler) apiFlame(w http.ResponseWriter, r *http.Request) {
	p, ok := flameQuery(w, r)
	if !ok {
		return
	}
	a, ok := h.findApp(w, r)
	if !ok {
		return
	}
	writeJSON(w, r, h.flameTree(a, p))
}

func (h *Handler) siteData(w http.ResponseWriter, r *http.Request) (Site, bool) {
	id := r.PathValue("site")
	s := h.src.Snapshot()
	var out Site
	for i := range s.Apps {
		a := &s.Apps[i]
		for _, sc := range a.Counts.Sites {
			if sc.ID != id {
				continue
			}
			if out.ID == "" {
				out = Site{ID: sc.ID, Class: clean(sc.Class), Frame: clean(sc.Frame), Stack: stackOf(sc.Frames)}
			}
			c := shown(sc)
			out.Allocations += c.Allocations
			out.Bytes += c.Bytes
			out.Estimated = out.Estimated || sc.Heapprofd
			sa := SiteApp{Serial: clean(a.Serial), Package: clean(a.Package), Allocations: c.Allocations, Bytes: c.Bytes}
			if rc, ok := h.src.Recent(a.Serial, a.Package, RateWindows); ok && summarize(a).RateN > 0 {
				sa.RateN = len(rc.Windows)
				for _, rs := range rc.Sites {
					if rs.ID == id {
						rsc := shown(rs)
						sa.AllocRate, sa.ByteRate = rate(rsc.Allocations, rc.Span()), rate(rsc.Bytes, rc.Span())
					}
				}
			}
			out.Apps = append(out.Apps, sa)
		}
	}
	if out.ID == "" {
		notFound(w, "no site %q: no app has a series for it now (site ids come from alloctrack_site_allocations_total; a site that expired or never counted has none)", clean(id))
		return out, false
	}
	return out, true
}

func (h *Handler) site(w http.ResponseWriter, r *http.Request) {
	if s, ok := h.siteData(w, r); ok {
		h.render(w, r, "site", "site "+s.ID, s)
	}
}

func (h *Handler) apiSite(w http.ResponseWriter, r *http.Request) {
	if s, ok := h.siteData(w, r); ok {
		writeJSON(w, r, s)
	}
}
