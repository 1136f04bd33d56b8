package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/mixin"
	"github.com/alloctrack/alloctrack/sim"
)

// emptyOnHealthyFarm lists the queries (dashboard uid, panel title, refId)
// that may return nothing while nothing fails: error counters have no
// series until the first error, and no app is untracked while every app is
// tracked through DDM or heapprofd. TestMixinPanels causes those errors and
// checks that these queries return data too (an Android 12 app on an
// Android 11 device, which only DDM is tried on, fills the untracked list).
var emptyOnHealthyFarm = []panelQuery{
	{"alloctrack-farm", "Apps not being tracked", "A"}, // every app tracking
	{"alloctrack-farm", "Errors by stage", "A"},        // alloctrack_app_errors_total
	{"alloctrack-farm", "Errors by stage", "B"},        // alloctrack_device_errors_total
	{"alloctrack-app", "Errors by stage", "A"},         // alloctrack_app_errors_total of the app
}

// heapprofdFamilies are the families only apps sampled through heapprofd
// (Android 12+) have, and the rule recorded from them. Queries naming them
// run with the app variables set to an app of the farm's Android 12 device,
// which the daemon samples through heapprofd.
var heapprofdFamilies = []string{
	"alloctrack_app_estimated_allocations_total", "alloctrack_app_estimated_allocated_bytes_total",
	"alloctrack_app_sampled_allocations_total", "alloctrack_app_sampled_bytes_total",
	"alloctrack_site_estimated_allocations_total", "alloctrack_site_estimated_allocated_bytes_total",
	"alloctrack_heapprofd_", "app:alloctrack_app_estimated_allocated_bytes:rate5m",
}

func needsHeapprofd(expr string) bool {
	return slices.ContainsFunc(heapprofdFamilies, func(f string) bool { return strings.Contains(expr, f) })
}

type panelQuery struct{ dashboard, panel, ref string }

func (q panelQuery) String() string { return q.dashboard + " / " + q.panel + " / " + q.ref }

// Grafana's built-in variables, for a Prometheus scraped every second.
var builtinVars = map[string]string{"__rate_interval": "10s", "__range": "1m", "__interval": "2s", "datasource": "prometheus"}

