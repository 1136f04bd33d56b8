package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/agentlog"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/tialloc"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/perfetto"
)

type reportCmd struct {
	cmd    *kingpin.CmdClause
	inputs *[]string
	format *string
	top    *int
	class  *string
	frame  *string
	thread *int
	output *string
	budget *string
	every  *uint64
	weight *string
	gate   *gateFlags
	by     *string
	bud    *offline.Budget // read from --budget
}

// agentRateFlag is --agent.rate, for the commands that read agent logs.
func agentRateFlag(cmd *kingpin.CmdClause) *uint64 {
	return cmd.Flag("agent.rate", "The sample rate a tiallocsample agent log was taken with (the agent's first argument: it logs one allocation in N per thread); the log does not record it. Given, counts are estimates (samples times N); not given, they are samples.").PlaceHolder("N").Uint64()
}

func newReportCmd(app *kingpin.Application) *reportCmd {
	c := &reportCmd{cmd: app.Command("report", "Summarise allocation reports: raw REAL payloads (the bytes Android Studio saves as .alloc), perfetto heapprofd traces (Android 12+; counts are estimates from samples), tiallocsample agent logs (samples, or estimates with --agent.rate), capture directories and heap dumps.")}
	c.format = enum(c.cmd.Flag("format", "Output: text (summary per input), jsonl (one object per allocation, in payload order), json (summary of all inputs), csv (one row per site), pprof (profile of all inputs), folded (one line per site, root frame first, the class as the leaf, then the count: the input of flamegraph.pl, inferno and speedscope)."),
		"format", "text", "text", "jsonl", "json", "csv", "pprof", "folded")
	c.weight = enum(c.cmd.Flag("weight", "What --format folded counts: allocations (or samples, or estimates) or bytes."), "weight", "allocations", "allocations", "bytes")
	c.top = c.cmd.Flag("top", "How many classes and sites to list (0: all).").Default("10").Int()
	c.class = c.cmd.Flag("class", "Only allocations whose class this regular expression matches, whole (the dotted name: 'byte\\[\\]', 'android\\.os\\..*'), as budgets match names.").String()
	c.frame = c.cmd.Flag("frame", "Only allocations with a frame this regular expression matches, whole: its method pkg.Class.method, or as shown with (File.java:line).").String()
	c.thread = c.cmd.Flag("thread", "Only allocations of this thread id.").Default("-1").Int()
	c.output = c.cmd.Flag("out", "Write to this file instead of standard output.").Short('o').String()
	c.cmd.Flag("output", "The old name of --out.").Hidden().StringVar(c.output)
	c.budget = c.cmd.Flag("budget", "Check the allocations, or heap dumps (its heap: limits), against a budget file (YAML); exit status 3 if it is exceeded, 4 if an input holds less than a whole run, 5 if a rule matched nothing.").String()
	c.every = agentRateFlag(c.cmd)
	c.gate = addGateFlags(c.cmd)
	c.by = enum(c.cmd.Flag("by", "Summarise per input, or per test (test: each test of a test run, a capture directory of alloctrack test or its tests.json, the most bytes first; with --budget, its tests: rules are judged)."), "by", "input", "input", "test")
	c.inputs = c.cmd.Arg("input", "Report files, perfetto traces, tiallocsample agent logs, capture directories, or heap dumps (hprof: a class histogram per heap).").Required().Strings()
	return c
}

