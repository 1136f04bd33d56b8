package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// httpClient keeps no idle connections, so no transport goroutine outlives
// a request (goleak).
var httpClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// httpGet returns the status code and body of a GET.
func httpGet(url string) (int, []byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// sample is one series of a /metrics scrape; histogram and summary parts
// are flattened into name_bucket{le}, name_sum and name_count.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// key is the series' name and sorted labels, as the text format shows it.
func (s sample) key() string {
	names := make([]string, 0, len(s.labels))
	for k := range s.labels {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString(s.name)
	b.WriteByte('{')
	for i, k := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, s.labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

// scrape is a parsed /metrics page.
type scrape []sample

// parseMetrics parses the Prometheus text format.
func parseMetrics(text string) (scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	var out scrape
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			add := func(suffix string, v float64, extra ...string) {
				l := labels
				if len(extra) > 0 {
					l = make(map[string]string, len(labels)+1)
					for k, v := range labels {
						l[k] = v
					}
					l[extra[0]] = extra[1]
				}
				out = append(out, sample{name: name + suffix, labels: l, value: v})
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add("", m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add("", m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add("", m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add("_bucket", float64(b.GetCumulativeCount()), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				add("_sum", h.GetSampleSum())
				add("_count", float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					add("", q.GetValue(), "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))
				}
				add("_sum", s.GetSampleSum())
				add("_count", float64(s.GetSampleCount()))
			}
		}
	}
	return out, nil
}

// matches tells whether s has name and every label of the pairs
// (name1, value1, name2, value2, …).
func (s sample) matches(name string, pairs []string) bool {
	if s.name != name {
		return false
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if s.labels[pairs[i]] != pairs[i+1] {
			return false
		}
	}
	return true
}

// get returns the value of the first series of name with the label pairs.
func (sc scrape) get(name string, pairs ...string) (float64, bool) {
	for _, s := range sc {
		if s.matches(name, pairs) {
			return s.value, true
		}
	}
	return 0, false
}

// value is get with 0 for a missing series.
func (sc scrape) value(name string, pairs ...string) float64 {
	v, _ := sc.get(name, pairs...)
	return v
}

// sum adds every series of name with the label pairs.
func (sc scrape) sum(name string, pairs ...string) float64 {
	var v float64
	for _, s := range sc {
		if s.matches(name, pairs) {
			v += s.value
		}
	}
	return v
}

// monotonic remembers every alloctrack counter (and histogram part) it has
// seen and reports any that went down between scrapes.
type monotonic struct {
	last    map[string]float64
	scrapes int
	series  int
}

func isMonotonic(name string) bool {
	if !strings.HasPrefix(name, "alloctrack_") {
		return false
	}
	for _, suf := range []string{"_total", "_count", "_bucket", "_sum"} {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	return false
}

// observe compares sc with the previous scrapes.
func (m *monotonic) observe(t testing.TB, sc scrape) {
	t.Helper()
	if m.last == nil {
		m.last = map[string]float64{}
	}
	m.scrapes++
	for _, s := range sc {
		if !isMonotonic(s.name) {
			continue
		}
		k := s.key()
		if prev, ok := m.last[k]; ok && s.value < prev {
			t.Errorf("counter went down between scrapes: %s from %v to %v", k, prev, s.value)
		}
		m.last[k] = s.value
	}
	m.series = len(m.last)
}
