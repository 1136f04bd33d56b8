package offline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapdump"

	"go.yaml.in/yaml/v3"
)

// Limits are the maxima a budget entry sets; nil means no limit.
type Limits struct {
	MaxAllocationsPerSecond *float64 `yaml:"max_allocations_per_second"`
	MaxBytesPerSecond       *float64 `yaml:"max_bytes_per_second"`
	MaxAllocations          *uint64  `yaml:"max_allocations"` // per run
	MaxBytes                *uint64  `yaml:"max_bytes"`       // per run
	// Relative limits the change over a baseline's runs (relative.go).
	Relative *Relative `yaml:"relative"`
}

func (l Limits) empty() bool {
	return l.MaxAllocationsPerSecond == nil && l.MaxBytesPerSecond == nil && l.MaxAllocations == nil && l.MaxBytes == nil && l.Relative == nil
}

func (l Limits) perSecond() bool {
	return l.MaxAllocationsPerSecond != nil || l.MaxBytesPerSecond != nil
}

// BudgetRule limits what a name expression matches (see NameMatcher). A
// rule that matches nothing fails the check unless it is Optional.
type BudgetRule struct {
	Match    string `yaml:"match"`
	Optional bool   `yaml:"optional"`
	Limits   `yaml:",inline"`
	m        *NameMatcher
}

// Budget is an allocation budget:
//
//	total:   {max_allocations_per_second: 5000, max_bytes: 10000000}
//	classes: [{match: 'android\.os\.Message', max_allocations_per_second: 100}]
//	sites:   [{match: 'MainActivity\.onClick', max_bytes_per_second: 2048}]
//
// Names are matched as NameMatcher says: a class rule's expression must
// match a whole dotted class name; a site rule's a whole frame of the
// site (pkg.Class.method, or as shown with its file and line). A rule
// limits the sum over everything it matches.
type Budget struct {
	Total   *Limits      `yaml:"total"`
	Classes []BudgetRule `yaml:"classes"`
	Sites   []BudgetRule `yaml:"sites"`
	// Tests limit each test of a test run (tests.json) whose name the
	// rule matches (see MeasureTests).
	Tests []BudgetRule `yaml:"tests"`
	// Heap holds the limits on heap dumps (see MeasureDump).
	Heap *HeapBudget `yaml:"heap"`
}

// HeapBudget limits what a heap dump holds:
//
//	heap:
//	  classes: [{match: 'com\.example\.Cache.*', heap: app, max_instances: 10, max_retained_bytes: 1000000}]
//	  max_leaked_activities: 0
//	  max_leaked_fragments: 0
//	  max_duplicate_bytes: 500000
type HeapBudget struct {
	Classes             []HeapRule `yaml:"classes"`
	MaxLeakedActivities *uint64    `yaml:"max_leaked_activities"`
	MaxLeakedFragments  *uint64    `yaml:"max_leaked_fragments"`
	// MaxDuplicateBytes limits the bytes duplicate Strings and Bitmaps
	// waste together.
	MaxDuplicateBytes *uint64 `yaml:"max_duplicate_bytes"`
}

// HeapRule limits the classes a name expression matches (the whole dotted
// name, see NameMatcher), in one heap ("app", "zygote", "image",
// "default") or all. A rule that matches nothing fails the check unless it
// is Optional.
type HeapRule struct {
	Match            string  `yaml:"match"`
	Heap             string  `yaml:"heap"`
	Optional         bool    `yaml:"optional"`
	MaxInstances     *uint64 `yaml:"max_instances"`
	MaxBytes         *uint64 `yaml:"max_bytes"`
	MaxRetainedBytes *uint64 `yaml:"max_retained_bytes"`
	m                *NameMatcher
}

// ErrBudget wraps every error about a budget file itself.
var ErrBudget = errors.New("budget")

// ReadBudget reads and checks a budget file. Unknown keys, bad regular
// expressions, negative or empty limits are errors naming where.
func ReadBudget(path string) (*Budget, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBudget, err)
	}
	return ParseBudget(path, b)
}