// filters builds the allocation filter of --class, --frame, --thread.
func filters(class, frame string, thread int) (func(r *allocreport.Report, i int) bool, error) {
	for flag, expr := range map[string]string{"--class": class, "--frame": frame} {
		if _, err := offline.CompileName(expr); expr != "" && err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
	}
	cre, fre := nameMatcher(class), nameMatcher(frame)
	if thread > 0xffff || thread < -1 {
		return nil, fmt.Errorf("--thread %d: thread ids are 0-65535", thread)
	}
	if cre == nil && fre == nil && thread < 0 {
		return nil, nil
	}
	return func(r *allocreport.Report, i int) bool {
		a := &r.Allocations[i]
		if thread >= 0 && int(a.Thread) != thread {
			return false
		}
		if cre != nil && !cre.Class(r.ClassName(a)) {
			return false
		}
		if fre != nil {
			for _, f := range r.Stack(a).All() {
				if fre.Frame(r.FrameString(f)) {
					return true
				}
			}
			return false
		}
		return true
	}, nil
}

// nameMatcher returns the matcher of a name expression that filters has
// checked; nil for "".
func nameMatcher(expr string) *offline.NameMatcher {
	if expr == "" {
		return nil
	}
	m, err := offline.CompileName(expr)
	if err != nil {
		panic(err) // checked by filters
	}
	return m
}

func (c *reportCmd) run(stdout, stderr io.Writer) int {
	if *c.top < 0 {
		fmt.Fprintf(stderr, "alloctrack report: --top must not be negative, got %d\n", *c.top)
		return exitUsage
	}
	keep, err := filters(*c.class, *c.frame, *c.thread)
	if err != nil {
		fmt.Fprintf(stderr, "alloctrack report: %v\n", err)
		return exitUsage
	}
	if *c.budget != "" {
		if c.bud, err = offline.ReadBudget(*c.budget); err != nil {
			fmt.Fprintf(stderr, "alloctrack report: %v\n", err)
			return exitUsage
		}
		if c.bud.HasRelative() {
			fmt.Fprintf(stderr, "alloctrack report: note: %s's relative: rules are judged by alloctrack baseline check, against a baseline store; report judges only absolute limits\n", *c.budget)
		}
	}
	if *c.by == "test" {
		return c.reportByTest(stdout, stderr)
	}
	testBud := c.bud // its tests: rules are judged on the inputs' test runs
	if c.bud != nil && c.bud.HasTestLimits() && !c.bud.HasAllocationLimits() && !c.bud.HasHeapLimits() {
		c.bud = nil // tests: rules only: the allocations are not judged
	}
	bud := c.bud
	out := stdout
	if *c.output != "" {
		f, err := os.Create(*c.output)
		if err != nil {
			fmt.Fprintf(stderr, "alloctrack report: %v\n", err)
			return exitFailure
		}
		defer f.Close()
		out = f
	}
	w := bufio.NewWriterSize(out, 64<<10)
	defer w.Flush()

	st := &reportState{all: alloctrack.NewTally(), durationKnown: true}
	dumps := 0 // heap dumps, reported on their own
	for _, name := range *c.inputs {
		if c.isTestsFile(name) {
			w.Flush()
			fmt.Fprintf(stderr, "alloctrack report: %s is a test run's %s: report it with --by test, or give its capture directory\n", name, offline.TestsFile)
			st.status = worse(st.status, exitUsage)
			continue
		}
		if dump := offline.HeapDumpPath(name); dump != "" {
			dumps++
			st.status = worse(st.status, c.heapDump(w, stderr, dump))
			continue
		}
		c.allocInput(st, w, stderr, name, keep)
	}
	status, all, prof, samplesOnly, duration := st.status, st.all, st.prof, st.samplesOnly, st.duration
	if !st.durationKnown {
		duration = 0
	}
	format := *c.format
	if dumps == len(*c.inputs) {
		format = "" // heap dumps only: nothing to summarise across inputs
	}
	switch format {
	case "json":
		writeJSONSummary(w, *c.inputs, all, duration, *c.top, samplesOnly)
	case "csv":
		writeCSV(w, all, *c.top)
	case "folded":
		writeFolded(w, all, *c.weight == "bytes")
	case "pprof":
		if prof == nil {
			prof = alloctrack.NewProfileBuilder()
		}
		if err := prof.Profile(time.Now(), duration).Write(w); err != nil {
			fmt.Fprintf(stderr, "alloctrack report: writing profile: %v\n", err)
			return exitFailure
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "alloctrack report: writing output: %v\n", err)
		return exitFailure
	}
	if bud == nil && dumps < len(*c.inputs) && (*c.class != "" || *c.frame != "") && c.emptyTally(all) != nil {
		fmt.Fprintf(stderr, "alloctrack report: note: --class and --frame kept no allocation (names match whole: see docs/offline.md#matching-names)\n")
	}
	if testBud != nil && testBud.HasTestLimits() && (status == exitOK || status == exitBudget || status == exitUnmatched) {
		status = worse(status, c.judgeTestRuns(stderr, testBud))
	}
	// The allocations are judged too when heap dumps were judged (3, 5).
	if bud == nil || dumps == len(*c.inputs) || (status != exitOK && status != exitBudget && status != exitUnmatched) {
		return status
	}
	return worse(status, c.judgeAllocations(stderr, all, duration, st.insufficient, samplesOnly))
}

