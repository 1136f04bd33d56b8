package main

import (
	"bufio"
	"fmt"
	"io"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

type diffCmd struct {
	cmd    *kingpin.CmdClause
	base   *string
	new    *string
	format *string
	top    *int
	every  *uint64
	gate   *gateFlags
	by     *string
	multi  *multiFlags
}

func newDiffCmd(app *kingpin.Application) *diffCmd {
	c := &diffCmd{cmd: app.Command("diff", "Compare two runs (report files, perfetto traces, tiallocsample agent logs or capture directories) per class and per allocation site, sorted by regression; counts from perfetto traces, and from agent logs given --agent.rate, are estimates. Exit status 4 if an input holds less than a whole run (see --allow-partial, --allow-empty). Two heap dumps (hprof files or heapdump capture directories) are compared per heap and class by retained bytes, with their leaks and duplicates.")}
	c.format = enum(c.cmd.Flag("format", "Output: text or json."), "format", "text", "text", "json")
	c.top = c.cmd.Flag("top", "How many classes and sites to list (0: all).").Default("20").Int()
	c.every = agentRateFlag(c.cmd)
	c.gate = addGateFlags(c.cmd)
	c.by = enum(c.cmd.Flag("by", "Compare per class and per site (class; site is the same for two runs), or test by test (test: two test runs, capture directories of alloctrack test or their tests.json; tests added, removed and changed, the largest increase in bytes first). With several runs a side: per test, class or site."), "by", "class", "class", "test", "site")
	c.multi = addMultiFlags(c.cmd)
	c.base = c.cmd.Arg("base", "The baseline: a report file, perfetto trace, tiallocsample agent log, heap dump or capture directory (or --base, repeated).").String()
	c.new = c.cmd.Arg("new", "The run to compare: a report file, perfetto trace, tiallocsample agent log, heap dump or capture directory (or --new, repeated).").String()
	return c
}

func readTally(path string, every uint64) (*alloctrack.Tally, *offline.Input, error) {
	in, err := offline.ReadInput(path)
	if err != nil {
		return nil, nil, err
	}
	in.Every = every
	t := alloctrack.NewTally()
	if err := in.AddTo(t); err != nil {
		return nil, nil, err
	}
	return t, in, nil
}

func (c *diffCmd) run(stdout, stderr io.Writer) int {
	if *c.top < 0 {
		fmt.Fprintf(stderr, "alloctrack diff: --top must not be negative, got %d\n", *c.top)
		return exitUsage
	}
	if code, done := c.sides(stderr); done {
		return code
	}
	if len(*c.multi.base) > 1 || len(*c.multi.new) > 1 {
		return c.diffRuns(stdout, stderr)
	}
	if *c.by == "test" {
		return c.diffByTest(stdout, stderr)
	}
	switch bd, nd := offline.HeapDumpPath(*c.base), offline.HeapDumpPath(*c.new); {
	case bd != "" && nd != "":
		return c.dumps(stdout, stderr, bd, nd)
	case (bd == "") != (nd == ""):
		fmt.Fprintf(stderr, "alloctrack diff: one input is a heap dump (what an app keeps) and the other holds allocations: they do not compare\n")
		return exitUsage
	}
	bt, bin, err := readTally(*c.base, *c.every)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack diff: base: %v\n", err)
		return exitFailure
	}
	nt, nin, err := readTally(*c.new, *c.every)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack diff: new: %v\n", err)
		return exitFailure
	}
	// Both, so that every reason is said at once.
	if bok, nok := c.gate.admit(stderr, "alloctrack diff", bin.Shortfall()), c.gate.admit(stderr, "alloctrack diff", nin.Shortfall()); !bok || !nok {
		return exitInsufficient
	}
	d := offline.Compare(bt, nt, bin.Duration, nin.Duration)
	d.BaseSamples, d.NewSamples = bin.Samples(), nin.Samples()
	classes, sites := shownOf(*c.top, len(d.Classes), "classes"), shownOf(*c.top, len(d.Sites), "sites")
	if *c.top > 0 {
		d.Classes = d.Classes[:min(*c.top, len(d.Classes))]
		d.Sites = d.Sites[:min(*c.top, len(d.Sites))]
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if *c.format == "json" {
		writeIndentedJSON(w, d)
		return exitOK
	}
	unit := "per run (a duration is known only for capture directories)"
	if d.PerSecond {
		unit = "per second"
	}
	mark := func(in *offline.Input) string {
		switch in.Kind() {
		case "heapprofd":
			return "  (perfetto trace: ESTIMATES from heapprofd samples, not exact counts)"
		case "agent":
			return fmt.Sprintf("  (agent log: ESTIMATES, samples x %d)", in.Every)
		case "samples":
			return "  (agent log: SAMPLES of an unknown rate, not allocations: give --agent.rate)"
		}
		return ""
	}
	fmt.Fprintf(w, "base %s%s\nnew  %s%s\nrates %s\nsites matched on %s\n\n", *c.base, mark(bin), *c.new, mark(nin), unit, d.Matching)
	fmt.Fprintf(w, "total: allocations %s -> %s (%s), bytes %s -> %s (%s)\n",
		f1(d.Base.Allocations), f1(d.New.Allocations), signed(d.New.Allocations-d.Base.Allocations),
		f1(d.Base.Bytes), f1(d.New.Bytes), signed(d.New.Bytes-d.Base.Bytes))
	header := fmt.Sprintf("  %12s %12s %12s %14s %14s %14s  %s\n", "base allocs", "new allocs", "change", "base bytes", "new bytes", "change", "")
	fmt.Fprint(w, "\n"+classes+", largest regression first\n"+header)
	for _, r := range d.Classes {
		fmt.Fprintf(w, "  %12s %12s %12s %14s %14s %14s  %s\n", f1(r.Base.Allocations), f1(r.New.Allocations), signed(r.Change.Allocations),
			f1(r.Base.Bytes), f1(r.New.Bytes), signed(r.Change.Bytes), r.Class)
	}
	fmt.Fprint(w, "\n"+sites+", largest regression first\n"+header)
	for _, r := range d.Sites {
		where := r.AppFrame
		if where == "" {
			where = "(no stack)"
		}
		fmt.Fprintf(w, "  %12s %12s %12s %14s %14s %14s  %s %s at %s\n", f1(r.Base.Allocations), f1(r.New.Allocations), signed(r.Change.Allocations),
			f1(r.Base.Bytes), f1(r.New.Bytes), signed(r.Change.Bytes), r.Site, r.Class, where)
	}
	return exitOK
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

func signed(v float64) string { return fmt.Sprintf("%+.1f", v) }

// dumps compares two heap dumps per heap and class.
func (c *diffCmd) dumps(stdout, stderr io.Writer, base, nw string) int {
	var an [2]*heapdump.Analysis
	for i, p := range []string{base, nw} {
		a, err := analyzeDump(p, 0)
		if err != nil {
			fmt.Fprintf(stderr, "alloctrack diff: %s: %v\n", []string{"base", "new"}[i], err)
			return exitFailure
		}
		an[i] = a
	}
	// Both, so that every reason is said at once.
	if bok, nok := c.gate.admit(stderr, "alloctrack diff", offline.DumpShortfall(base, an[0])), c.gate.admit(stderr, "alloctrack diff", offline.DumpShortfall(nw, an[1])); !bok || !nok {
		return exitInsufficient
	}
	d := offline.CompareDumps(an[0], an[1])
	classes := shownOf(*c.top, len(d.Classes), "classes")
	if *c.top > 0 {
		d.Classes = d.Classes[:min(*c.top, len(d.Classes))]
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if *c.format == "json" {
		writeIndentedJSON(w, d)
		return exitOK
	}
	fmt.Fprintf(w, "base %s (heap dump)\nnew  %s (heap dump)\n", *c.base, *c.new)
	fmt.Fprintf(w, "leaked Activities and Fragments %d -> %d, bytes wasted by duplicates %d -> %d\n", d.BaseLeaks, d.NewLeaks, d.BaseDuplicates, d.NewDuplicates)
	if d.BaseLeftOutBytes+d.NewLeftOutBytes > 0 {
		fmt.Fprintf(w, "left out, made by am dumpheap -b for the dump (Bitmap.dumpData): %d -> %d bytes\n", d.BaseLeftOutBytes, d.NewLeftOutBytes)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%s, largest growth in retained bytes first\n  %8s %10s %10s %12s %12s %12s  %s\n", classes, "heap", "base inst", "new inst", "base retained", "new retained", "change", "class")
	for _, r := range d.Classes {
		fmt.Fprintf(w, "  %8s %10d %10d %12d %12d %+12d  %s\n", r.Heap, r.Base.Instances, r.New.Instances, r.Base.Retained, r.New.Retained, r.Change.Retained, r.Class)
	}
	return exitOK
}
