package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/alecthomas/kingpin/v2"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/ddms/hprof"
)

type heapdumpCmd struct {
	cmd      *kingpin.CmdClause
	in       *string
	out      *string
	shrink   *bool
	standard *bool
	appOnly  *bool
}

func newHeapdumpCmd(app *kingpin.Application) *heapdumpCmd {
	c := &heapdumpCmd{cmd: app.Command("heapdump", "Shrink a heap dump (hprof) as Tencent Matrix does, or convert an Android dump to the standard format that MAT and the JDK's tools open, as hprof-conv does.")}
	f := c.cmd.Flag
	c.in = f("in", "The heap dump to read (hprof).").Required().String()
	c.out = f("out", "Where to write the result (a new file; not the input).").Short('o').Required().String()
	c.shrink = f("shrink", "Drop every primitive array's values except Strings' and Bitmaps', and keep one copy of equal Bitmap buffers.").Bool()
	c.standard = f("standard", "Convert Android's JAVA PROFILE 1.0.3 to the standard 1.0.2, byte for byte as hprof-conv.").Bool()
	c.appOnly = f("app-only", "With --standard: leave out the zygote's and the boot image's objects (hprof-conv -z).").Bool()
	return c
}

func (c *heapdumpCmd) run(stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "alloctrack heapdump: "+format+"\n", args...)
		return code
	}
	switch {
	case !*c.shrink && !*c.standard:
		return fail(exitUsage, "give --shrink, --standard or both")
	case *c.appOnly && !*c.standard:
		return fail(exitUsage, "--app-only goes with --standard")
	}
	if a, b := filepath.Clean(*c.in), filepath.Clean(*c.out); a == b {
		return fail(exitUsage, "--out %s is the input", *c.out)
	}
	if !offline.IsHeapDump(*c.in) {
		return fail(exitFailure, "%s: not a heap dump (hprof)", *c.in)
	}
	in, err := os.Open(*c.in)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	defer in.Close()
	var src io.ReadSeeker = in
	tmp := *c.out + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	defer os.Remove(tmp)
	defer out.Close()
	if *c.shrink {
		w := out
		if *c.standard { // shrunk first, then converted
			if w, err = os.Create(*c.out + ".shrunk.tmp"); err != nil {
				return fail(exitFailure, "%v", err)
			}
			defer os.Remove(w.Name())
			defer w.Close()
		}
		st, err := heapdump.Shrink(src, w)
		if err != nil {
			return fail(exitFailure, "%s: %v", *c.in, err)
		}
		fmt.Fprintf(stderr, "alloctrack heapdump: %d arrays emptied (%d bytes of values), %d duplicate Bitmap buffers left out (%d bytes)\n", st.Emptied, st.EmptiedBytes, st.DuplicateBuffers, st.DuplicateBufferBytes)
		if w != out {
			if _, err := w.Seek(0, io.SeekStart); err != nil {
				return fail(exitFailure, "%v", err)
			}
			src = w
		}
	}
	if *c.standard {
		if err := hprof.ConvertStandard(src, out, *c.appOnly); err != nil {
			return fail(exitFailure, "%s: %v", *c.in, err)
		}
	}
	if err := out.Close(); err != nil {
		return fail(exitFailure, "%v", err)
	}
	if err := os.Rename(tmp, *c.out); err != nil {
		return fail(exitFailure, "%v", err)
	}
	inSt, _ := os.Stat(*c.in)
	outSt, _ := os.Stat(*c.out)
	fmt.Fprintf(stderr, "alloctrack heapdump: %s: %d bytes, %.1f%% of %s\n", *c.out, outSt.Size(), 100*float64(outSt.Size())/float64(max(1, inSt.Size())), *c.in)
	return exitOK
}