// reportState is what report's inputs add up to.
type reportState struct {
	status        int
	all           *alloctrack.Tally
	prof          *alloctrack.ProfileBuilder
	profKind      string
	samplesOnly   bool // an input counted samples of unknown rate
	duration      time.Duration
	durationKnown bool
	insufficient  bool // an input the budget may not judge
}

// allocInput reports the allocations of input name (not a heap dump) as
// the format asks, with the filter keep, and adds them to st.
func (c *reportCmd) allocInput(st *reportState, w *bufio.Writer, stderr io.Writer, name string, keep func(r *allocreport.Report, i int) bool) {
	in, err := offline.ReadInput(name)
	if err != nil {
		w.Flush()
		fmt.Fprintf(stderr, "alloctrack report: %v\n", err)
		st.status = exitFailure
		return
	}
	in.Every = *c.every
	if !c.admit(w, stderr, in) {
		st.insufficient = true
	}
	if in.Duration > 0 {
		st.duration += in.Duration
	} else {
		st.durationKnown = false
	}
	if msg := c.refuse(in); msg != "" {
		w.Flush()
		fmt.Fprintf(stderr, "alloctrack report: %s: %s\n", name, msg)
		st.status = exitUsage
		return
	}
	if *c.format == "pprof" {
		if st.prof == nil {
			st.prof, st.profKind = newProfileBuilder(in), in.Kind()
		} else if st.profKind != in.Kind() {
			w.Flush()
			fmt.Fprintf(stderr, "alloctrack report: %s: --format pprof cannot mix inputs whose counts differ in kind (%s, %s) in one profile\n", name, st.profKind, in.Kind())
			st.status = exitUsage
			return
		}
	}
	if in.Samples() {
		st.samplesOnly = true
	}
	t, overflowed, trailing, err := c.count(st, w, stderr, in, keep)
	if err != nil {
		w.Flush()
		fmt.Fprintf(stderr, "alloctrack report: %v\n", err)
		st.status = exitFailure
		return
	}
	if *c.format == "text" {
		writeSummary(w, in, t, overflowed, trailing, *c.top)
	}
}