// TestMixinPanels proves the dashboards and rules of mixin/ against the
// real thing: simulated devices (Android 11, 9 and 12, two apps each)
// behind the real adb server, `alloctrack serve`, and a real Prometheus
// scraping it and evaluating mixin/rules. Every variable query is
// resolved through the HTTP API, every query of every panel runs with the
// variables substituted, as Grafana runs it (range or instant), and must
// return data, except the few listed in emptyOnHealthyFarm; those must
// return data once a report is corrupted and a debugger holds an app. Every
// metric and label a query or rule names must exist in Prometheus, and
// every label a legend names must be on the series. The pprof link of the
// app dashboard must answer.
func TestMixinPanels(t *testing.T) {
	ruleFiles, err := filepath.Glob("../mixin/rules/*.yml")
	if err != nil || len(ruleFiles) == 0 {
		t.Fatalf("no rule files in ../mixin/rules: %v", err)
	}
	for i, f := range ruleFiles {
		if ruleFiles[i], err = filepath.Abs(f); err != nil {
			t.Fatal(err)
		}
	}
	dashboards, err := mixin.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, sim.FarmConfig{Devices: 3, AppsPerDevice: 2, APIs: []int{30, 28, 31}, Workload: sim.DefaultWorkload()}, nil)
	apps := r.trackable()
	all := appsOf(apps)
	sampled := appsOf(r.heapprofdApps())
	if len(sampled) != 2 {
		t.Fatalf("%d apps on the Android 12 device, want 2", len(sampled))
	}
	r.d.waitState(t, append(append([]app(nil), all...), sampled...), "tracking", 30*time.Second)
	p := startPrometheus(t, r.d.addr, ruleFiles...)
	r.d.waitWindows(t, all, 2, 30*time.Second)
	waitFor(t, 30*time.Second, "recorded allocation rates of every tracked app", func() (bool, string) {
		v := p.query(t, `app:alloctrack_app_allocations:rate5m > 0`)
		e := p.query(t, `app:alloctrack_app_estimated_allocated_bytes:rate5m > 0`)
		return len(v) >= len(all) && len(e) >= len(sampled), fmt.Sprintf("%d of %d apps, %d of %d sampled apps", len(v), len(all), len(e), len(sampled))
	})
	// Ranges of $__rate_interval (10 s) need several scrapes: the
	// queries below are run again until they return data (execAll).

	sel := apps[0] // an app on the API 30 device, tracking
	want := map[string]string{"job": promJob, "instance": r.d.addr, "serial": sel.serial, "package": sel.pkg}
	hsel := sampled[0] // an app on the API 31 device, sampled through heapprofd
	type run struct {
		panelQuery
		expr, legend string
		instant      bool
		series       []map[string]string
		err          error
	}
	var runs []*run
	vars := map[string]map[string]string{} // per dashboard uid
	var varQueries []string
	panels := 0
	for _, d := range dashboards {
		v := map[string]string{}
		for k, x := range builtinVars {
			v[k] = x
		}
		for _, tv := range d.Templating.List {
			if tv.Type != "query" {
				continue
			}
			q := mixin.Substitute(tv.QueryText(), v)
			varQueries = append(varQueries, q)
			selector, label, err := mixin.LabelValuesQuery(q)
			if err != nil {
				t.Fatal(err)
			}
			values, err := p.labelValues(label, selector)
			if err != nil || len(values) == 0 {
				t.Fatalf("%s: variable %s: %s: values %v, %v", d.File, tv.Name, q, values, err)
			}
			switch {
			case tv.Multi && tv.IncludeAll:
				v[tv.Name] = tv.AllValue
			case slices.Contains(values, want[tv.Name]):
				v[tv.Name] = want[tv.Name]
			default:
				t.Fatalf("%s: variable %s: %s gives %v, without %q", d.File, tv.Name, q, values, want[tv.Name])
			}
		}
		vars[d.UID] = v
		hv := maps.Clone(v)
		for k, x := range map[string]string{"serial": hsel.serial, "package": hsel.pkg} {
			if _, ok := hv[k]; ok && !strings.HasPrefix(hv[k], ".") && hv[k] != "$__all" {
				hv[k] = x
			}
		}
		for _, pn := range d.AllPanels() {
			panels++
			for _, tg := range pn.Targets {
				sub := v
				if needsHeapprofd(tg.Expr) {
					sub = hv
				}
				runs = append(runs, &run{panelQuery: panelQuery{d.UID, pn.Title, tg.RefID},
					expr: mixin.Substitute(tg.Expr, sub), legend: tg.LegendFormat, instant: tg.Instant})
			}
		}
	}
	exec := func(r *run) {
		r.series, r.err = p.run(r.expr, r.instant)
	}
	// execAll runs each query until it returns data or may be empty, all
	// within testwait.Bound: until a range holds enough scrapes, or after
	// a scrape timed out on a loaded machine (every series stale until
	// the next one), a query can rightly return nothing for a while.
	execAll := func(qs []*run, mayBeEmpty func(*run) bool) {
		deadline := time.Now().Add(testwait.Bound)
		for _, q := range qs {
			for exec(q); (q.err != nil || len(q.series) == 0) && !mayBeEmpty(q) && time.Now().Before(deadline); exec(q) {
				time.Sleep(500 * time.Millisecond)
			}
		}
	}

	// A healthy farm: every query but the listed ones returns data.
	withData, sampledQueries := 0, 0
	execAll(runs, func(q *run) bool { return slices.Contains(emptyOnHealthyFarm, q.panelQuery) })
	for _, q := range runs {
		if needsHeapprofd(q.expr) {
			sampledQueries++
		}
		switch {
		case q.err != nil:
			t.Errorf("%v: %s: %v", q.panelQuery, q.expr, q.err)
		case len(q.series) > 0:
			withData++
			if slices.Contains(emptyOnHealthyFarm, q.panelQuery) {
				t.Logf("%v (listed as empty on a healthy farm) returned %d series", q.panelQuery, len(q.series))
			}
		case !slices.Contains(emptyOnHealthyFarm, q.panelQuery):
			t.Errorf("%v returned no data: %s", q.panelQuery, q.expr)
		}
	}
	t.Logf("%d dashboards, %d panels, %d queries (%d of heapprofd apps): %d returned data on the healthy farm, %d listed as empty by design",
		len(dashboards), panels, len(runs), sampledQueries, withData, len(emptyOnHealthyFarm))

	// Trouble: a corrupt report in the selected app (a parse error) and a
	// new app that a debugger holds before it is even named, so neither
	// its VM nor the process list can name it (a device error at hello;
	// a held app the process list names shows as state="held" instead).
	r.vm(t, sel.farmSerial, sel.pkg).SetFaults(sim.Faults{CorruptREAL: 1})
	held, err := r.farm.AddApp(sel.farmSerial, sim.AppConfig{Package: "com.example.held", NameAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	held.SetFaults(sim.Faults{DebuggerAttached: true})
	if _, err := r.farm.AddApp(sel.farmSerial, sim.AppConfig{Package: "com.example.modern", API: 31, Workload: quietWorkload()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a parse error, a device error and an unsupported app in Prometheus", func() (bool, string) {
		if u := p.query(t, `alloctrack_app_state{state="unsupported"} == 1`); len(u) == 0 {
			return false, "no unsupported app"
		}
		a := p.query(t, fmt.Sprintf(`alloctrack_app_errors_total{stage="parse", serial=%q, package=%q} > 0`, sel.serial, sel.pkg))
		d := p.query(t, `alloctrack_device_errors_total > 0`)
		return len(a) > 0 && len(d) > 0, fmt.Sprintf("%d app, %d device error series", len(a), len(d))
	})
	// Rates over $__rate_interval see the increase once a few more
	// scrapes are in: execAll waits for that.
	var listed []*run
	for _, q := range runs {
		if slices.Contains(emptyOnHealthyFarm, q.panelQuery) {
			listed = append(listed, q)
		}
	}
	execAll(listed, func(*run) bool { return false })
	for _, q := range listed {
		if q.err != nil || len(q.series) == 0 {
			t.Errorf("%v: no data on a farm with errors and an Android 12 device (%v): %s", q.panelQuery, q.err, q.expr)
		}
	}
	for _, e := range emptyOnHealthyFarm {
		if !slices.ContainsFunc(runs, func(q *run) bool { return q.panelQuery == e }) {
			t.Errorf("emptyOnHealthyFarm lists %v, which no dashboard has", e)
		}
	}

	// Names: every metric and label a query, variable or rule names exists.
	names, err := p.labelValues("__name__", "")
	if err != nil {
		t.Fatal(err)
	}
	c := &nameChecker{p: p, known: map[string]bool{}, labels: map[string]map[string]bool{}}
	for _, n := range names {
		c.known[n] = true
	}
	exprs := append([]string(nil), varQueries...)
	for i, q := range exprs {
		selector, _, _ := mixin.LabelValuesQuery(q)
		exprs[i] = selector
	}
	for _, f := range ruleFiles {
		for _, rule := range readRuleFile(t, f) {
			if rule.Record != "" {
				c.recorded = append(c.recorded, rule.Record)
			}
			exprs = append(exprs, rule.Expr)
		}
	}
	checked := 0
	for _, q := range runs {
		for _, err := range c.check(q.expr) {
			t.Errorf("%v: %v", q.panelQuery, err)
		}
		for _, err := range legendErrors(q.legend, q.series) {
			t.Errorf("%v: %v", q.panelQuery, err)
		}
		checked++
	}
	panelsChecked := checked
	for _, e := range exprs {
		if e == "" {
			continue
		}
		for _, err := range c.check(e) {
			t.Errorf("variable or rule %q: %v", e, err)
		}
		checked++
	}
	t.Logf("names checked in %d panel queries and %d variable and rule expressions", panelsChecked, checked-panelsChecked)

	// The checks fail on a misspelt metric, matcher label, grouping label
	// or legend label.
	for _, bad := range []string{
		`sum by (state) (alloctrack_app_states)`,
		`sum by (state) (alloctrack_app_state{staet="tracking"})`,
		`sum by (stat) (alloctrack_app_state)`,
		`sum by (serial) (app:alloctrack_app_allocations:rate1m)`,
	} {
		if errs := c.check(bad); len(errs) == 0 {
			t.Errorf("name check passed %s", bad)
		}
	}
	if errs := legendErrors("{{serial}} {{packge}}", []map[string]string{{"serial": "s", "package": "p"}}); len(errs) == 0 {
		t.Errorf("legend check passed {{packge}}")
	}

	// The app dashboard's pprof link answers with a profile.
	for _, d := range dashboards {
		for _, l := range d.Links {
			if !strings.Contains(l.URL, "/debug/pprof/allocs") {
				continue
			}
			u := mixin.Substitute(l.URL, vars[d.UID])
			code, body, err := httpGet(u)
			if err != nil || code != 200 || len(body) == 0 {
				t.Errorf("%s link %q: GET %s: %d, %d bytes, %v", d.File, l.Title, u, code, len(body), err)
			}
		}
	}

	// Every rule evaluates without error.
	data, err := p.api("/api/v1/rules", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Name, Health, LastError string
			}
		}
	}
	if err := json.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, rl := range g.Rules {
			n++
			if rl.Health == "err" {
				t.Errorf("rule %s of group %s: %s", rl.Name, g.Name, rl.LastError)
			}
		}
	}
	if n == 0 {
		t.Errorf("Prometheus loaded no rules from %v", ruleFiles)
	}
}

