package main

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// writeRunsDiff writes the rows, the largest ratio first.
func writeRunsDiff(w io.Writer, d *runsDiff, top int) {
	for i, side := range [][]offline.LoadedRun{d.Base, d.New} {
		fmt.Fprintf(w, "%-4s %d runs: %s\n", []string{"base", "new"}[i], len(side), runKinds(side))
	}
	fmt.Fprintf(w, "by %s; level %g over %d comparisons (Holm); breach: significant and above +%g %%\n", d.By, d.Level, d.Comparisons, d.MinEffect*100)
	fmt.Fprintf(w, "intervals hold together at %g %%; CV: run-to-run variation; runs: runs a side that would find +%g %%\n\n", (1-d.Level)*100, d.MinEffect*100)
	rows := d.Rows
	if top > 0 && len(rows) > top {
		rows = rows[:top]
	}
	fmt.Fprintf(w, "%s, largest regression first\n", shownOf(top, len(d.Rows), "rows"))
	fmt.Fprintf(w, "  %-11s %-11s %8s %17s %8s %13s %6s %13s %6s %5s  %s\n", "verdict", "metric", "ratio", "interval", "P", "base median", "CV", "new median", "CV", "runs", d.By)
	for _, r := range rows {
		fmt.Fprintf(w, "  %-11s %-11s %8s %17s %8s %13.1f %6s %13.1f %6s %5d  %s\n", verdict(r), r.Metric, num(r.Ratio, "%.3f"),
			"["+num(r.Lo, "%.3f")+", "+num(r.Hi, "%.3f")+"]", num(r.P, "%.2g"), r.BaseMedian, pct(r.BaseCV), r.NewMedian, pct(r.NewCV), r.RunsNeeded, rowName(r))
	}
}

func verdict(r runsRow) string {
	switch {
	case r.Breach:
		return "BREACH"
	case r.Significant && r.Ratio > 1:
		return "up"
	case r.Significant:
		return "down"
	case r.TooFew:
		return "too-few"
	}
	return "-"
}

func rowName(r runsRow) string {
	name := r.Key[strings.IndexByte(r.Key, ':')+1:]
	if r.Label != "" {
		name += " " + r.Label
	}
	return name
}

func num(v float64, format string) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", v*100) }

// runKinds says what kinds of run a side holds, e.g. "3 exact, 2 heapprofd (estimates)".
func runKinds(runs []offline.LoadedRun) string {
	var order []string
	n := map[string]int{}
	for _, r := range runs {
		k := r.Kind
		if r.Estimated {
			k += " (estimates)"
		}
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%d %s", n[k], k)
	}
	return strings.Join(parts, ", ")
}

// jsonRunsDiff is d with its infinities as null.
func jsonRunsDiff(d *runsDiff) any {
	type jrow struct {
		Metric     string   `json:"metric"`
		Key        string   `json:"key"`
		Label      string   `json:"label,omitempty"`
		BaseMedian float64  `json:"base_median"`
		NewMedian  float64  `json:"new_median"`
		BaseMAD    float64  `json:"base_mad"`
		NewMAD     float64  `json:"new_mad"`
		BaseCV     float64  `json:"base_cv"`
		NewCV      float64  `json:"new_cv"`
		Ratio      *float64 `json:"ratio"` // null: the base is 0
		Lo         *float64 `json:"lo"`    // null: not tested (fewer than 2 runs a side)
		Hi         *float64 `json:"hi"`
		P          float64  `json:"p"` // Holm-adjusted
		Signif     bool     `json:"significant"`
		Breach     bool     `json:"breach"`
		TooFew     bool     `json:"too_few"`
		RunsNeeded int      `json:"runs_needed"`
	}
	type jrun struct {
		Path      string `json:"path"`
		Kind      string `json:"kind"`
		Tests     bool   `json:"tests"`
		Estimated bool   `json:"estimated"`
	}
	fin := func(v float64) *float64 {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil
		}
		return &v
	}
	runs := func(rs []offline.LoadedRun) []jrun {
		out := make([]jrun, len(rs))
		for i, r := range rs {
			out[i] = jrun{r.Path, r.Kind, r.Tests, r.Estimated}
		}
		return out
	}
	rows := make([]jrow, len(d.Rows))
	for i, r := range d.Rows {
		rows[i] = jrow{r.Metric, r.Key, r.Label, r.BaseMedian, r.NewMedian, r.BaseMAD, r.NewMAD, r.BaseCV, r.NewCV,
			fin(r.Ratio), fin(r.Lo), fin(r.Hi), r.P, r.Significant, r.Breach, r.TooFew, r.RunsNeeded}
	}
	return struct {
		*runsDiff
		BaseRuns []jrun `json:"base_runs"`
		NewRuns  []jrun `json:"new_runs"`
		Rows     []jrow `json:"rows"`
	}{d, runs(d.Base), runs(d.New), rows}
}