// count counts input in (filtered by keep and the flags) into a tally of
// its own and st's, writing its allocations as jsonl asks; overflowed and
// trailing are its reports' windows that overflowed and bytes after their
// data. A sum past 2^64 or a log whose estimates do not fit is an error.
func (c *reportCmd) count(st *reportState, w *bufio.Writer, stderr io.Writer, in *offline.Input, keep func(r *allocreport.Report, i int) bool) (t *alloctrack.Tally, overflowed, trailing int, err error) {
	t = alloctrack.NewTally()
	var addErr error // the first sum past 2^64
	add := func(win *alloctrack.Window) {
		if addErr != nil {
			return
		}
		if addErr = offline.AddWindow(t, win); addErr == nil {
			addErr = offline.AddWindow(st.all, win)
		}
		if addErr != nil || *c.format != "pprof" {
			return
		}
		if err := st.prof.Add(win); err != nil {
			fmt.Fprintf(stderr, "alloctrack report: %s: %v\n", in.Name, err)
			st.status = exitUsage
		}
	}
	if in.Log != nil {
		if keep := logFilter(*c.class, *c.frame); keep != nil {
			in.Log = keep(in.Log)
		}
		win, err := in.LogWindow()
		if err != nil {
			return nil, 0, 0, err
		}
		add(win)
	}
	for _, d := range in.Dumps {
		if keep := frameFilter(*c.frame); keep != nil {
			d = keep(d)
		}
		add(heapprofd.WindowOfDump(d, time.Time{}, time.Time{}))
	}
	for _, r := range in.Reports {
		if keep != nil {
			r = r.Filter(keep)
		}
		win := ddm.WindowOfReport(r, time.Time{}, time.Time{})
		add(win)
		win.Release()
		if r.Overflowed() {
			overflowed++
		}
		trailing += r.TrailingBytes
		switch *c.format {
		case "jsonl":
			var line []byte
			for i := range r.Allocations {
				line = r.AppendJSON(line[:0], i)
				w.Write(append(line, '\n'))
			}
		}
	}
	if addErr != nil {
		return nil, 0, 0, fmt.Errorf("%s: %w", in.Name, addErr)
	}
	return t, overflowed, trailing, nil
}

// judgeAllocations checks the allocations of every input (all, over
// duration) against the budget, unless an input may not be judged.
func (c *reportCmd) judgeAllocations(stderr io.Writer, all *alloctrack.Tally, duration time.Duration, insufficient, samplesOnly bool) int {
	switch {
	case samplesOnly:
		fmt.Fprintf(stderr, "alloctrack report: --budget: agent log counts are samples of an unknown rate, not allocations: give --agent.rate to check a budget\n")
		return exitUsage
	case insufficient:
		fmt.Fprintf(stderr, "alloctrack report: the budget was not judged: an input holds less than a whole run\n")
		return exitInsufficient
	case !c.gate.admit(stderr, "alloctrack report", c.emptyTally(all)):
		return exitInsufficient
	}
	return checkBudget(stderr, "alloctrack report", c.bud, all, duration)
}

// worse returns the exit status that wins of a and b: a failure or a
// usage error, then 4 (not judged), 6 (tests failed), 3 (over budget), 5
// (a rule matched nothing), 0.
func worse(a, b int) int {
	rank := map[int]int{exitOK: 0, exitUnmatched: 1, exitBudget: 2, exitTestsFailed: 3, exitInsufficient: 4, exitFailure: 5, exitUsage: 6}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// admit tells whether the budget may judge input in (see gateFlags); with
// no budget, an input that holds less than a run gets a note.
func (c *reportCmd) admit(w *bufio.Writer, stderr io.Writer, in *offline.Input) bool {
	sf := in.Shortfall()
	if sf == nil {
		return true
	}
	w.Flush()
	if c.bud == nil {
		fmt.Fprintf(stderr, "alloctrack report: note: %v\n", sf)
		return true
	}
	return c.gate.admit(stderr, "alloctrack report", sf)
}

// emptyTally says, when t (all the inputs, as the filters kept them) holds
// no allocation, that there is nothing to judge.
func (c *reportCmd) emptyTally(t *alloctrack.Tally) *offline.ShortfallError {
	if t.Total.Allocations > 0 || t.Sampled.Allocations > 0 {
		return nil
	}
	why := "the inputs hold no allocation"
	if *c.class != "" || *c.frame != "" || *c.thread >= 0 {
		why = "--class, --frame and --thread keep no allocation of the inputs"
	}
	return &offline.ShortfallError{Input: "all inputs", Why: why, Empty: true}
}

// checkBudget prints every violation and returns exitBudget if any.
func checkBudget(stderr io.Writer, who string, bud *offline.Budget, t *alloctrack.Tally, d time.Duration) int {
	if !bud.HasAllocationLimits() {
		what := "heap dumps only (heap:)"
		switch {
		case bud.HasTestLimits() && bud.HasHeapLimits():
			what = "tests and heap dumps only (tests:, heap:)"
		case bud.HasTestLimits():
			what = "tests only (tests:)"
		}
		fmt.Fprintf(stderr, "%s: the budget limits %s, and the inputs are allocations\n", who, what)
		return exitUsage
	}
	all, err := bud.Measure(t, d)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", who, err)
		if errors.Is(err, offline.ErrBudget) {
			return exitUsage
		}
		return exitFailure
	}
	return judge(stderr, who, all)
}