type rule struct{ Record, Alert, Expr string }

func readRuleFile(t *testing.T, path string) []rule {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Groups []struct{ Rules []rule } }
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// nameChecker checks the metric and label names of a query against what
// Prometheus holds (and what the rules record).
type nameChecker struct {
	p        *promServer
	known    map[string]bool
	recorded []string
	labels   map[string]map[string]bool // metric -> its label names
}

func (c *nameChecker) labelsOf(metric string) (map[string]bool, error) {
	if l, ok := c.labels[metric]; ok {
		return l, nil
	}
	data, err := c.p.api("/api/v1/labels", url.Values{"match[]": {metric}})
	if err != nil {
		return nil, err
	}
	var names []string
	if err := json.Unmarshal(data, &names); err != nil {
		return nil, err
	}
	l := map[string]bool{}
	for _, n := range names {
		l[n] = true
	}
	c.labels[metric] = l
	return l, nil
}

func (c *nameChecker) check(q string) []error {
	n, err := mixin.Refs(q)
	if err != nil {
		return []error{err}
	}
	var errs []error
	all := map[string]bool{}
	for _, m := range n.Made {
		all[m] = true
	}
	for _, m := range n.Metrics {
		if !c.known[m] {
			if !slices.Contains(c.recorded, m) {
				errs = append(errs, fmt.Errorf("metric %s does not exist in Prometheus", m))
			}
			continue
		}
		l, err := c.labelsOf(m)
		if err != nil {
			return append(errs, err)
		}
		for k := range l {
			all[k] = true
		}
		for _, k := range n.Matchers[m] {
			if !l[k] {
				errs = append(errs, fmt.Errorf("%s has no label %s", m, k))
			}
		}
	}
	for _, k := range n.Grouping {
		if !all[k] {
			errs = append(errs, fmt.Errorf("grouping label %s is on none of %v", k, n.Metrics))
		}
	}
	return errs
}

