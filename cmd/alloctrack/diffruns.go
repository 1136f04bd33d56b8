package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/alloctrack/gate"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// multiFlags are diff's flags for several runs a side.
type multiFlags struct {
	base, new        *[]string
	level, minEffect *float64
	metric           *string
	mixed            *bool
}

func addMultiFlags(cmd *kingpin.CmdClause) *multiFlags {
	return &multiFlags{
		base:      cmd.Flag("base", "A baseline run (repeat for several runs; then give the new runs with --new, not as arguments).").PlaceHolder("RUN").Strings(),
		new:       cmd.Flag("new", "A run to compare (repeat for several runs).").PlaceHolder("RUN").Strings(),
		level:     cmd.Flag("level", "With several runs a side: the chance of any false alarm in the whole diff (Holm's correction over all its comparisons).").Default("0.05").Float64(),
		minEffect: cmd.Flag("min-effect", "With several runs a side: the smallest increase that is a breach (0.10: +10 %).").Default("0.10").Float64(),
		mixed:     cmd.Flag("mixed", "With several runs a side: compare even runs of different devices or apps (a side's runs of several app versions, or sides of different device models, API levels or apps), flagged on stderr; without it such runs are refused (exit status 4).").Bool(),
		metric:    enum(cmd.Flag("metric", "With several runs a side: the figures compared, each one more comparison to correct for."), "metric", "both", "both", "allocations", "bytes"),
	}
}

// sides settles the base and new runs from the arguments or from --base
// and --new; one of each leaves *c.base and *c.new set for a two-run diff.
func (c *diffCmd) sides(stderr io.Writer) (int, bool) {
	const who = "alloctrack diff"
	fb, fn := *c.multi.base, *c.multi.new
	switch {
	case len(fb) == 0 && len(fn) == 0:
		if *c.base == "" || *c.new == "" {
			fmt.Fprintf(stderr, "%s: give a base and a new run (BASE NEW), or several a side with --base RUN... --new RUN...\n", who)
			return exitUsage, true
		}
		return 0, false
	case *c.base != "":
		fmt.Fprintf(stderr, "%s: give runs either as arguments or with --base and --new, not both\n", who)
		return exitUsage, true
	case len(fb) == 0 || len(fn) == 0:
		fmt.Fprintf(stderr, "%s: --base and --new go together: give at least one run with each\n", who)
		return exitUsage, true
	case !(*c.multi.level > 0 && *c.multi.level < 1) || *c.multi.minEffect <= 0:
		fmt.Fprintf(stderr, "%s: --level must be between 0 and 1 and --min-effect above 0, got %v and %v\n", who, *c.multi.level, *c.multi.minEffect)
		return exitUsage, true
	case len(fb) == 1 && len(fn) == 1:
		*c.base, *c.new = fb[0], fn[0]
	}
	return 0, false
}

// runsRow is one line of a diff over several runs a side.
type runsRow struct {
	Metric string `json:"metric"` // allocations or bytes
	Label  string `json:"label,omitempty"`
	// Runs a side that hold it: a test added or removed has 0 on one.
	BaseRuns, NewRuns int
	gate.Result
}

// runsDiff is what a diff over several runs a side writes as JSON.
type runsDiff struct {
	By          string              `json:"by"`
	Level       float64             `json:"level"`
	MinEffect   float64             `json:"min_effect"`
	Correction  string              `json:"correction"`
	PerSecond   bool                `json:"per_second"` // classes and sites per second of each capture, else per run
	Comparisons int                 `json:"comparisons"`
	Base, New   []offline.LoadedRun `json:"-"`
	Breaches    int                 `json:"breaches"`
	TooFew      int                 `json:"too_few"`
	RunsNeeded  int                 `json:"runs_needed"` // the most any row needs, a side
	Rows        []runsRow           `json:"-"`
}

func (c *diffCmd) diffRuns(stdout, stderr io.Writer) int {
	const who = "alloctrack diff"
	var sets [2]*offline.RunSet
	for i, paths := range [][]string{*c.multi.base, *c.multi.new} {
		rs, err := offline.LoadRunsRate(paths, *c.every)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n", who, []string{"base", "new"}[i], err)
			return exitFailure
		}
		sets[i] = rs
	}
	if !c.admitRuns(stderr, sets) || !c.admitKeys(stderr) {
		return exitInsufficient
	}
	d := c.judgeRuns(sets)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if *c.format == "json" {
		writeIndentedJSON(w, jsonRunsDiff(d))
	} else {
		writeRunsDiff(w, d, *c.top)
	}
	if d.TooFew > 0 {
		fmt.Fprintf(stderr, "%s: too few runs to detect +%g %% at level %g in %d of %d rows: up to %d runs a side would (base has %d, new %d)\n",
			who, *c.multi.minEffect*100, *c.multi.level, d.TooFew, len(d.Rows), d.RunsNeeded, len(d.Base), len(d.New))
	}
	if d.Breaches > 0 {
		return exitBudget
	}
	return exitOK
}