// judge prints every exceeded measurement and every rule that matched
// nothing, and returns exitBudget if a limit is exceeded, else
// exitUnmatched if a rule that is not optional matched nothing, else says
// the run is within budget, with each limit's margin.
func judge(stderr io.Writer, who string, all []offline.Measurement) int {
	status := exitOK
	for _, m := range all {
		if m.Exceeded() {
			fmt.Fprintf(stderr, "%s: budget exceeded: %s\n", who, m)
			status = exitBudget
		}
	}
	unmatched := false
	for i, m := range all {
		u := m.Unmatched
		if u == nil || (i > 0 && all[i-1].Rule == m.Rule) {
			continue // one line per rule
		}
		why := "names match whole: see docs/offline.md#matching-names"
		if u.Why != "" {
			why = u.Why
		} else if len(u.Near) > 0 {
			why += "; it matches part of " + strings.Join(u.Near, ", ")
		}
		if u.Optional {
			fmt.Fprintf(stderr, "%s: warning: budget rule %s matched no %s (%s); optional: true, so not a failure\n", who, m.Rule, u.Names, why)
			continue
		}
		fmt.Fprintf(stderr, "%s: budget rule %s matched no %s (%s); exit status %d unless the rule says optional: true\n", who, m.Rule, u.Names, why, exitUnmatched)
		unmatched = true
	}
	switch {
	case status == exitOK && unmatched:
		return exitUnmatched
	case status == exitOK:
		fmt.Fprintf(stderr, "%s: within budget (%d limits)\n", who, len(all))
		for _, m := range all {
			fmt.Fprintf(stderr, "  %s\n", m.Margin())
		}
	}
	return status
}

