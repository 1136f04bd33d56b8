package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/alecthomas/kingpin/v2"
)

// enumValue is a flag with a fixed set of values whose error names the flag
// (kingpin's own Enum does not).
type enumValue struct {
	name    string
	allowed []string
	v       *string
}

func (e *enumValue) Set(s string) error {
	if !slices.Contains(e.allowed, s) {
		return fmt.Errorf("--%s must be one of %s, got %q", e.name, strings.Join(e.allowed, ", "), s)
	}
	*e.v = s
	return nil
}

func (e *enumValue) String() string { return *e.v }

// enum declares an enumerated flag on f, named name, with a default.
func enum(f *kingpin.FlagClause, name, def string, allowed ...string) *string {
	v := def
	f.Default(def).HintOptions(allowed...).SetValue(&enumValue{name: name, allowed: allowed, v: &v})
	return &v
}
