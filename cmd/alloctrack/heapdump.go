package main

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// dumpSummary is a heap dump's report as JSON.
type dumpSummary struct {
	File             string                `json:"file"`
	Version          string                `json:"version"`
	IDSize           int                   `json:"id_size"`
	Objects          uint64                `json:"objects"`
	Unreachable      uint64                `json:"unreachable_objects"`
	UnreachableBytes uint64                `json:"unreachable_bytes"`
	LeftOutObjects   uint64                `json:"left_out_objects,omitempty"`
	LeftOutBytes     uint64                `json:"left_out_bytes,omitempty"`
	Classes          []heapdump.ClassCount `json:"classes"`
	Analysis         *heapdump.Analysis    `json:"analysis"`
	// How many groups of duplicates there are; the analysis lists the
	// top ones (--top).
	DuplicateStringGroups int `json:"duplicate_string_groups"`
	DuplicateBitmapGroups int `json:"duplicate_bitmap_groups"`
}

// analyzeDump reads and analyses the dump at path.
func analyzeDump(path string, top int) (*heapdump.Analysis, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g, err := heapdump.ReadGraph(f)
	if err != nil {
		return nil, err
	}
	return g.Analyze(f, top)
}

// heapDump reports a heap dump: it holds what an app keeps, not what it
// allocated, so it gets a report of its own: the class histogram per heap
// with retained sizes, leaked Activities and Fragments with their paths
// from a GC root, and duplicate Strings and Bitmaps.
func (c *reportCmd) heapDump(w *bufio.Writer, stderr io.Writer, name string) int {
	switch {
	case *c.format != "text" && *c.format != "json" && *c.format != "csv":
		fmt.Fprintf(stderr, "alloctrack report: %s: a heap dump (hprof) is reported as text, json or csv, not %s\n", name, *c.format)
		return exitUsage
	case c.bud != nil && !c.bud.HasHeapLimits():
		fmt.Fprintf(stderr, "alloctrack report: %s: the budget has no heap limits (heap:) for a heap dump\n", name)
		return exitUsage
	}
	a, err := analyzeDump(name, 0)
	if err != nil {
		w.Flush()
		fmt.Fprintf(stderr, "alloctrack report: %s: %v\n", name, err)
		return exitFailure
	}
	status := exitOK
	if c.bud != nil {
		w.Flush()
		if c.gate.admit(stderr, "alloctrack report", offline.DumpShortfall(name, a)) {
			status = judge(stderr, "alloctrack report: "+name, c.bud.MeasureDump(a))
		} else {
			status = exitInsufficient
		}
	}
	switch *c.format {
	case "json":
		h := a.Histogram
		sum := dumpSummary{File: name, Version: h.Header.Version, IDSize: h.Header.IDSize, Objects: h.Objects,
			Unreachable: h.Unreachable, UnreachableBytes: h.UnreachableBytes, Classes: h.Classes, Analysis: a,
			LeftOutObjects: h.LeftOut, LeftOutBytes: h.LeftOutBytes,
			DuplicateStringGroups: len(a.DuplicateStrings), DuplicateBitmapGroups: len(a.DuplicateBitmaps)}
		if *c.top > 0 {
			a.DuplicateStrings = a.DuplicateStrings[:min(*c.top, len(a.DuplicateStrings))]
			a.DuplicateBitmaps = a.DuplicateBitmaps[:min(*c.top, len(a.DuplicateBitmaps))]
		}
		writeIndentedJSON(w, sum)
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write([]string{"file", "heap", "class", "instances", "bytes", "retained_bytes"})
		for _, cc := range a.Histogram.Classes {
			cw.Write([]string{name, cc.Heap, cc.Class, u(cc.Instances), u(cc.Bytes), u(cc.Retained)})
		}
		cw.Flush()
	default:
		writeDumpText(w, name, a, *c.top)
	}
	return status
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

// writeDumpText writes a dump's report as text: per heap, the top classes
// by retained bytes; then leaks and duplicates.
func writeDumpText(w io.Writer, path string, a *heapdump.Analysis, top int) {
	h := a.Histogram
	fmt.Fprintf(w, "%s\n  heap dump (%s, %d-byte ids), %d objects in %d classes, %d unreachable (%d bytes)\n", path, h.Header.Version, h.Header.IDSize, h.Objects, len(h.Classes), h.Unreachable, h.UnreachableBytes)
	fmt.Fprintln(w, "  bytes are the field and element data the dump holds, without object headers; retained: what the class's instances keep alive")
	if h.LeftOut > 0 {
		fmt.Fprintf(w, "  left out: %d objects (%d bytes) that am dumpheap -b made for the dump (Bitmap.dumpData), not the app's memory\n", h.LeftOut, h.LeftOutBytes)
	}
	if h.AppImage {
		fmt.Fprintln(w, "  the app's own image is in heap 'I' (Android 7.0, 7.1): its classes count in app, its other objects (its Strings) stay in image, which app leaves out")
	}
	perHeap := map[string]int{}
	for _, c := range h.Classes {
		perHeap[c.Heap]++
	}
	heap, shown := "", 0
	for _, c := range h.Classes {
		if c.Heap != heap {
			heap, shown = c.Heap, 0
			fmt.Fprintf(w, "  heap %s: %s\n  %12s %14s %14s  %s\n", heap, shownOf(top, perHeap[heap], "classes"), "instances", "bytes", "retained", "class")
		}
		if top > 0 && shown >= top {
			continue
		}
		shown++
		fmt.Fprintf(w, "  %12d %14d %14d  %s\n", c.Instances, c.Bytes, c.Retained, c.Class)
	}
	fmt.Fprintf(w, "\n  leaked Activities and Fragments: %d\n", len(a.Leaks))
	for i, l := range a.Leaks {
		if top > 0 && i >= top {
			fmt.Fprintf(w, "  … %d more\n", len(a.Leaks)-i)
			break
		}
		fmt.Fprintf(w, "  %s 0x%x (%s, %s), retains %d bytes; shortest path from a GC root:\n", l.Class, l.ID, l.Kind, l.Why, l.Retained)
		for j, st := range l.Path {
			switch {
			case j == 0:
				fmt.Fprintf(w, "      GC root (%s) %s 0x%x\n", st.Root, st.Class, st.ID)
			default:
				fmt.Fprintf(w, "      %s 0x%x\n", st.Class, st.ID)
			}
			if st.Ref != "" {
				fmt.Fprintf(w, "        via %s\n", st.Ref)
			}
		}
	}
	for _, d := range []struct {
		what string
		list []heapdump.Duplicate
	}{{"Strings", a.DuplicateStrings}, {"Bitmaps", a.DuplicateBitmaps}} {
		fmt.Fprintf(w, "\n  duplicate %s: %s\n", d.what, shownOf(top, len(d.list), "groups"))
		if len(d.list) > 0 {
			fmt.Fprintf(w, "  %8s %8s %12s  %s\n", "copies", "buffers", "wasted", "value")
		}
		for _, x := range d.list[:limit(top, len(d.list))] {
			v := strconv.Quote(x.Value)
			if x.Config != "" { // Android 15's pixels: wasted by their config
				v += " " + x.Config
			}
			fmt.Fprintf(w, "  %8d %8d %12d  %s\n", x.Copies, x.Buffers, x.Wasted, v)
		}
	}
	if a.Dangling > 0 {
		fmt.Fprintf(w, "\n  %d references to objects the dump does not hold were ignored\n", a.Dangling)
	}
	fmt.Fprintln(w)
}

// limit is how many of n items a list shows with --top top (0: all).
func limit(top, n int) int {
	if top > 0 {
		return min(top, n)
	}
	return n
}

// shownOf says how much of a list of n things --top top shows: "19
// groups", or "top 10 of 19 groups".
func shownOf(top, n int, things string) string {
	if k := limit(top, n); k < n {
		return fmt.Sprintf("top %d of %d %s", k, n, things)
	}
	return fmt.Sprintf("%d %s", n, things)
}
