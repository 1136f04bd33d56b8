package offline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"regexp/syntax"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"

	"go.yaml.in/yaml/v3"
)

// Limits are the maxima a budget entry sets; nil means no limit.
type Limits struct {
	MaxAllocationsPerSecond *float64 `yaml:"max_allocations_per_second"`
	MaxBytesPerSecond       *float64 `yaml:"max_bytes_per_second"`
	MaxAllocations          *uint64  `yaml:"max_allocations"` // per run
	MaxBytes                *uint64  `yaml:"max_bytes"`       // per run
}

func (l Limits) empty() bool {
	return l.MaxAllocationsPerSecond == nil && l.MaxBytesPerSecond == nil && l.MaxAllocations == nil && l.MaxBytes == nil
}

func (l Limits) perSecond() bool {
	return l.MaxAllocationsPerSecond != nil || l.MaxBytesPerSecond != nil
}

// BudgetRule limits what a regular expression matches.
type BudgetRule struct {
	Match  string `yaml:"match"`
	Limits `yaml:",inline"`
	re     *regexp.Regexp
}

// Budget is an allocation budget:
//
//	total:   {max_allocations_per_second: 5000, max_bytes: 10000000}
//	classes: [{match: 'android\.os\.Message', max_allocations_per_second: 100}]
//	sites:   [{match: 'MainActivity\.onClick', max_bytes_per_second: 2048}]
//
// A class rule's regular expression must match the whole dotted class name;
// a site rule's matches anywhere in the site's text (allocated class, then
// each frame as Class.method(File:line), newline-separated). A rule limits
// the sum over everything it matches.
type Budget struct {
	Total   *Limits      `yaml:"total"`
	Classes []BudgetRule `yaml:"classes"`
	Sites   []BudgetRule `yaml:"sites"`
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
	dec.KnownFields(true)
	var bud Budget
	if err := dec.Decode(&bud); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s: the file is empty", ErrBudget, name)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrBudget, name, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: more than one YAML document", ErrBudget, name)
	}
	if bud.Total == nil && len(bud.Classes) == 0 && len(bud.Sites) == 0 {
		return nil, fmt.Errorf("%w: %s: no limits (give total, classes or sites)", ErrBudget, name)
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
		return nil
	}
	if bud.Total != nil {
		if err := check("total", *bud.Total); err != nil {
			return nil, err
		}
	}
	for kind, rules := range map[string][]BudgetRule{"classes": bud.Classes, "sites": bud.Sites} {
		for i := range rules {
			r := &rules[i]
			where := fmt.Sprintf("%s[%d]", kind, i)
			if r.Match == "" {
				return nil, fmt.Errorf("%w: %s: %s has no match", ErrBudget, name, where)
			}
			expr := r.Match
			if kind == "classes" {
				expr = "^(?:" + expr + ")$"
			}
			re, err := regexp.Compile(expr)
			if err != nil {
				why := err.Error()
				if se, ok := errors.AsType[*syntax.Error](err); ok {
					// Its own text quotes the anchored form compiled.
					why = se.Code.String()
				}
				return nil, fmt.Errorf("%w: %s: %s match %s is not a regular expression: %s", ErrBudget, name, where, asTyped(r.Match), why)
			}
			r.re = re
			if err := check(where, r.Limits); err != nil {
				return nil, err
			}
		}
	}
	return &bud, nil
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
		est = " (estimate from heapprofd samples, not an exact count)"
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
// every limit of the budget, in the budget's order. Per-second limits with an unknown duration are an error. When t
// holds heapprofd dumps (t.Estimated), values are estimates and every
// violation says so; class rules match nothing there, heapprofd recording
// no class.
func (b *Budget) Measure(t *alloctrack.Tally, d time.Duration) ([]Measurement, error) {
	if d <= 0 && b.NeedsDuration() {
		return nil, fmt.Errorf("%w: per-second limits need the run's duration: give a capture directory (its summary.json has it), not bare report files", ErrBudget)
	}
	var out []Measurement
	eval := func(rule string, l Limits, c alloctrack.Count) {
		sec := d.Seconds()
		if l.MaxAllocationsPerSecond != nil {
			out = append(out, Measurement{rule, "allocations per second", float64(c.Allocations) / sec, *l.MaxAllocationsPerSecond, t.Estimated})
		}
		if l.MaxBytesPerSecond != nil {
			out = append(out, Measurement{rule, "bytes per second", float64(c.Bytes) / sec, *l.MaxBytesPerSecond, t.Estimated})
		}
		if l.MaxAllocations != nil {
			out = append(out, Measurement{rule, "allocations", float64(c.Allocations), float64(*l.MaxAllocations), t.Estimated})
		}
		if l.MaxBytes != nil {
			out = append(out, Measurement{rule, "bytes", float64(c.Bytes), float64(*l.MaxBytes), t.Estimated})
		}
	}
	if b.Total != nil {
		eval("total", *b.Total, t.Total)
	}
	for i, r := range b.Classes {
		var c alloctrack.Count
		for name, n := range t.Classes {
			if r.re.MatchString(name) {
				c.Allocations += n.Allocations
				c.Bytes += n.Bytes
			}
		}
		eval(fmt.Sprintf("classes[%d] %s", i, asTyped(r.Match)), r.Limits, c)
	}
	if len(b.Sites) > 0 {
		sites := t.TopSites(0, false)
		for i, r := range b.Sites {
			var c alloctrack.Count
			for _, s := range sites {
				if r.re.MatchString(s.Class + "\n" + strings.Join(s.Frames, "\n")) {
					c.Allocations += s.Allocations
					c.Bytes += s.Bytes
				}
			}
			eval(fmt.Sprintf("sites[%d] %s", i, asTyped(r.Match)), r.Limits, c)
		}
	}
	return out, nil
}

// asTyped quotes a regular expression as a budget file holds it in single
// quotes: backslashes as written, not doubled as Go's %q would.
func asTyped(re string) string {
	return "'" + strings.ReplaceAll(re, "'", "''") + "'"
}