func writeSummary(w io.Writer, in *offline.Input, t *alloctrack.Tally, overflowed, trailing, top int) {
	fmt.Fprintf(w, "%s\n", in.Name)
	est := ""
	if in.Trace != "" {
		est = "estimated "
		fmt.Fprintf(w, "  perfetto trace %s (heapprofd, Java heap): SAMPLED, allocation counts below are ESTIMATES\n", in.Trace)
		fmt.Fprintf(w, "  dumps %d, sampling interval %d bytes, samples %d, sampled bytes %d (exact)\n", t.Dumps, t.SamplingInterval, t.Sampled.Allocations, t.Sampled.Bytes)
		fmt.Fprintf(w, "  estimated allocations %d, estimated bytes %d, sites %d (no classes: heapprofd does not record them)\n", t.Total.Allocations, t.Total.Bytes, t.Sites())
		if n := t.ErrorStackSamples + t.UnknownStackSamples; n > 0 {
			fmt.Fprintf(w, "  %d samples on stacks that did not unwind (%d ERROR, %d unknown: the Android 12/13 ART unwinding bug)\n", n, t.ErrorStackSamples, t.UnknownStackSamples)
		}
		if in.OtherHeapDumps > 0 {
			fmt.Fprintf(w, "  %d dumps of other heaps than %s ignored\n", in.OtherHeapDumps, "com.android.art")
		}
	} else if in.Log != nil {
		writeLogHead(w, in, t)
	} else {
		fmt.Fprintf(w, "  reports %d, allocations %d, bytes %d, classes %d, sites %d\n", len(in.Reports), t.Total.Allocations, t.Total.Bytes, len(t.Classes), t.Sites())
	}
	if in.Duration > 0 {
		s := in.Duration.Seconds()
		fmt.Fprintf(w, "  duration %.1fs: %.1f %sallocations/s, %.1f %sbytes/s\n", s, float64(t.Total.Allocations)/s, est, float64(t.Total.Bytes)/s, est)
	}
	if overflowed > 0 {
		fmt.Fprintf(w, "  %d report(s) full (65,535 entries): older allocations of those windows were lost\n", overflowed)
	}
	if trailing > 0 {
		fmt.Fprintf(w, "  %d bytes after the string tables were ignored\n", trailing)
	}
	count, bytes := "allocs", "bytes" // the class columns
	switch {
	case in.Samples():
		count, bytes = "samples", "smp bytes"
	case in.Estimated():
		count, bytes = "~allocs", "~bytes"
	}
	for _, by := range []struct {
		title string
		bytes bool
	}{{"by count", false}, {"by bytes", true}} {
		if in.Trace != "" {
			break
		}
		fmt.Fprintf(w, "\n  %s %s\n  %8s %10s  %s\n", shownOf(top, len(t.Classes), "classes"), by.title, count, bytes, "class")
		for _, cc := range t.TopClasses(top, by.bytes) {
			fmt.Fprintf(w, "  %8d %10d  %s\n", cc.Allocations, cc.Bytes, cc.Class)
		}
	}
	sites := shownOf(top, t.Sites(), "allocation sites")
	if in.Estimated() {
		fmt.Fprintf(w, "\n  %s by estimated count (~: estimate; samples exact)\n  %9s %11s %8s  %s\n", sites, "~allocs", "~bytes", "samples", "class / app frame / stack")
	} else if in.Samples() {
		fmt.Fprintf(w, "\n  %s by samples\n  %8s %10s  %s\n", sites, "samples", "smp bytes", "class / app frame / stack")
	} else {
		fmt.Fprintf(w, "\n  %s by count\n  %8s %10s  %s\n", sites, "allocs", "bytes", "class / app frame / stack")
	}
	for _, s := range t.TopSites(top, false) {
		if s.Estimated {
			fmt.Fprintf(w, "  %9s %11s %8d  %s[site %s]\n", "~"+strconv.FormatUint(s.Allocations, 10), "~"+strconv.FormatUint(s.Bytes, 10), s.Sampled.Allocations, cond(s.Class != "", s.Class+"  ", ""), s.ID)
		} else {
			fmt.Fprintf(w, "  %8d %10d  %s  [site %s]\n", s.Allocations, s.Bytes, s.Class, s.ID)
		}
		if s.AppFrame != "" {
			fmt.Fprintf(w, "  %19s    app frame %s\n", "", s.AppFrame)
		}
		frames := s.Frames
		const show = 4
		for _, f := range frames[:min(show, len(frames))] {
			fmt.Fprintf(w, "  %19s    at %s\n", "", f)
		}
		if len(frames) > show {
			fmt.Fprintf(w, "  %19s    … %d more frames\n", "", len(frames)-show)
		}
		if len(frames) == 0 {
			fmt.Fprintf(w, "  %19s    (no stack)\n", "")
		}
	}
	fmt.Fprintln(w)
}

