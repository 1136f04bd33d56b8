package alloctrack_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/ddm"

	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/google/pprof/profile"
)

// realProfile builds the profile of the real report and checks that it
// survives encoding.
func realProfile(t *testing.T) (*allocreport.Report, *profile.Profile, []byte) {
	t.Helper()
	r, err := allocreport.Parse(readReal(t))
	if err != nil {
		t.Fatal(err)
	}
	b := alloctrack.NewProfileBuilder()
	b.Add(ddm.WindowOfReport(r, time.Time{}, time.Time{}))
	start := time.Date(2018, 12, 6, 16, 6, 51, 0, time.UTC)
	p := b.Profile(start, 10*time.Second)
	if err := p.CheckValid(); err != nil {
		t.Fatalf("built profile: %v", err)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	q, err := profile.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("profile.Parse: %v", err)
	}
	if err := q.CheckValid(); err != nil {
		t.Fatalf("parsed profile: %v", err)
	}
	if q.TimeNanos != start.UnixNano() || q.DurationNanos != int64(10*time.Second) {
		t.Errorf("time %d, duration %d", q.TimeNanos, q.DurationNanos)
	}
	return r, q, buf.Bytes()
}

func TestProfileBuilderRealReport(t *testing.T) {
	r, p, _ := realProfile(t)
	if got := []string{p.SampleType[0].Type + "/" + p.SampleType[0].Unit, p.SampleType[1].Type + "/" + p.SampleType[1].Unit}; got[0] != "alloc_objects/count" || got[1] != "alloc_space/bytes" {
		t.Errorf("sample types %v", got)
	}
	if p.DefaultSampleType != "alloc_space" {
		t.Errorf("default sample type %q", p.DefaultSampleType)
	}

	// Per class and per thread, as the report says.
	wantClass, wantThread := map[string][2]int64{}, map[string][2]int64{}
	for i := range r.Allocations {
		a := &r.Allocations[i]
		for m, k := range map[*map[string][2]int64]string{&wantClass: r.ClassName(a), &wantThread: strconv.Itoa(int(a.Thread))} {
			v := (*m)[k]
			v[0]++
			v[1] += int64(a.Size)
			(*m)[k] = v
		}
	}
	gotClass, gotThread := map[string][2]int64{}, map[string][2]int64{}
	var objs, space int64
	for _, s := range p.Sample {
		objs += s.Value[0]
		space += s.Value[1]
		cl, th := s.Label["class"], s.Label["thread"]
		if len(cl) != 1 || len(th) != 1 {
			t.Fatalf("sample labels %v: want one class and one thread", s.Label)
		}
		for m, k := range map[*map[string][2]int64]string{&gotClass: cl[0], &gotThread: th[0]} {
			v := (*m)[k]
			v[0] += s.Value[0]
			v[1] += s.Value[1]
			(*m)[k] = v
		}
		if len(s.Location) == 0 {
			t.Errorf("sample %v has no location", s.Label)
		}
	}
	if objs != 5000 || space != 287096 {
		t.Errorf("samples hold %d allocations, %d bytes; the report 5000, 287096", objs, space)
	}
	for _, c := range []struct {
		name      string
		got, want map[string][2]int64
	}{{"class", gotClass, wantClass}, {"thread", gotThread, wantThread}} {
		if len(c.got) != len(c.want) {
			t.Errorf("%d %s labels, want %d", len(c.got), c.name, len(c.want))
		}
		for k, v := range c.want {
			if c.got[k] != v {
				t.Errorf("%s %s: %v, want %v", c.name, k, c.got[k], v)
			}
		}
	}
	if gotClass["android.os.Message"] != [2]int64{4000, 256000} {
		t.Errorf("android.os.Message: %v", gotClass["android.os.Message"])
	}

	// One location per distinct frame, each with its own non-zero address
	// inside the mapping; functions named Class.method.
	frames := map[alloctrack.Frame]bool{}
	for i := range r.Allocations {
		for _, f := range r.Stack(&r.Allocations[i]).All() {
			frames[ddm.FrameOf(r, f)] = true
		}
	}
	addrs := map[uint64]uint64{}
	for _, l := range p.Location {
		if l.Address < p.Mapping[0].Start || l.Address == 0 {
			t.Errorf("location %d: address %#x below the mapping", l.ID, l.Address)
		}
		if o, dup := addrs[l.Address]; dup {
			t.Errorf("locations %d and %d share address %#x", o, l.ID, l.Address)
		}
		addrs[l.Address] = l.ID
		if len(l.Line) != 1 || l.Line[0].Line < 0 || !strings.Contains(l.Line[0].Function.Name, ".") {
			t.Errorf("location %d: lines %+v", l.ID, l.Line)
		}
	}
	// The report has stackless allocations: they share "<no stack>".
	if len(p.Location) != len(frames)+1 {
		t.Errorf("%d locations for %d distinct frames and <no stack>", len(p.Location), len(frames))
	}
}