// ParseBudget parses budget YAML; name is used in errors.
func ParseBudget(name string, data []byte) (*Budget, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s: the file is empty", ErrBudget, name)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrBudget, name, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: more than one YAML document", ErrBudget, name)
	}
	var bud Budget
	if err := checkYAML(doc.Content[0], reflect.TypeFor[Budget](), ""); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBudget, name, err)
	}
	if err := doc.Decode(&bud); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBudget, name, err)
	}
	if bud.Total == nil && len(bud.Classes) == 0 && len(bud.Sites) == 0 && len(bud.Tests) == 0 && bud.Heap == nil {
		return nil, fmt.Errorf("%w: %s: no limits (give total, classes, sites, tests or heap)", ErrBudget, name)
	}
	if err := bud.Heap.check(name); err != nil {
		return nil, err
	}
	check := func(where string, l Limits) error {
		if l.empty() {
			return fmt.Errorf("%w: %s: %s sets no limit", ErrBudget, name, where)
		}
		for _, v := range []*float64{l.MaxAllocationsPerSecond, l.MaxBytesPerSecond} {
			if v != nil && *v < 0 {
				return fmt.Errorf("%w: %s: %s has a negative limit", ErrBudget, name, where)
			}
		}
		if err := l.Relative.check(); err != nil {
			return fmt.Errorf("%w: %s: %s.relative: %v", ErrBudget, name, where, err)
		}
		return nil
	}
	if bud.Total != nil {
		if err := check("total", *bud.Total); err != nil {
			return nil, err
		}
	}
	for kind, rules := range map[string][]BudgetRule{"classes": bud.Classes, "sites": bud.Sites, "tests": bud.Tests} {
		for i := range rules {
			r := &rules[i]
			where := fmt.Sprintf("%s[%d]", kind, i)
			if r.Match == "" {
				return nil, fmt.Errorf("%w: %s: %s has no match", ErrBudget, name, where)
			}
			m, err := compileRule(name, where, r.Match)
			if err != nil {
				return nil, err
			}
			r.m = m
			if err := check(where, r.Limits); err != nil {
				return nil, err
			}
		}
	}
	return &bud, nil
}

// compileRule compiles a rule's name expression.
func compileRule(name, where, match string) (*NameMatcher, error) {
	m, err := CompileName(match)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s match %v", ErrBudget, name, where, err)
	}
	return m, nil
}

// check checks the heap limits (nil: none).
func (h *HeapBudget) check(name string) error {
	if h == nil {
		return nil
	}
	if len(h.Classes) == 0 && h.MaxLeakedActivities == nil && h.MaxLeakedFragments == nil && h.MaxDuplicateBytes == nil {
		return fmt.Errorf("%w: %s: heap sets no limit", ErrBudget, name)
	}
	for i := range h.Classes {
		r := &h.Classes[i]
		where := fmt.Sprintf("heap.classes[%d]", i)
		if r.Match == "" {
			return fmt.Errorf("%w: %s: %s has no match", ErrBudget, name, where)
		}
		if r.MaxInstances == nil && r.MaxBytes == nil && r.MaxRetainedBytes == nil {
			return fmt.Errorf("%w: %s: %s sets no limit", ErrBudget, name, where)
		}
		m, err := compileRule(name, where, r.Match)
		if err != nil {
			return err
		}
		r.m = m
	}
	return nil
}

// HasAllocationLimits tells whether the budget limits allocations (total,
// classes or sites), HasHeapLimits whether it limits heap dumps.
func (b *Budget) HasAllocationLimits() bool {
	return b.Total != nil || len(b.Classes) > 0 || len(b.Sites) > 0
}

// HasHeapLimits tells whether the budget limits heap dumps.
func (b *Budget) HasHeapLimits() bool { return b.Heap != nil }

