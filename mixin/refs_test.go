package mixin

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func regexpMust(s string) *regexp.Regexp { return regexp.MustCompile(s) }

func TestRefs(t *testing.T) {
	for _, tc := range []struct {
		q    string
		want Names
	}{
		{`sum by (site) (rate(alloctrack_site_allocated_bytes_total{serial="s", site!="other"}[5m] offset 1h)) * on (site) group_left (class, frame) alloctrack_site_info`,
			Names{Metrics: []string{"alloctrack_site_allocated_bytes_total", "alloctrack_site_info"},
				Matchers: map[string][]string{"alloctrack_site_allocated_bytes_total": {"serial", "site"}},
				Grouping: []string{"site", "class", "frame"}}},
		{`count_values("api_level", alloctrack_device_api_level{job=~"a|b"}) > 0 and on() vector(1)`,
			Names{Metrics: []string{"alloctrack_device_api_level"}, Matchers: map[string][]string{"alloctrack_device_api_level": {"job"}},
				Grouping: []string{}, Made: []string{"api_level"}}},
		{`avg_over_time((app:x:rate5m > 0)[1d:5m] offset 1h)`,
			Names{Metrics: []string{"app:x:rate5m"}, Matchers: map[string][]string{}}},
		{`label_replace(up, "host", "$1", "instance", "(.*):.*")`,
			Names{Metrics: []string{"up"}, Matchers: map[string][]string{}, Made: []string{"host"}}},
	} {
		got, err := Refs(tc.q)
		if err != nil {
			t.Errorf("Refs(%q): %v", tc.q, err)
			continue
		}
		if len(got.Grouping) == 0 && len(tc.want.Grouping) == 0 {
			got.Grouping, tc.want.Grouping = nil, nil
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Refs(%q) = %+v, want %+v", tc.q, got, tc.want)
		}
	}
	for _, bad := range []string{`up{job="a}`, `{job="a"}`, `rate(up[5m)`, `sum by (a, "b") (up)`, `rate(up[$__rate_interval])`} {
		if _, err := Refs(bad); err == nil {
			t.Errorf("Refs(%q): no error", bad)
		}
	}
}

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"serial": "127.0.0.1:5555", "package": "com.example.app", "datasource": "P1", "__range": "1h"}
	for in, want := range map[string]string{
		`x{serial="$serial", package="${package}"}[$__range]`:   `x{serial="127.0.0.1:5555", package="com.example.app"}[1h]`,
		`/debug/pprof/allocs?serial=${serial:percentencode}`:    `/debug/pprof/allocs?serial=127.0.0.1%3A5555`,
		`/d/x?${datasource:queryparam}&var-package=[[package]]`: `/d/x?var-datasource=P1&var-package=com.example.app`,
		`$unknown ${__data.fields.instance}`:                    `$unknown ${__data.fields.instance}`,
	} {
		if got := Substitute(in, vars); got != want {
			t.Errorf("Substitute(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLabelValuesQuery(t *testing.T) {
	sel, label, err := LabelValuesQuery(`label_values(alloctrack_app_state{job=~"$job", instance="$instance"}, serial)`)
	if err != nil || sel != `alloctrack_app_state{job=~"$job", instance="$instance"}` || label != "serial" {
		t.Errorf("got %q %q %v", sel, label, err)
	}
	if _, label, err := LabelValuesQuery(`label_values(job)`); err != nil || label != "job" {
		t.Errorf("label_values(job): %q %v", label, err)
	}
	if _, _, err := LabelValuesQuery(`query_result(up)`); err == nil || !strings.Contains(err.Error(), "label_values") {
		t.Errorf("query_result: %v", err)
	}
}
