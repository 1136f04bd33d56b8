package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/alecthomas/kingpin/v2"
)

// kingpin's words for a mistyped command or long flag.
var (
	badCommand = regexp.MustCompile(`^expected command but got "([^"]*)"$`)
	badFlag    = regexp.MustCompile(`^unknown long flag '--([^']*)'$`)
)

// didYouMean returns "; did you mean …?" for a parse error about a
// mistyped command or long flag that is close to a real one, or "". A
// flag is looked for among the command's flags and the global ones.
func didYouMean(app *kingpin.Application, args []string, err error) string {
	m := app.Model()
	var names []string
	var typed, dashes string
	if g := badCommand.FindStringSubmatch(err.Error()); g != nil {
		typed = g[1]
		for _, c := range m.Commands {
			if !c.Hidden {
				names = append(names, c.Name)
			}
		}
	} else if g := badFlag.FindStringSubmatch(err.Error()); g != nil {
		typed, dashes = g[1], "--"
		names = flagNames(m.FlagGroupModel, nil)
		for _, c := range m.Commands {
			if slices.Contains(args, c.Name) {
				names = flagNames(c.FlagGroupModel, names)
			}
		}
	}
	best := closest(typed, names)
	if len(best) == 0 {
		return ""
	}
	for i := range best {
		best[i] = dashes + best[i]
	}
	return fmt.Sprintf("; did you mean %s?", strings.Join(best, " or "))
}

func flagNames(g *kingpin.FlagGroupModel, names []string) []string {
	for _, f := range g.Flags {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	}
	return names
}

// closest returns the names nearest to typed (at most three): at an edit
// distance of at most a third of its length (and at least 1), or that
// begin with it when it is at least 3 characters long.
func closest(typed string, names []string) []string {
	if typed == "" {
		return nil
	}
	limit := max(1, len(typed)/3)
	bestD := limit + 1
	var best []string
	for _, n := range names {
		d := editDistance(typed, n)
		if d > limit && len(typed) >= 3 && strings.HasPrefix(n, typed) {
			d = limit // a prefix: as close as allowed
		}
		switch {
		case d < bestD:
			bestD, best = d, []string{n}
		case d == bestD && len(best) < 3:
			best = append(best, n)
		}
	}
	return best
}

// editDistance is the number of single-character insertions, deletions,
// substitutions and swaps of adjacent characters that turn a into b, no
// character edited twice (the optimal string alignment distance).
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
