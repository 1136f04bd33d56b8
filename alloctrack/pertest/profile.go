package pertest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// ProfilesDir is the directory of a capture that holds one profile per
// test (WriteTestProfiles).
const ProfilesDir = "tests"

// ProfileName is the file name of the profile of the i-th test of a run
// (from 0): its position from 1, three digits or more, as 001.pb.gz.
func ProfileName(i int) string { return fmt.Sprintf("%03d.pb.gz", i+1) }

// TestProfile returns the pprof profile of test t of run: every site of
// its Tally, as `report --format pprof` writes a capture's (alloc_objects
// and alloc_space; heapprofd's four sample types when the figures are
// estimates), stamped with the test's start and duration, its name,
// outcome and notes in the comments. A test with no Tally gives an empty
// profile.
func TestProfile(run *Run, t *Test) (*profile.Profile, error) {
	b := alloctrack.NewProfileBuilder()
	if t.Tally != nil && t.Tally.Estimated {
		b = alloctrack.NewHeapprofdProfileBuilder()
	}
	if t.Tally != nil {
		for _, s := range t.Tally.TopSites(0, false) {
			frames := make([]alloctrack.Frame, len(s.Frames))
			for i, f := range s.Frames {
				frames[i] = parseFrame(f)
			}
			if b.Heapprofd() {
				b.AddSampledSite(s.Class, frames, s.Sampled, s.Estimate)
			} else {
				b.AddSite(s.Class, frames, -1, s.Allocations, s.Bytes)
			}
		}
	}
	p := b.Profile(t.Start, time.Duration(t.DurationSeconds*float64(time.Second)))
	p.Comments = append(p.Comments, "test: "+t.Name, "outcome: "+string(t.Outcome), "app: "+run.Package)
	if run.Boundary != "" {
		p.Comments = append(p.Comments, "boundaries: "+run.Boundary)
	}
	if t.Partial {
		p.Comments = append(p.Comments, "PARTIAL: "+strings.Join(t.Notes, "; "))
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("pertest: the profile of %s: %w", t.Name, err)
	}
	return p, nil
}

// WriteTestProfiles writes the profile of each test of run into
// dir/tests/, named by ProfileName (the test's position in run.Tests),
// each to a temporary name first and then renamed, so that a reader never
// sees half a file. It returns the files written.
func WriteTestProfiles(dir string, run *Run) ([]string, error) {
	out := filepath.Join(dir, ProfilesDir)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("pertest: %w", err)
	}
	var files []string
	for i := range run.Tests {
		p, err := TestProfile(run, &run.Tests[i])
		if err != nil {
			return files, err
		}
		var buf bytes.Buffer
		if err := p.Write(&buf); err != nil {
			return files, fmt.Errorf("pertest: encoding the profile of %s: %w", run.Tests[i].Name, err)
		}
		path := filepath.Join(out, ProfileName(i))
		if err := writeFileAtomic(path, buf.Bytes()); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it to path.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pertest: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("pertest: writing %s: %w", path, err)
	}
	return nil
}

// parseFrame reads a frame as a Tally holds it back into its parts:
// "pkg.Class.method(File.java:12)" as Java prints it ("Native Method",
// "Unknown Source", a file without line), or "pkg.Class.method" alone
// (heapprofd and agent-log frames, which have no file or line).
func parseFrame(s string) alloctrack.Frame {
	fn, where, paren := strings.Cut(s, "(")
	f := alloctrack.Frame{Line: -1}
	if i := strings.LastIndexByte(fn, '.'); i >= 0 {
		f.Class, f.Method = fn[:i], fn[i+1:]
	} else {
		f.Method = fn
	}
	if !paren {
		return f
	}
	where = strings.TrimSuffix(where, ")")
	switch where {
	case "Native Method":
		f.Line = -2
	case "Unknown Source":
	default:
		f.File = where
		if i := strings.LastIndexByte(where, ':'); i >= 0 {
			if n, err := strconv.Atoi(where[i+1:]); err == nil && n >= 0 {
				f.File, f.Line = where[:i], n
			}
		}
	}
	return f
}