// admitRuns applies the two-run diff's rules to every run, saying every
// reason at once; with --by test a run must hold tests.
func (c *diffCmd) admitRuns(stderr io.Writer, sets [2]*offline.RunSet) bool {
	const who = "alloctrack diff"
	ok := true
	for _, rs := range sets {
		for _, r := range rs.Runs {
			if *c.by == "test" && !r.Tests {
				fmt.Fprintf(stderr, "%s: %s holds no test run (%s): --by test needs capture directories of alloctrack test or their tests.json\n", who, r.Path, offline.TestsFile)
				ok = false
				continue
			}
			if *c.by != "test" && r.Kind == offline.TestsFile {
				fmt.Fprintf(stderr, "%s: %s holds tests only, no classes or sites: use --by test\n", who, r.Path)
				ok = false
				continue
			}
			sf := r.Shortfall
			if sf == nil && *c.by == "test" {
				sf = r.Partial
			}
			ok = c.gate.admit(stderr, who, sf) && ok
		}
	}
	return ok
}

// admitKeys refuses runs of different devices or apps (see
// offline.MixedRuns), or with --mixed only says so.
func (c *diffCmd) admitKeys(stderr io.Writer) bool {
	mixed := offline.MixedRuns(*c.multi.base, *c.multi.new)
	for _, m := range mixed {
		fmt.Fprintf(stderr, "alloctrack diff: %s\n", m)
	}
	if len(mixed) > 0 && !*c.multi.mixed {
		fmt.Fprintln(stderr, "alloctrack diff: runs of different devices or apps are not compared; --mixed compares them anyway")
		return false
	}
	return true
}

// judgeRuns compares allocations and bytes of every key as one gate.
func (c *diffCmd) judgeRuns(sets [2]*offline.RunSet) *runsDiff {
	metrics := []string{"allocations", "bytes"}
	if *c.multi.metric != "both" {
		metrics = []string{*c.multi.metric}
	}
	series, metricOf := offline.DiffSeries(sets[0], sets[1], *c.by, metrics)
	res := gate.Compare(series, gate.Config{Level: *c.multi.level, MinEffect: *c.multi.minEffect})
	d := &runsDiff{By: *c.by, Level: *c.multi.level, MinEffect: *c.multi.minEffect, Correction: "holm",
		Base: sets[0].Runs, New: sets[1].Runs, PerSecond: offline.PerSecond(sets[0], sets[1], *c.by)}
	for i, r := range res {
		row := runsRow{Metric: metricOf[i], Result: r, BaseRuns: len(series[i].Base), NewRuns: len(series[i].New)}
		if *c.by == "site" {
			row.Label = sets[1].SiteLabels[strings.TrimPrefix(r.Key, "site:")]
			row.Label = cmp.Or(row.Label, sets[0].SiteLabels[strings.TrimPrefix(r.Key, "site:")])
		}
		if !math.IsInf(r.Lo, 0) {
			d.Comparisons++
		}
		if r.Breach {
			d.Breaches++
		}
		if r.TooFew && row.BaseRuns > 0 && row.NewRuns > 0 {
			d.TooFew++
			d.RunsNeeded = max(d.RunsNeeded, r.RunsNeeded)
		}
		d.Rows = append(d.Rows, row)
	}
	slices.SortStableFunc(d.Rows, func(a, b runsRow) int {
		return cmp.Or(cmp.Compare(oneSided(a), oneSided(b)), cmp.Compare(b.Ratio, a.Ratio), strings.Compare(a.Key, b.Key), strings.Compare(a.Metric, b.Metric))
	})
	return d
}

// oneSided: 1 for a row only one side holds (a test added or removed),
// listed after the rows compared.
func oneSided(r runsRow) int {
	if r.BaseRuns == 0 || r.NewRuns == 0 {
		return 1
	}
	return 0
}