// legendErrors reports legend labels missing from a series of the result.
func legendErrors(legend string, series []map[string]string) []error {
	var errs []error
	for _, l := range mixin.LegendLabels(legend) {
		for _, s := range series {
			if _, ok := s[l]; !ok {
				errs = append(errs, fmt.Errorf("legend %q: label %s missing from series %v", legend, l, s))
				break
			}
		}
	}
	return errs
}

// api calls a Prometheus HTTP API endpoint and returns its data.
func (p *promServer) api(path string, v url.Values) (json.RawMessage, error) {
	u := "http://" + p.addr + path
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	code, body, err := httpGet(u)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Status, ErrorType, Error string
		Data                     json.RawMessage
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d: %v: %.200s", path, code, err, body)
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", path, resp.ErrorType, resp.Error)
	}
	return resp.Data, nil
}

// labelValues lists the values of label on the series of selector (all
// series when empty).
func (p *promServer) labelValues(label, selector string) ([]string, error) {
	v := url.Values{}
	if selector != "" {
		v.Set("match[]", selector)
	}
	data, err := p.api("/api/v1/label/"+label+"/values", v)
	if err != nil {
		return nil, err
	}
	var out []string
	err = json.Unmarshal(data, &out)
	sort.Strings(out)
	return out, err
}

// run evaluates q as Grafana would: an instant query now, or a range query
// over the last 20 s with a 2 s step; it returns the labels of each series
// that has a value.
func (p *promServer) run(q string, instant bool) ([]map[string]string, error) {
	now := time.Now()
	ts := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }
	var data json.RawMessage
	var err error
	if instant {
		data, err = p.api("/api/v1/query", url.Values{"query": {q}, "time": {ts(now)}})
	} else {
		data, err = p.api("/api/v1/query_range", url.Values{"query": {q}, "start": {ts(now.Add(-20 * time.Second))}, "end": {ts(now)}, "step": {"2"}})
	}
	if err != nil {
		return nil, err
	}
	var res struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
			Values [][]any           `json:"values"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, err
	}
	if want := map[bool]string{true: "vector", false: "matrix"}[instant]; res.ResultType != want {
		return nil, fmt.Errorf("result type %s, want %s", res.ResultType, want)
	}
	var out []map[string]string
	for _, s := range res.Result {
		if len(s.Value) > 0 || len(s.Values) > 0 {
			out = append(out, s.Metric)
		}
	}
	return out, nil
}
