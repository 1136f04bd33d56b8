package xsrf

import "net/http"

// Header must come, with any non-empty value, with every request that
// changes something (any method but GET, HEAD and OPTIONS).
const Header = "X-Alloctrack-Request"

// Allowed tells whether r may reach a handler: a safe method, or the
// header.
func Allowed(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return r.Header.Get(Header) != ""
}

// Guard refuses (403) every request Allowed refuses, before h sees it or
// its body is read.
func Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Allowed(r) {
			http.Error(w, "a "+r.Method+" request changes something: send the header "+Header+
				" (any value), which pages of other sites cannot send", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