type jsonSummary struct {
	Inputs []string `json:"inputs"`
	// Estimated: perfetto traces were among the inputs, so allocations
	// and bytes (here and per site marked estimated) are estimates from
	// heapprofd samples; sampled_* are what the traces held.
	Estimated bool `json:"estimated,omitempty"`
	// Samples: an agent log of unknown rate was among the inputs; its
	// counts are samples, not allocations.
	Samples            bool                   `json:"samples,omitempty"`
	SampledAllocations uint64                 `json:"sampled_allocations,omitempty"`
	SampledBytes       uint64                 `json:"sampled_bytes,omitempty"`
	DurationSeconds    float64                `json:"duration_seconds,omitempty"`
	Allocations        uint64                 `json:"allocations"`
	Bytes              uint64                 `json:"bytes"`
	Classes            int                    `json:"classes"`
	Sites              int                    `json:"sites"`
	TopClasses         []offline.SummaryClass `json:"top_classes"`
	TopSites           []offline.SummarySite  `json:"top_sites"`
}

func writeJSONSummary(w io.Writer, inputs []string, t *alloctrack.Tally, d time.Duration, top int, samples bool) {
	s := jsonSummary{Inputs: inputs, DurationSeconds: d.Seconds(), Allocations: t.Total.Allocations, Bytes: t.Total.Bytes,
		Classes: len(t.Classes), Sites: t.Sites(), Estimated: t.Estimated, Samples: samples, SampledAllocations: t.Sampled.Allocations, SampledBytes: t.Sampled.Bytes}
	s.TopClasses, s.TopSites = offline.TopByBytes(t, top)
	writeIndentedJSON(w, s)
}

// writeIndentedJSON writes v as indented JSON, ended by a newline.
func writeIndentedJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeCSV(w io.Writer, t *alloctrack.Tally, top int) {
	cw := csv.NewWriter(w)
	head := []string{"allocations", "bytes", "class", "site", "app_frame", "stack"}
	if t.Estimated {
		// Perfetto traces among the inputs: which rows are estimates, and
		// the samples behind them.
		head = append(head, "estimated", "sampled_allocations", "sampled_bytes")
	}
	cw.Write(head)
	for _, s := range t.TopSites(top, false) {
		row := []string{strconv.FormatUint(s.Allocations, 10), strconv.FormatUint(s.Bytes, 10), s.Class, s.ID, s.AppFrame, strings.Join(s.Frames, "; ")}
		switch {
		case s.Estimated:
			row = append(row, "true", strconv.FormatUint(s.Sampled.Allocations, 10), strconv.FormatUint(s.Sampled.Bytes, 10))
		case t.Estimated:
			row = append(row, "false", "", "")
		}
		cw.Write(row)
	}
	cw.Flush()
}

// frameFilter returns the --frame filter for heapprofd dumps: a dump with
// only the stacks that have a Java frame (pkg.Class.method) matching
// frame; nil without --frame.
func frameFilter(frame string) func(d *perfetto.Dump) *perfetto.Dump {
	if frame == "" {
		return nil
	}
	re := nameMatcher(frame)
	return func(d *perfetto.Dump) *perfetto.Dump {
		out := *d
		out.Stacks = nil
		for _, sd := range d.Stacks {
			for _, f := range heapprofd.JavaFrames(sd.Stack) {
				if re.Frame(f.Function()) {
					out.Stacks = append(out.Stacks, sd)
					break
				}
			}
		}
		return &out
	}
}

// refuse says why a flag does not apply to an input, or "".
func (c *reportCmd) refuse(in *offline.Input) string {
	switch {
	case in.Trace != "" && (*c.class != "" || *c.thread >= 0):
		return "a perfetto trace has no classes or threads: --class and --thread do not apply"
	case in.Trace != "" && *c.format == "jsonl":
		return "a perfetto trace has samples per stack, not allocations: --format jsonl does not apply"
	case in.Log != nil && *c.thread >= 0:
		return "an agent log names its threads, it has no DDM thread ids: --thread does not apply"
	case in.Log != nil && *c.format == "jsonl":
		return "an agent log has samples per stack, not allocations in order: --format jsonl does not apply"
	}
	return ""
}