// TestProfileGoToolPprof: `go tool pprof -top` reads the profile and puts
// the frame that allocates android.os.Message 4,000 times (250 kB of the
// 280 kB) first, with the frames below it on the cumulative side.
func TestProfileGoToolPprof(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH: %v", err)
	}
	_, _, b := realProfile(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "real.pb.gz")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		index   string
		flatTop string // flat value of the first line
	}{
		{"alloc_space", "250kB"},
		{"alloc_objects", "4000"},
	} {
		t.Run(tc.index, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, goBin, "tool", "pprof", "-top", "-nodecount=1000", "-sample_index="+tc.index, file)
			cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+dir, "PPROF_BINARY_PATH="+dir)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go tool pprof: %v\n%s", err, out)
			}
			text := string(out)
			if !strings.Contains(text, "Type: "+tc.index) {
				t.Errorf("no %q in:\n%s", "Type: "+tc.index, text)
			}
			// The rows after the "flat flat% sum% cum cum%" header.
			var rows [][]string
			sc := bufio.NewScanner(strings.NewReader(text))
			header := false
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) >= 5 && f[0] == "flat" && f[1] == "flat%" {
					header = true
					continue
				}
				if header && len(f) >= 6 {
					rows = append(rows, f)
				}
			}
			if len(rows) == 0 {
				t.Fatalf("no rows in:\n%s", text)
			}
			if fn := strings.Join(rows[0][5:], " "); fn != "com.dodola.alloctrack.MainActivity$4.onClick" || rows[0][0] != tc.flatTop {
				t.Errorf("first row %q, want com.dodola.alloctrack.MainActivity$4.onClick with flat %s:\n%s", rows[0], tc.flatTop, text)
			}
			// The Message site's callers carry its 4,000 allocations
			// (250 kB) in cum.
			cum := map[string]string{}
			for _, r := range rows {
				cum[strings.Join(r[5:], " ")] = r[3]
			}
			for _, fn := range []string{"android.view.View.performClick", "android.os.Handler.dispatchMessage", "android.os.Looper.loop", "android.app.ActivityThread.main", "com.android.internal.os.ZygoteInit.main"} {
				v, ok := cum[fn]
				if !ok {
					t.Errorf("%s is not among the rows:\n%s", fn, text)
					continue
				}
				n, err := strconv.ParseFloat(strings.TrimSuffix(v, "kB"), 64)
				if err != nil || tc.index == "alloc_space" && !strings.HasSuffix(v, "kB") || n < 250 && tc.index == "alloc_space" || n < 4000 && tc.index == "alloc_objects" {
					t.Errorf("%s: cum %s, want at least the Message site's %s", fn, v, tc.flatTop)
				}
			}
		})
	}
}

func TestFrameAddress(t *testing.T) {
	f := alloctrack.Frame{Class: "com.example.Main", Method: "run", File: "Main.java", Line: 12}
	a := alloctrack.FrameAddress(f)
	if a == 0 || a < 0x1000 || a != alloctrack.FrameAddress(f) {
		t.Fatalf("FrameAddress %#x", a)
	}
	seen := map[uint64]alloctrack.Frame{a: f}
	for _, g := range []alloctrack.Frame{
		{Class: "com.example.Main", Method: "run", File: "Main.java", Line: 13},
		{Class: "com.example.Main", Method: "run", File: "Other.java", Line: 12},
		{Class: "com.example.Main", Method: "walk", File: "Main.java", Line: 12},
		{Class: "com.example.Other", Method: "run", File: "Main.java", Line: 12},
		{Class: "com.example.Main", Method: "run", File: "Main.java", Line: -2},
		{Class: "com.example.Main", Method: "run", Line: 12},
	} {
		b := alloctrack.FrameAddress(g)
		if o, dup := seen[b]; dup {
			t.Errorf("%+v and %+v share %#x", o, g, b)
		}
		seen[b] = g
	}
}

