package pertest_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// readProfile reads a profile file back with pprof's own reader.
func readProfile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

// sums returns the sum of each sample value of p, by sample type.
func sums(p *profile.Profile) map[string]int64 {
	out := map[string]int64{}
	for _, s := range p.Sample {
		for i, v := range s.Value {
			out[p.SampleType[i].Type] += v
		}
	}
	return out
}

// stacks returns each sample's frames as "function file:line", top first.
func stacks(p *profile.Profile) [][]string {
	var out [][]string
	for _, s := range p.Sample {
		var st []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				st = append(st, ln.Function.Name+" "+ln.Function.Filename+":"+strconv.FormatInt(ln.Line, 10))
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, slices.Compare)
	return out
}

// WriteTestProfiles writes one profile per test, named by its position,
// that pprof reads back with the test's sites (frames with their files
// and lines), counts, name and outcome.
func TestWriteTestProfiles(t *testing.T) {
	run := sampleRun()
	dir := t.TempDir()
	files, err := pertest.WriteTestProfiles(dir, run)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(run.Tests) || files[0] != filepath.Join(dir, "tests", "001.pb.gz") || files[7] != filepath.Join(dir, "tests", "008.pb.gz") {
		t.Fatalf("files %v, want tests/001.pb.gz to tests/008.pb.gz", files)
	}
	p := readProfile(t, files[0])
	if s := sums(p); s["alloc_objects"] != 120 || s["alloc_space"] != 4800 {
		t.Errorf("test 1's profile sums %v, want 120 allocations of 4800 bytes", s)
	}
	want := [][]string{
		{"com.example.Main.open Main.java:12", "com.example.MainTest.testOpen MainTest.java:30"},
		{"java.lang.StringBuilder.toString :0", "com.example.Main.name :0"}, // a native frame: no file, as Java prints it
	}
	slices.SortFunc(want, slices.Compare)
	if got := stacks(p); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("stacks %q, want %q", got, want)
	}
	if !slices.Contains(p.Comments, "test: testOpen(com.example.MainTest)") || !slices.Contains(p.Comments, "outcome: passed") {
		t.Errorf("comments %q do not name the test and its outcome", p.Comments)
	}
	if p.TimeNanos != run.Tests[0].Start.UnixNano() || p.DurationNanos != 1250e6 {
		t.Errorf("time %d duration %d, want the test's", p.TimeNanos, p.DurationNanos)
	}
	crash := readProfile(t, files[6])
	if len(crash.Sample) != 0 || !slices.ContainsFunc(crash.Comments, func(c string) bool { return strings.HasPrefix(c, "PARTIAL: its process died") }) {
		t.Errorf("the crashed test's profile: %d samples, comments %q", len(crash.Sample), crash.Comments)
	}
}

// A heapprofd test's profile has heapprofd's sample types: the samples
// exactly and the estimates, the default.
func TestTestProfileHeapprofd(t *testing.T) {
	run := sampleRun()
	run.Backend = alloctrack.BackendHeapprofd
	tt := &run.Tests[0]
	tt.Tally = tallyOf(true, site{"", []alloctrack.Frame{fr("com.example.Main", "open", "", -1)}, 3, 300})
	p, err := pertest.TestProfile(run, tt)
	if err != nil {
		t.Fatal(err)
	}
	s := sums(p)
	if s[alloctrack.SampleTypeSamples] != 3 || s[alloctrack.SampleTypeSampledSpace] != 300 || s[alloctrack.SampleTypeEstimatedObjects] != 6 || s[alloctrack.SampleTypeEstimatedSpace] != 600 {
		t.Errorf("sums %v, want 3 samples of 300 bytes estimated as 6 of 600", s)
	}
	if p.DefaultSampleType != alloctrack.SampleTypeEstimatedSpace {
		t.Errorf("default sample type %q", p.DefaultSampleType)
	}
}
