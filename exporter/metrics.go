package exporter

import (
	"compress/gzip"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// metricsHandler serves /metrics from one snapshot per request: reg's
// families and the collector's light families through client_golang and
// expfmt, then the class and site families from cached text. It negotiates
// the format as promhttp does (OpenMetrics on request, else Prometheus text
// 0.0.4; protobuf on request, through client_golang alone) and compresses
// with gzip when the client accepts it.
type metricsHandler struct {
	reg prometheus.Gatherer
	c   *Collector
}

var (
	bufPool  = sync.Pool{New: func() any { return new([]byte) }}
	gzipPool = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return w }}
)

func (h *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	snap := h.c.src.Snapshot()
	format := expfmt.NegotiateIncludingOpenMetrics(r.Header)
	f := -1
	switch format.FormatType() {
	case expfmt.TypeTextPlain:
		f = fmtText
	case expfmt.TypeOpenMetrics:
		f = fmtOpenMetrics
	}
	own := prometheus.NewRegistry()
	p := partLight
	if f < 0 {
		p = partAll // protobuf: every family through client_golang
	}
	own.MustRegister(view{c: h.c, snap: snap, parts: p})
	mfs, err := prometheus.Gatherers{h.reg, own}.Gather()
	if err != nil && len(mfs) == 0 {
		http.Error(w, "error gathering metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	// Like promhttp with ContinueOnError: serve what was gathered.

	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := (*bp)[:0]
	bw := &sliceWriter{b: buf}
	enc := expfmt.NewEncoder(bw, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			http.Error(w, "error encoding metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	if f >= 0 {
		bw.b = h.c.writeSites(bw.b, snap, f)
	}
	if cl, ok := enc.(expfmt.Closer); ok {
		if err := cl.Close(); err != nil { // # EOF for OpenMetrics
			http.Error(w, "error encoding metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	*bp = bw.b

	hdr := w.Header()
	hdr.Set("Content-Type", string(format))
	hdr.Add("Vary", "Accept-Encoding")
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		hdr.Set("Content-Encoding", "gzip")
		gz := gzipPool.Get().(*gzip.Writer)
		gz.Reset(w)
		gz.Write(bw.b)
		gz.Close()
		gzipPool.Put(gz)
		return
	}
	hdr.Set("Content-Length", strconv.Itoa(len(bw.b)))
	w.Write(bw.b)
}

// sliceWriter is an io.Writer appending to a slice.
type sliceWriter struct{ b []byte }

func (s *sliceWriter) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }

var _ io.Writer = (*sliceWriter)(nil)

// acceptsGzip tells whether an Accept-Encoding header accepts gzip (with
// a non-zero q), explicitly or through *.
func acceptsGzip(h string) bool {
	ok := false
	for _, part := range strings.Split(h, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "*" {
			continue
		}
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(k, "q") {
				if x, err := strconv.ParseFloat(v, 64); err == nil {
					q = x
				}
			}
		}
		if coding == "gzip" {
			return q > 0
		}
		ok = q > 0 // * unless gzip is named
	}
	return ok
}
