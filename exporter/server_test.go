package exporter_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/exporter"
)

// serve runs srv on a loopback port until the test ends.
func serve(t *testing.T, srv *http.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return "http://" + l.Addr().String()
}

// A handler that works longer than the read and write timeouts before it
// answers (a heap dump) is neither cancelled nor cut, also after a quick
// request on the same connection and after reading a request body: the
// timeouts bound the client, not the work.
func TestServerLongHandlerOutlivesTimeouts(t *testing.T) {
	// Long enough that a loaded machine sends a request's headers and
	// body within it (a new connection's first request is timed from the
	// accept); the work is a few times longer.
	const timeout = 500 * time.Millisecond
	mux := http.NewServeMux()
	mux.HandleFunc("/quick", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "quick") })
	mux.HandleFunc("/slow-empty", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(4 * timeout) // work, then an empty answer
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusServiceUnavailable)
		case <-time.After(4 * timeout): // the work itself, not a wait for an event
			io.WriteString(w, "done")
		}
	})
	base := serve(t, exporter.NewServer(mux, exporter.ServerConfig{ReadHeaderTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, IdleTimeout: time.Minute}))
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/quick", "", "quick"},
		{"GET", "/slow", "", "done"},
		{"GET", "/quick", "", "quick"},
		{"GET", "/slow-empty", "", ""},
		{"POST", "/slow", `{"a":1}`, "done"},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || string(b) != c.want {
			t.Errorf("%s %s: %q %v, want %q", c.method, c.path, b, err, c.want)
		}
	}
}

// A client that stops reading a response is cut within the write timeout
// of the write it blocks: the handler's write fails.
func TestServerCutsClientThatStopsReading(t *testing.T) {
	failed := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 32<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				failed <- err
				return
			}
		}
	})
	base := serve(t, exporter.NewServer(h, exporter.ServerConfig{WriteTimeout: 200 * time.Millisecond}))
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-failed:
	case <-time.After(30 * time.Second):
		t.Fatal("a client that reads nothing held the response for 30 s")
	}
}

// A long response that keeps moving is not cut by the write timeout,
// which bounds each write, not the whole response (a heap dump download).
func TestServerLongResponseKeepsMoving(t *testing.T) {
	const timeout = 2 * time.Second
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 10 {
			io.WriteString(w, "part\n")
			http.NewResponseController(w).Flush()
			time.Sleep(timeout / 6) // a slow source, the subject of the test
		}
	})
	base := serve(t, exporter.NewServer(h, exporter.ServerConfig{WriteTimeout: timeout}))
	res, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if err != nil || strings.Count(string(b), "part\n") != 10 {
		t.Errorf("read %q, %v", b, err)
	}
}
