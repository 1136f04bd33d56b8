// Package tialloctest writes tiallocsample logs for tests, following the
// agent's README: one table of keys counting up from 0, each string
// defined ("+" for allocations and frames, "=" for stack traces) on its
// first use, then one line per sample holding its stack trace's key.
package tialloctest

import (
	"fmt"
	"strconv"
	"strings"
)

// Sample is one logged allocation.
type Sample struct {
	Thread string
	Class  string // type signature ("[I", "Lpkg/Cls;"); "" writes TYPE UNKNOWN
	File   string // "" writes <UNKNOWN_FILE>
	Size   uint64
	// Frames, outermost first, each "Lpkg/Cls;::name(sig)" (released
	// agents) or "name(sig)" (the README's layout).
	Frames []string
}

// Writer interns as the agent does.
type Writer struct {
	b    strings.Builder
	keys map[string]int
	next int
}

// NewWriter returns an empty log.
func NewWriter() *Writer { return &Writer{keys: map[string]int{}} }

func (w *Writer) intern(header, s string) string {
	k, ok := w.keys[s]
	if !ok {
		k = w.next
		w.next++
		w.keys[s] = k
		fmt.Fprintf(&w.b, "%s%d,%s\n", header, k, s)
	}
	return strconv.Itoa(k)
}

// Alloc formats a sample's allocation as the agent does.
func Alloc(s Sample) string {
	cls := "TYPE UNKNOWN"
	if s.Class != "" {
		file := s.File
		if file == "" {
			file = "<UNKNOWN_FILE>"
		}
		cls = s.Class + " file: " + file
	}
	return fmt.Sprintf("jthread[%s], jclass[%s], size[%d, hex: 0x%x]", s.Thread, cls, s.Size, s.Size)
}

// Add logs one sample.
func (w *Writer) Add(s Sample) {
	rec := w.intern("+", Alloc(s))
	for _, f := range s.Frames {
		rec += ";" + w.intern("+", f)
	}
	w.b.WriteString(w.intern("=", rec) + "\n")
}

// String returns the log so far.
func (w *Writer) String() string { return w.b.String() }
