package exporter

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// The class and site families are most of /metrics: at 64 saturated apps
// with the default --top.* flags, about 40,000 of 46,000 series. Building
// them as client_golang metrics, gathering, sorting and encoding them cost
// hundreds of milliseconds a scrape. The handler writes them instead as
// text, straight from the snapshot, in the exposition format negotiated
// (Prometheus text 0.0.4 or OpenMetrics), and keeps each app's text until
// its counters change (alloctrack.AppCounts.Gen). The output is the same
// series, with the same values, as Collect gives; TestFastMetricsMatchCollect
// holds the two together.

// Formats the fragments are kept in.
const (
	fmtText = iota
	fmtOpenMetrics
	nFormats
)

// Per-app families, in the order they are written.
const (
	famClassAllocs = iota
	famClassBytes
	famSiteAllocs
	famSiteBytes
	famSiteEstAllocs
	famSiteEstBytes
	nAppFamilies
)

var appFamilySpecs = [nAppFamilies]spec{specClassAllocs, specClassBytes, specSiteAllocs, specSiteBytes, specSiteEstAllocs, specSiteEstBytes}

// fragment is the text of one app's class and site series in one format.
type fragment struct {
	gen      uint64
	families [nAppFamilies][]byte
	// infoText is the app's site info lines, one per id of infoIDs; line
	// i ends at infoEnds[i].
	infoIDs  []string
	infoText []byte
	infoEnds []int
	size     int // bytes of text in all
}

// infoStart is where site info line i starts in fr.infoText.
func (fr *fragment) infoStart(i int) int {
	if i == 0 {
		return 0
	}
	return fr.infoEnds[i-1]
}

type fragmentCache struct {
	mu   sync.Mutex
	apps [nFormats]map[string]*fragment // by serial + "\x00" + package
}

// headers holds the # HELP and # TYPE lines of each family (the per-app
// ones, then site info) as expfmt writes them, per format.
var headers = sync.OnceValue(func() (h [nFormats][nAppFamilies + 1][]byte) {
	specs := append(appFamilySpecs[:], specSiteInfo)
	for f := range nFormats {
		for i, sp := range specs {
			name := prometheus.BuildFQName(Namespace, "", sp.name)
			typ := dto.MetricType_COUNTER
			if sp.gauge {
				typ = dto.MetricType_GAUGE
			}
			one := 1.0
			m := &dto.Metric{Counter: &dto.Counter{Value: &one}}
			if sp.gauge {
				m = &dto.Metric{Gauge: &dto.Gauge{Value: &one}}
			}
			mf := &dto.MetricFamily{Name: &name, Help: &sp.help, Type: &typ, Metric: []*dto.Metric{m}}
			var b bytes.Buffer
			var err error
			if f == fmtText {
				_, err = expfmt.MetricFamilyToText(&b, mf)
			} else {
				_, err = expfmt.MetricFamilyToOpenMetrics(&b, mf)
			}
			if err != nil {
				panic(err) // constant input
			}
			for _, line := range bytes.SplitAfter(b.Bytes(), []byte("\n")) {
				if bytes.HasPrefix(line, []byte("#")) {
					h[f][i] = append(h[f][i], line...)
				}
			}
		}
	}
	return h
})

// siteParts appends to parts the class and site families of snapshot s
// in format f, each family under its header, as the pieces to write in
// order: the cached fragments themselves, not a copy, so that a scrape
// needs no buffer the size of its body.
func (c *Collector) siteParts(parts [][]byte, s alloctrack.Snapshot, f int) [][]byte {
	frags := c.cache.fragments(s, f)
	if len(frags) == 0 {
		return parts // no apps: these families have no series
	}
	h := headers()
	for fam := range nAppFamilies {
		// A family no app has series in is left out, header and all, as
		// client_golang leaves out a family without metrics (the exact
		// families when every app is sampled, the estimates when none is).
		empty := true
		for _, fr := range frags {
			if len(fr.families[fam]) > 0 {
				empty = false
				break
			}
		}
		if empty {
			continue
		}
		parts = append(parts, h[f][fam])
		for _, fr := range frags {
			if len(fr.families[fam]) > 0 {
				parts = append(parts, fr.families[fam])
			}
		}
	}
	parts = append(parts, h[f][nAppFamilies])
	seen := make(map[string]struct{}, len(frags)*len(frags[0].infoIDs)+1)
	for _, fr := range frags {
		// The app's info lines not written yet, in runs of lines that
		// follow one another in its text.
		run := -1
		for i, id := range fr.infoIDs {
			if _, ok := seen[id]; ok {
				if run >= 0 {
					parts = append(parts, fr.infoText[fr.infoStart(run):fr.infoEnds[i-1]])
					run = -1
				}
				continue
			}
			seen[id] = struct{}{}
			if run < 0 {
				run = i
			}
		}
		if run >= 0 {
			parts = append(parts, fr.infoText[fr.infoStart(run):])
		}
	}
	if _, ok := seen[alloctrack.Other]; !ok {
		parts = append(parts, appendSample(nil, "alloctrack_site_info", f, 1, "class", alloctrack.Other, "frame", alloctrack.Other, "site", alloctrack.Other))
	}
	return parts
}

// fragments returns the fragment of every app of s in format f, building
// those whose counters changed, and forgets apps no longer in s.
func (fc *fragmentCache) fragments(s alloctrack.Snapshot, f int) []*fragment {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	old := fc.apps[f]
	next := make(map[string]*fragment, len(s.Apps))
	out := make([]*fragment, len(s.Apps))
	for i := range s.Apps {
		a := &s.Apps[i]
		k := a.Serial + "\x00" + a.Package
		fr := old[k]
		if fr == nil || fr.gen != a.Counts.Gen || a.Counts.Gen == 0 {
			size := 0
			if fr != nil {
				size = fr.size
			}
			fr = buildFragment(a, f, size)
		}
		next[k] = fr
		out[i] = fr
	}
	fc.apps[f] = next
	return out
}