// TestProfileBuilderEdges: no stack, unknown and native lines, unknown
// thread, and nothing counted.
func TestProfileBuilderEdges(t *testing.T) {
	b := alloctrack.NewProfileBuilder()
	b.AddSite("byte[]", nil, -1, 3, 48)
	b.AddSite("byte[]", nil, -1, 1, 16) // same sample
	b.AddSite("int[]", []alloctrack.Frame{{Class: "java.lang.Object", Method: "internalClone", Line: -2}, {Class: "a.B", Method: "c", File: "B.java", Line: -1}}, 12, 1, 24)
	b.AddSite("int[]", []alloctrack.Frame{{Class: "a.B", Method: "c", File: "B.java", Line: 5}}, 12, 0, 0) // nothing: no sample
	p := b.Profile(time.Unix(0, 0), time.Second)
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 2 {
		t.Fatalf("%d samples, want 2", len(p.Sample))
	}
	s := p.Sample[0]
	if s.Value[0] != 4 || s.Value[1] != 64 || len(s.Location) != 1 || s.Location[0].Line[0].Function.Name != "<no stack>.<unknown>" {
		t.Errorf("stackless sample: %v at %v", s.Value, s.Location[0].Line)
	}
	if _, ok := s.Label["thread"]; ok {
		t.Errorf("unknown thread labelled: %v", s.Label)
	}
	s = p.Sample[1]
	if s.Label["thread"][0] != "12" || s.Label["class"][0] != "int[]" {
		t.Errorf("labels %v", s.Label)
	}
	for _, l := range s.Location {
		if l.Line[0].Line != 0 {
			t.Errorf("%s: line %d, want 0 for unknown and native lines", l.Line[0].Function.Name, l.Line[0].Line)
		}
	}
	if len(p.Location) != 3 {
		t.Errorf("%d locations, want 3 (an unused frame gets none)", len(p.Location))
	}
}

// readReal reads the report recorded on a device (testdata/README.md).
func readReal(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "real", "geektime-chapter03-1544113611.real"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProfileAddRefusesMixing: one profile holds exact (DDM) or sampled
// (heapprofd) windows, never both; a window of the other kind is an
// error, not a panic, and adds nothing.
func TestProfileAddRefusesMixing(t *testing.T) {
	r, err := allocreport.Parse(readReal(t))
	if err != nil {
		t.Fatal(err)
	}
	exact := ddm.WindowOfReport(r, time.Time{}, time.Time{})
	defer exact.Release()
	sampled := &alloctrack.Window{Sampling: &alloctrack.Sampling{Interval: 4096}, Sites: []alloctrack.SiteDelta{{Hash: 1, Count: alloctrack.Count{1, 16}}}, Source: fixedSource{{ID: alloctrack.SiteID(1), Heapprofd: true}}}

	b := alloctrack.NewProfileBuilder()
	if err := b.Add(sampled); err == nil {
		t.Error("a sampled window went into an exact profile")
	}
	if n := len(b.Profile(time.Time{}, 0).Sample); n != 0 {
		t.Errorf("%d samples after a refused window", n)
	}
	if err := b.Add(exact); err != nil {
		t.Fatal(err)
	}
	h := alloctrack.NewHeapprofdProfileBuilder()
	if err := h.Add(exact); err == nil {
		t.Error("an exact window went into a heapprofd profile")
	}
	if err := h.Add(sampled); err != nil {
		t.Fatal(err)
	}
	if n := len(h.Profile(time.Time{}, 0).Sample); n != 1 {
		t.Errorf("%d samples, want 1", n)
	}
}

// fixedSource names a window's sites from a list.
type fixedSource []alloctrack.SiteInfo

func (f fixedSource) SiteInfo(i, _ int) alloctrack.SiteInfo { return f[i] }
func (f fixedSource) Threads() []alloctrack.ThreadDelta     { return nil }
func (f fixedSource) Release()                              {}
