package exporter

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// ServerConfig bounds what a client can hold of the HTTP server. Zero
// durations and a zero MaxConnections mean no bound.
type ServerConfig struct {
	// ReadHeaderTimeout bounds a request's headers, from the moment the
	// connection is ready for it: a new connection that sends nothing is
	// closed then.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds a request's headers and body. It ends once the
	// body is read: a handler that takes longer (a heap dump) is not
	// cancelled by it (TestServerLongHandlerOutlivesTimeouts).
	ReadTimeout time.Duration
	// WriteTimeout bounds each write of a response (and the flush at its
	// end): a client that stops reading is cut, while a long response
	// that keeps moving (a heap dump download) is not, and neither is a
	// handler that works a while before it writes.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection idle between requests.
	IdleTimeout time.Duration
	// MaxConnections bounds the connections served at once on each
	// listener (LimitListeners); more wait in the kernel's queue.
	MaxConnections int
}

// NewServer is an HTTP server for h with cfg's timeouts.
func NewServer(h http.Handler, cfg ServerConfig) *http.Server {
	return &http.Server{
		Handler:           withDeadlines(h, cfg.WriteTimeout),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}
}

// LimitListeners bounds the connections each listener accepts at once to
// n (0: no bound); a connection over the bound waits until one closes.
func LimitListeners(ls []net.Listener, n int) []net.Listener {
	if n <= 0 {
		return ls
	}
	out := make([]net.Listener, len(ls))
	for i, l := range ls {
		out[i] = netutil.LimitListener(l, n)
	}
	return out
}

// withDeadlines gives each write of the response write to complete.
// (The server itself lifts ReadTimeout's deadline once the request is
// read, when it starts watching the connection for the client's end.)
func withDeadlines(h http.Handler, write time.Duration) http.Handler {
	if write <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server clears the deadline after each response: the next
		// request on the connection starts without one, however long
		// its handler works before it writes.
		h.ServeHTTP(&progressWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: write}, r)
	})
}

// progressWriter gives each write d to complete.
type progressWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.rc.SetWriteDeadline(time.Now().Add(p.d))
	return p.ResponseWriter.Write(b)
}

func (p *progressWriter) WriteHeader(code int) {
	p.rc.SetWriteDeadline(time.Now().Add(p.d))
	p.ResponseWriter.WriteHeader(code)
}

func (p *progressWriter) Flush() {
	p.rc.SetWriteDeadline(time.Now().Add(p.d))
	p.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