// buildFragment builds app a's fragment in format f; size is the length
// of its last one, if any. The text is built in one array, sized from the
// last so that it seldom grows: every family is a slice of it, and each
// time the array grows, the slices of the old one keep it.
func buildFragment(a *alloctrack.AppSnapshot, f int, size int) (fr *fragment) {
	fr = &fragment{gen: a.Counts.Gen}
	ct := &a.Counts
	var b []byte
	if size > 0 {
		b = make([]byte, 0, size+size/16+512)
	}
	defer func() { fr.size = len(b) }()
	if heapprofd(a) {
		// Sampled: the estimate families only.
		for fam, pick := range [2]func(alloctrack.Estimate) float64{
			func(e alloctrack.Estimate) float64 { return e.Allocations },
			func(e alloctrack.Estimate) float64 { return e.Bytes },
		} {
			name := [2]string{"alloctrack_site_estimated_allocations_total", "alloctrack_site_estimated_allocated_bytes_total"}[fam]
			start := len(b)
			for _, sc := range ct.Sites {
				if sc.Heapprofd {
					b = appendSample(b, name, f, pick(sc.Estimated), "package", a.Package, "serial", a.Serial, "site", sc.ID)
				}
			}
			b = appendSample(b, name, f, pick(ct.SiteOtherEstimated), "package", a.Package, "serial", a.Serial, "site", alloctrack.Other)
			fr.families[famSiteEstAllocs+fam] = b[start:len(b):len(b)]
		}
		b = fr.addInfos(b, ct.Sites, true, f)
		return fr
	}
	// Class families.
	for fam, pick := range [2]func(alloctrack.Count) uint64{
		func(c alloctrack.Count) uint64 { return c.Allocations },
		func(c alloctrack.Count) uint64 { return c.Bytes },
	} {
		name := [2]string{"alloctrack_allocations_total", "alloctrack_allocated_bytes_total"}[fam]
		start := len(b)
		for _, cc := range ct.Classes {
			b = appendSample(b, name, f, float64(pick(cc.Count)), "class", cc.Class, "package", a.Package, "serial", a.Serial)
		}
		b = appendSample(b, name, f, float64(pick(ct.ClassOther)), "class", alloctrack.Other, "package", a.Package, "serial", a.Serial)
		fr.families[famClassAllocs+fam] = b[start:len(b):len(b)]
	}
	// Site families.
	for fam, pick := range [2]func(alloctrack.Count) uint64{
		func(c alloctrack.Count) uint64 { return c.Allocations },
		func(c alloctrack.Count) uint64 { return c.Bytes },
	} {
		name := [2]string{"alloctrack_site_allocations_total", "alloctrack_site_allocated_bytes_total"}[fam]
		start := len(b)
		for _, sc := range ct.Sites {
			if !sc.Heapprofd {
				b = appendSample(b, name, f, float64(pick(sc.Count)), "package", a.Package, "serial", a.Serial, "site", sc.ID)
			}
		}
		b = appendSample(b, name, f, float64(pick(ct.SiteOther)), "package", a.Package, "serial", a.Serial, "site", alloctrack.Other)
		fr.families[famSiteAllocs+fam] = b[start:len(b):len(b)]
	}
	b = fr.addInfos(b, ct.Sites, false, f)
	return fr
}

// addInfos appends to b the site info lines of the sites counted by
// heapprofd (or not), makes them fr's, and returns b.
func (fr *fragment) addInfos(b []byte, sites []alloctrack.SiteCount, heapprofd bool, f int) []byte {
	start := len(b)
	fr.infoIDs = make([]string, 0, len(sites))
	fr.infoEnds = make([]int, 0, len(sites))
	for _, sc := range sites {
		if sc.Heapprofd != heapprofd {
			continue
		}
		b = appendSample(b, "alloctrack_site_info", f, 1, "class", sc.Class, "frame", frameLabel(sc.Frame), "site", sc.ID)
		fr.infoIDs = append(fr.infoIDs, sc.ID)
		fr.infoEnds = append(fr.infoEnds, len(b)-start)
	}
	fr.infoText = b[start:len(b):len(b)]
	return b
}

// appendSample appends one sample line: name{l1="v1",…} value. Label
// pairs come in name order, as client_golang sorts them.
func appendSample(b []byte, name string, f int, v float64, labels ...string) []byte {
	b = append(b, name...)
	b = append(b, '{')
	for i := 0; i+1 < len(labels); i += 2 {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, labels[i]...)
		b = append(b, '=', '"')
		b = appendEscaped(b, labels[i+1])
		b = append(b, '"')
	}
	b = append(b, '}', ' ')
	b = appendValue(b, v, f)
	return append(b, '\n')
}

// appendEscaped escapes a label value as both formats do: backslash,
// double quote and newline.
func appendEscaped(b []byte, s string) []byte {
	if !strings.ContainsAny(s, "\\\"\n") {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b = append(b, '\\', '\\')
		case '"':
			b = append(b, '\\', '"')
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendValue formats v as expfmt does in format f.
func appendValue(b []byte, v float64, f int) []byte {
	om := f == fmtOpenMetrics
	switch {
	case v == 1 && !om:
		return append(b, '1')
	case v == 0 && !om:
		return append(b, '0')
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	start := len(b)
	b = strconv.AppendFloat(b, v, 'g', -1, 64)
	if om && !bytes.ContainsAny(b[start:], "e.") {
		b = append(b, '.', '0')
	}
	return b
}