// newProfileBuilder returns the profile builder for inputs of in's kind.
func newProfileBuilder(in *offline.Input) *alloctrack.ProfileBuilder {
	switch in.Kind() {
	case "heapprofd":
		return alloctrack.NewHeapprofdProfileBuilder()
	case "agent":
		return alloctrack.NewAgentProfileBuilder(in.Every)
	case "samples":
		return alloctrack.NewSamplesProfileBuilder()
	}
	return alloctrack.NewProfileBuilder()
}

// logFilter keeps the stacks of an agent log whose class matches --class
// and which have a frame (Class.method: the agent logs no file or line)
// matching --frame.
func logFilter(class, frame string) func(l *tialloc.Log) *tialloc.Log {
	if class == "" && frame == "" {
		return nil
	}
	cre, fre := nameMatcher(class), nameMatcher(frame)
	return func(l *tialloc.Log) *tialloc.Log {
		out := *l
		out.Stacks, out.Samples = nil, 0
		for i := range l.Stacks {
			st := &l.Stacks[i]
			if cre != nil && !cre.Class(agentlog.Class(&l.Allocs[st.Alloc])) {
				continue
			}
			if fre != nil && !slices.ContainsFunc(agentlog.Frames(l, st), func(f alloctrack.Frame) bool { return fre.Frame(f.Function()) }) {
				continue
			}
			out.Stacks = append(out.Stacks, *st)
			out.Samples += st.Samples
		}
		return &out
	}
}

// writeLogHead writes the head of an agent log's summary.
func writeLogHead(w io.Writer, in *offline.Input, t *alloctrack.Tally) {
	l := in.Log
	fmt.Fprintf(w, "  tiallocsample agent log, frames: %s\n", l.Layout)
	if in.Samples() {
		fmt.Fprintf(w, "  SAMPLED at an unknown rate (give --agent.rate): counts below are SAMPLES, not allocations\n")
		fmt.Fprintf(w, "  samples %d, sampled bytes %d, classes %d, sites %d\n", t.Total.Allocations, t.Total.Bytes, len(t.Classes), t.Sites())
	} else {
		fmt.Fprintf(w, "  SAMPLED, one allocation in %d per thread: allocation counts below are ESTIMATES (samples x %d)\n", in.Every, in.Every)
		fmt.Fprintf(w, "  samples %d, sampled bytes %d (exact)\n", t.Sampled.Allocations, t.Sampled.Bytes)
		fmt.Fprintf(w, "  estimated allocations %d, estimated bytes %d, classes %d, sites %d\n", t.Total.Allocations, t.Total.Bytes, len(t.Classes), t.Sites())
	}
	if l.CutLine {
		fmt.Fprintf(w, "  the last line had no newline (the log was cut while written): left out\n")
	}
}

func cond[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
}

// writeFolded writes every site of t as a folded stack: its frames from
// the root to the allocating one, then its class (when known), separated
// by ';' (any ';' in a name becomes ':'), a space and its count, as
// flame graph tools read them. Sites that fold to the same line are
// summed; lines are sorted.
func writeFolded(w io.Writer, t *alloctrack.Tally, byBytes bool) {
	sum := map[string]uint64{}
	for _, s := range t.TopSites(0, false) {
		parts := make([]string, 0, len(s.Frames)+1)
		for i := len(s.Frames) - 1; i >= 0; i-- {
			parts = append(parts, s.Frames[i])
		}
		if len(parts) == 0 {
			parts = append(parts, "(no stack)")
		}
		if s.Class != "" {
			parts = append(parts, s.Class)
		}
		line := strings.ReplaceAll(strings.Join(parts, "\x00"), ";", ":")
		v := s.Allocations
		if byBytes {
			v = s.Bytes
		}
		sum[strings.ReplaceAll(line, "\x00", ";")] += v
	}
	for _, k := range slices.Sorted(maps.Keys(sum)) {
		if sum[k] > 0 {
			fmt.Fprintf(w, "%s %d\n", k, sum[k])
		}
	}
}
