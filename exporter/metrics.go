package exporter

import (
	"bufio"
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
	// Buffers of writeParts: 32 KiB, as net/http's own.
	partsBufPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}
)

func (h *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	snap := h.c.src.Snapshot()
	format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultOpenMetricsAcceptedFormats()...)
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
	bw := &sliceWriter{b: (*bp)[:0]}
	enc := expfmt.NewEncoder(bw, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			http.Error(w, "error encoding metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	// The body: the families encoded above, the cached class and site
	// text (written from the cache, not copied into one buffer), then
	// what the encoder closes with (# EOF for OpenMetrics).
	parts := [][]byte{bw.b}
	if f >= 0 {
		parts = h.c.siteParts(parts, snap, f)
	}
	if cl, ok := enc.(expfmt.Closer); ok {
		bw.b = bw.b[len(bw.b):]
		if err := cl.Close(); err != nil {
			http.Error(w, "error encoding metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		parts = append(parts, bw.b)
	}
	*bp = parts[0]

	hdr := w.Header()
	hdr.Set("Content-Type", string(format))
	hdr.Add("Vary", "Accept-Encoding")
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		hdr.Set("Content-Encoding", "gzip")
		gz := gzipPool.Get().(*gzip.Writer)
		gz.Reset(w)
		writeParts(gz, parts)
		gz.Close()
		gzipPool.Put(gz)
		return
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	hdr.Set("Content-Length", strconv.Itoa(n))
	writeParts(w, parts)
}

// writeParts writes parts to w in order, through a buffer so that short
// parts do not each cost a write; it stops at the first error (a client
// gone).
func writeParts(w io.Writer, parts [][]byte) {
	bw := partsBufPool.Get().(*bufio.Writer)
	defer partsBufPool.Put(bw)
	bw.Reset(w)
	defer bw.Reset(nil) // keep no writer alive in the pool
	for _, p := range parts {
		if _, err := bw.Write(p); err != nil {
			return
		}
	}
	bw.Flush()
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
