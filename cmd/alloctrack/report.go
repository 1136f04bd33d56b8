package main

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/alloctrack"
)

type reportCmd struct {
	cmd    *kingpin.CmdClause
	files  *[]string
	format *string
	top    *int
}

func newReportCmd(app *kingpin.Application) *reportCmd {
	c := &reportCmd{cmd: app.Command("report", "Summarise saved allocation reports: raw REAL payloads, the bytes Android Studio saves as .alloc.")}
	c.format = c.cmd.Flag("format", "Output format: text (summary) or jsonl (one object per allocation, in payload order).").
		Default("text").Enum("text", "jsonl")
	c.top = c.cmd.Flag("top", "How many classes and sites to list in the text summary.").Default("10").Int()
	c.files = c.cmd.Arg("file", "Report files.").Required().Strings()
	return c
}

func (c *reportCmd) run(stdout, stderr io.Writer) int {
	if *c.top < 1 {
		fmt.Fprintf(stderr, "alloctrack: report: --top must be at least 1, got %d\n", *c.top)
		return exitUsage
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	defer w.Flush()
	status := exitOK
	for _, name := range *c.files {
		r, err := readReport(name)
		if err != nil {
			w.Flush()
			fmt.Fprintf(stderr, "alloctrack report: %v\n", err)
			status = exitFailure
			continue
		}
		switch *c.format {
		case "jsonl":
			var line []byte
			for i := range r.Allocations {
				line = r.AppendJSON(line[:0], i)
				line = append(line, '\n')
				w.Write(line)
			}
		default:
			writeSummary(w, name, r, *c.top)
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "alloctrack: report: writing output: %v\n", err)
		return exitFailure
	}
	return status
}

func readReport(name string) (*alloctrack.Report, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	r, err := alloctrack.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

func writeSummary(w io.Writer, name string, r *alloctrack.Report, top int) {
	t := alloctrack.NewTally()
	t.Add(r)
	fmt.Fprintf(w, "%s\n", name)
	fmt.Fprintf(w, "  allocations %d, bytes %d, classes %d, sites %d\n", t.Total.Allocations, t.Total.Bytes, len(t.Classes), t.Sites())
	if r.Overflowed() {
		fmt.Fprintf(w, "  report is full (%d entries): older allocations of this window were lost\n", len(r.Allocations))
	}
	if r.TrailingBytes > 0 {
		fmt.Fprintf(w, "  %d bytes after the string tables were ignored\n", r.TrailingBytes)
	}
	for _, by := range []struct {
		title string
		bytes bool
	}{{"by count", false}, {"by bytes", true}} {
		fmt.Fprintf(w, "\n  top classes %s\n  %8s %10s  %s\n", by.title, "allocs", "bytes", "class")
		for _, cc := range t.TopClasses(top, by.bytes) {
			fmt.Fprintf(w, "  %8d %10d  %s\n", cc.Allocations, cc.Bytes, cc.Class)
		}
	}
	fmt.Fprintf(w, "\n  top allocation sites by count\n  %8s %10s  %s\n", "allocs", "bytes", "class / stack")
	for _, s := range t.TopSites(top, false) {
		fmt.Fprintf(w, "  %8d %10d  %s\n", s.Allocations, s.Bytes, s.Class)
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
