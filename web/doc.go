// Package web is the daemon's built-in web view: the farm page, one page
// per app (rates over the last windows, top classes and sites), a flame
// graph per app, and one page per allocation site with its whole stack,
// plus the same data as JSON under /api/v1/.
//
// It reads only the daemon's snapshot and recent-window counters; it never
// does device I/O. Every device-supplied string (serials, package, class
// and frame names) is untrusted: pages escape it through html/template and
// replace invalid UTF-8. Pages work without JavaScript except the chart and
// the flame graph; the embedded script refreshes the live part of a page in
// place. Assets are embedded and written for this package.
package web