// MeasureDump measures a heap dump's analysis against the budget's heap
// limits, in the budget's order. A class rule sums the instances, bytes
// and retained bytes of every class it matches (in its heap, if it names
// one); retained bytes of classes that retain each other count twice.
func (b *Budget) MeasureDump(a *heapdump.Analysis) []Measurement {
	h := b.Heap
	if h == nil {
		return nil
	}
	var out []Measurement
	for i, r := range h.Classes {
		var inst, bytes, ret uint64
		matched := false
		var names []string
		for _, c := range a.Histogram.Classes {
			names = append(names, c.Class)
			if (r.Heap == "" || r.Heap == c.Heap) && r.m.Class(c.Class) {
				matched = true
				inst += c.Instances
				bytes += c.Bytes
				ret += c.Retained
			}
		}
		rule := fmt.Sprintf("heap.classes[%d] %s", i, asTyped(r.Match))
		if r.Heap != "" {
			rule += " in heap " + r.Heap
		}
		var miss *Unmatched
		if !matched {
			miss = &Unmatched{Names: "class", Optional: r.Optional, Near: r.m.near(names)}
		}
		for _, l := range []struct {
			what  string
			limit *uint64
			v     uint64
		}{{"instances", r.MaxInstances, inst}, {"bytes", r.MaxBytes, bytes}, {"retained bytes", r.MaxRetainedBytes, ret}} {
			if l.limit != nil {
				out = append(out, Measurement{Rule: rule, What: l.what, Value: float64(l.v), Limit: float64(*l.limit), Unmatched: miss})
			}
		}
	}
	count := func(kind string) (n uint64) {
		for _, l := range a.Leaks {
			if l.Kind == kind {
				n++
			}
		}
		return n
	}
	if h.MaxLeakedActivities != nil {
		out = append(out, Measurement{Rule: "heap", What: "leaked Activities", Value: float64(count("activity")), Limit: float64(*h.MaxLeakedActivities)})
	}
	if h.MaxLeakedFragments != nil {
		out = append(out, Measurement{Rule: "heap", What: "leaked Fragments", Value: float64(count("fragment")), Limit: float64(*h.MaxLeakedFragments)})
	}
	if h.MaxDuplicateBytes != nil {
		var wasted uint64
		for _, d := range append(append([]heapdump.Duplicate(nil), a.DuplicateStrings...), a.DuplicateBitmaps...) {
			wasted += d.Wasted
		}
		out = append(out, Measurement{Rule: "heap", What: "bytes wasted by duplicate Strings and Bitmaps", Value: float64(wasted), Limit: float64(*h.MaxDuplicateBytes)})
	}
	return out
}

// NeedsDuration tells whether the budget has per-second limits.
func (b *Budget) NeedsDuration() bool {
	if b.Total != nil && b.Total.perSecond() {
		return true
	}
	for _, r := range append(append([]BudgetRule(nil), b.Classes...), b.Sites...) {
		if r.perSecond() {
			return true
		}
	}
	return false
}

// Measurement is one limit of a budget and what a run measured against
// it; a Violation is one that exceeds its limit.
type Measurement struct {
	Rule  string  // "total", "classes[0] 'regex'", …
	What  string  // "allocations per second", …
	Value float64 // measured
	Limit float64
	// Estimated: the measured value is an estimate from heapprofd
	// samples (a perfetto trace among the inputs), not an exact count.
	Estimated bool
	// Unmatched is set when the rule's expression matched no name.
	Unmatched *Unmatched
	// Partial is set when the measured test is partial (its figures miss
	// part of it): it may be judged only when the caller allows partial
	// data.
	Partial *ShortfallError
}

// Unmatched says that a rule matched no name of the input.
type Unmatched struct {
	Names    string   // what the rule names: "class", "frame" or "test"
	Optional bool     // the rule says it may match nothing
	Near     []string // names its expression matches in part, not whole
	Why      string   // why the input cannot match, if known
}

// Violation is a measurement over its limit.
type Violation = Measurement

// Exceeded tells whether the measured value is over the limit.
func (v Measurement) Exceeded() bool { return v.Value > v.Limit }

// Margin says how a measurement within its limit stands: the value, the
// limit and the share of it used.
func (v Measurement) Margin() string {
	share := ""
	if v.Limit > 0 {
		share = fmt.Sprintf(" (%.0f%% of it)", 100*v.Value/v.Limit)
	}
	est := ""
	if v.Estimated {
		est = " (estimate)"
	}
	return fmt.Sprintf("%s: %s %s%s, limit %s%s", v.Rule, num(v.Value), v.What, est, num(v.Limit), share)
}

func (v Measurement) String() string {
	over := v.Value - v.Limit
	ratio := ""
	if v.Limit > 0 {
		ratio = fmt.Sprintf(", %.2f× the limit", v.Value/v.Limit)
	}
	est := ""
	if v.Estimated {
		est = " (an estimate from samples, not an exact count)"
	}
	return fmt.Sprintf("%s: %s %s%s exceeds the limit %s by %s%s", v.Rule, num(v.Value), v.What, est, num(v.Limit), num(over), ratio)
}

