package main

import (
	"fmt"
	"io"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// gateFlags are --allow-partial and --allow-empty: what a budget check or
// a diff may judge that holds less than a whole run.
type gateFlags struct {
	partial, empty *bool
}

func addGateFlags(cmd *kingpin.CmdClause) *gateFlags {
	return &gateFlags{
		partial: cmd.Flag("allow-partial", "Judge a capture that failed, was interrupted, ran shorter than asked or never finished (its summary.json says so, or is missing), instead of exiting with status 4.").Bool(),
		empty:   cmd.Flag("allow-empty", "Judge inputs that hold no allocation at all (or a heap dump with no object), instead of exiting with status 4.").Bool(),
	}
}

// admit tells whether an input with shortfall sf (nil: a whole run) may be
// judged. It says on stderr why not, or that it is judged anyway.
func (g *gateFlags) admit(stderr io.Writer, who string, sf *offline.ShortfallError) bool {
	if sf == nil {
		return true
	}
	flag, allowed := "--allow-partial", *g.partial
	if sf.Empty {
		flag, allowed = "--allow-empty", *g.empty
	}
	if allowed {
		fmt.Fprintf(stderr, "%s: warning: %v; judged anyway (%s)\n", who, sf, flag)
		return true
	}
	fmt.Fprintf(stderr, "%s: %v; not judged (exit status %d; %s judges it anyway)\n", who, sf, exitInsufficient, flag)
	return false
}
