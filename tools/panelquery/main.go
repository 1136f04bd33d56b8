// Command panelquery times every query of the mixin's dashboards against a
// Prometheus, as Grafana would run them (range queries over -range with
// -step, instant queries at the end), with the dashboards' variables set
// from label values, and prints them slowest first. It is a measurement,
// not a test.
//
//	go run ./tools/panelquery -prometheus http://127.0.0.1:9090 -range 5m -step 15s
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/alloctrack/alloctrack/mixin"
)

func main() {
	prom := flag.String("prometheus", "http://127.0.0.1:9090", "Prometheus base URL")
	rng := flag.Duration("range", 5*time.Minute, "range of range queries (the dashboard's time range)")
	step := flag.Duration("step", 15*time.Second, "step of range queries")
	rate := flag.String("rate-interval", "1m", "value of $__rate_interval")
	runs := flag.Int("runs", 5, "times each query runs; the median is printed")
	flag.Parse()
	if err := run(*prom, *rng, *step, *rate, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "panelquery:", err)
		os.Exit(1)
	}
}

func get(base, path string, v url.Values) (json.RawMessage, error) {
	resp, err := http.Get(base + path + "?" + v.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status, Error string
		Data          json.RawMessage
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d: %v", path, resp.StatusCode, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", path, r.Error)
	}
	return r.Data, nil
}

type result struct {
	what   string
	median time.Duration
	series int
}

func run(base string, rng, step time.Duration, rate string, runs int) error {
	ds, err := mixin.Dashboards()
	if err != nil {
		return err
	}
	var out []result
	for _, d := range ds {
		vars := map[string]string{"__rate_interval": rate, "__range": rng.String(), "__interval": step.String()}
		for _, tv := range d.Templating.List {
			if tv.Type != "query" {
				continue
			}
			sel, label, err := mixin.LabelValuesQuery(mixin.Substitute(tv.QueryText(), vars))
			if err != nil {
				return err
			}
			data, err := get(base, "/api/v1/label/"+label+"/values", url.Values{"match[]": {sel}})
			if err != nil {
				return err
			}
			var values []string
			if err := json.Unmarshal(data, &values); err != nil || len(values) == 0 {
				return fmt.Errorf("%s: variable %s: no values (%v)", d.File, tv.Name, err)
			}
			if tv.Multi && tv.IncludeAll {
				vars[tv.Name] = tv.AllValue
			} else {
				vars[tv.Name] = values[0]
			}
		}
		fmt.Printf("%s: variables %v\n", d.File, vars)
		for _, p := range d.AllPanels() {
			for _, tg := range p.Targets {
				q := mixin.Substitute(tg.Expr, vars)
				var times []time.Duration
				series := 0
				for range runs {
					end := time.Now()
					v := url.Values{"query": {q}}
					path := "/api/v1/query"
					if tg.Instant {
						v.Set("time", strconv.FormatInt(end.Unix(), 10))
					} else {
						path = "/api/v1/query_range"
						v.Set("start", strconv.FormatInt(end.Add(-rng).Unix(), 10))
						v.Set("end", strconv.FormatInt(end.Unix(), 10))
						v.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
					}
					t0 := time.Now()
					data, err := get(base, path, v)
					times = append(times, time.Since(t0))
					if err != nil {
						return fmt.Errorf("%s / %s / %s: %v", d.UID, p.Title, tg.RefID, err)
					}
					var res struct{ Result []json.RawMessage }
					json.Unmarshal(data, &res)
					series = len(res.Result)
				}
				slices.Sort(times)
				out = append(out, result{fmt.Sprintf("%s / %s / %s", d.UID, p.Title, tg.RefID), times[len(times)/2], series})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].median > out[j].median })
	fmt.Printf("%d queries, median of %d runs each (HTTP round trip), range %v step %v, $__rate_interval %s:\n", len(out), runs, rng, step, rate)
	for _, r := range out {
		fmt.Printf("  %10v %6d series  %s\n", r.median.Round(100*time.Microsecond), r.series, r.what)
	}
	return nil
}
