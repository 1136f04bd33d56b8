package offline

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Relative is a rule's limit on the change over a baseline:
//
//	tests: [{match: '.*', relative: {increase: 10%, level: 0.05}}]
//
// A breach is a rise over the baseline's median larger than Increase that
// is significant at Level, over the gate's comparisons together (see
// gate.Compare). Of says what is judged: "allocations", "bytes", or both
// when empty.
type Relative struct {
	Increase string  `yaml:"increase"`
	Level    float64 `yaml:"level"`
	Of       string  `yaml:"of"`
	increase float64
}

// DefaultRelativeLevel is a relative rule's level when it sets none.
const DefaultRelativeLevel = 0.05

// check checks r (nil: none) and sets its parsed increase and defaults.
func (r *Relative) check() error {
	if r == nil {
		return nil
	}
	pct, ok := strings.CutSuffix(strings.TrimSpace(r.Increase), "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
	if !ok || err != nil || v <= 0 {
		return fmt.Errorf("increase must be a percentage above 0, such as 10%%, not %q", r.Increase)
	}
	r.increase = v / 100
	switch {
	case r.Level == 0:
		r.Level = DefaultRelativeLevel
	case r.Level < 0 || r.Level >= 0.5:
		return fmt.Errorf("level must be above 0 and below 0.5 (0.05: 95 %% confidence), not %g", r.Level)
	}
	if r.Of != "" && r.Of != "allocations" && r.Of != "bytes" {
		return fmt.Errorf("of must be allocations or bytes (or left out: both), not %q", r.Of)
	}
	return nil
}

// metrics lists what r judges.
func (r *Relative) metrics() []string {
	if r.Of != "" {
		return []string{r.Of}
	}
	return []string{"allocations", "bytes"}
}

// MinEffect is the increase as a fraction: 10% is 0.10.
func (r *Relative) MinEffect() float64 { return r.increase }

// HasRelative tells whether any rule of the budget is relative.
func (b *Budget) HasRelative() bool {
	if b.Total != nil && b.Total.Relative != nil {
		return true
	}
	for _, rules := range [][]BudgetRule{b.Classes, b.Sites, b.Tests} {
		for _, r := range rules {
			if r.Relative != nil {
				return true
			}
		}
	}
	return false
}

// HasAbsoluteAllocationLimits tells whether total, classes or sites set a
// limit other than relative:.
func (b *Budget) HasAbsoluteAllocationLimits() bool {
	abs := func(l Limits) bool { l.Relative = nil; return !l.empty() }
	if b.Total != nil && abs(*b.Total) {
		return true
	}
	for _, r := range slices.Concat(b.Classes, b.Sites) {
		if abs(r.Limits) {
			return true
		}
	}
	return false
}