func num(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.2f", v)
}

// Check returns the measurements of t over a run of duration d (see
// Measure) that exceed their limits.
func (b *Budget) Check(t *alloctrack.Tally, d time.Duration) ([]Violation, error) {
	all, err := b.Measure(t, d)
	if err != nil {
		return nil, err
	}
	var out []Violation
	for _, m := range all {
		if m.Exceeded() {
			out = append(out, m)
		}
	}
	return out, nil
}

// Measure measures t over a run of duration d (0 if unknown) against
// every limit of the budget, in the budget's order. Per-second limits
// with an unknown duration are an error. A rule that matched no name has
// its measurements' Unmatched set. When t holds heapprofd dumps
// (t.Estimated), values are estimates and every violation says so; class
// rules match nothing there, heapprofd recording no class (Unmatched.Why
// says so).
func (b *Budget) Measure(t *alloctrack.Tally, d time.Duration) ([]Measurement, error) {
	if d <= 0 && b.NeedsDuration() {
		return nil, fmt.Errorf("%w: per-second limits need the run's duration: give a capture directory (its summary.json has it), not bare report files", ErrBudget)
	}
	var out []Measurement
	eval := func(rule string, l Limits, c alloctrack.Count, miss *Unmatched) {
		sec := d.Seconds()
		add := func(what string, v, limit float64) {
			out = append(out, Measurement{Rule: rule, What: what, Value: v, Limit: limit, Estimated: t.Estimated, Unmatched: miss})
		}
		if l.MaxAllocationsPerSecond != nil {
			add("allocations per second", float64(c.Allocations)/sec, *l.MaxAllocationsPerSecond)
		}
		if l.MaxBytesPerSecond != nil {
			add("bytes per second", float64(c.Bytes)/sec, *l.MaxBytesPerSecond)
		}
		if l.MaxAllocations != nil {
			add("allocations", float64(c.Allocations), float64(*l.MaxAllocations))
		}
		if l.MaxBytes != nil {
			add("bytes", float64(c.Bytes), float64(*l.MaxBytes))
		}
	}
	if b.Total != nil {
		eval("total", *b.Total, t.Total, nil)
	}
	for i, r := range b.Classes {
		c, miss := matchClasses(t, r)
		eval(fmt.Sprintf("classes[%d] %s", i, asTyped(r.Match)), r.Limits, c, miss)
	}
	if len(b.Sites) > 0 {
		sites := t.TopSites(0, false)
		for i, r := range b.Sites {
			c, miss := matchSites(sites, r)
			eval(fmt.Sprintf("sites[%d] %s", i, asTyped(r.Match)), r.Limits, c, miss)
		}
	}
	return out, nil
}

// matchClasses sums the classes of t that class rule r matches; miss is
// set when it matches none.
func matchClasses(t *alloctrack.Tally, r BudgetRule) (c alloctrack.Count, miss *Unmatched) {
	classes := slices.Sorted(maps.Keys(t.Classes))
	matched := false
	for _, name := range classes {
		if r.m.Class(name) {
			matched = true
			c = c.Plus(*t.Classes[name])
		}
	}
	if !matched {
		miss = &Unmatched{Names: "class", Optional: r.Optional, Near: r.m.near(classes)}
		if len(classes) == 0 && t.Estimated {
			miss.Why = "heapprofd records no class"
		}
	}
	return c, miss
}

// matchSites sums the sites with a frame that site rule r matches; miss
// is set when it matches none.
func matchSites(sites []alloctrack.Site, r BudgetRule) (c alloctrack.Count, miss *Unmatched) {
	matched := false
	for _, s := range sites {
		if r.m.AnyFrame(s.Frames) {
			matched = true
			c = c.Plus(s.Count)
		}
	}
	if !matched {
		miss = &Unmatched{Names: "frame", Optional: r.Optional, Near: r.m.near(frameNames(sites))}
	}
	return c, miss
}

// frameNames returns the distinct frames of sites, in order.
func frameNames(sites []alloctrack.Site) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range sites {
		for _, f := range s.Frames {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// asTyped quotes a regular expression as a budget file holds it in single
// quotes: backslashes as written, not doubled as Go's %q would.
func asTyped(re string) string {
	return "'" + strings.ReplaceAll(re, "'", "''") + "'"
}
