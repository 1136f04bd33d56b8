package xsrf

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Safe methods pass without the header; every other method needs it, and
// a refused request never reaches the handler.
func TestGuard(t *testing.T) {
	for _, c := range []struct {
		method, header string
		pass           bool
	}{
		{"GET", "", true},
		{"HEAD", "", true},
		{"OPTIONS", "", true},
		{"POST", "", false},
		{"PUT", "", false},
		{"DELETE", "", false},
		{"PATCH", "", false},
		{"POST", "1", true},
		{"DELETE", "sim", true},
	} {
		reached := false
		h := Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
		req := httptest.NewRequest(c.method, "/x", strings.NewReader("text"))
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Origin", "https://elsewhere.example")
		if c.header != "" {
			req.Header.Set(Header, c.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if reached != c.pass || !c.pass && (rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), Header)) {
			t.Errorf("%s with header %q: reached %v, %d %q", c.method, c.header, reached, rec.Code, rec.Body.String())
		}
	}
}
