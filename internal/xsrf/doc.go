// Package xsrf keeps pages of other sites from changing anything through
// alloctrack's HTTP endpoints (cross-site request forgery).
//
// A page of another origin can make a browser send a POST with a
// text/plain or form body to any address the browser reaches (127.0.0.1
// included), with the user's cookies and cached basic auth, but it cannot
// add a header of its own without a CORS preflight, which alloctrack never
// answers. Every request that changes something must therefore carry the
// header Header; GET, HEAD and OPTIONS change nothing and need none.
package xsrf
