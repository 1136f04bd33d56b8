package offline_test

import (
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// fakeSites is a window source over given sites.
type fakeSites []alloctrack.SiteInfo

func (f fakeSites) SiteInfo(i, _ int) alloctrack.SiteInfo { return f[i] }
func (f fakeSites) Threads() []alloctrack.ThreadDelta     { return nil }
func (f fakeSites) Release()                              {}
func frame(class, method, file string, line int) alloctrack.Frame {
	return alloctrack.Frame{Class: class, Method: method, File: file, Line: line}
}

// tallyOf counts n allocations of 8 bytes at each site.
func tallyOf(sampled bool, n uint64, sites ...alloctrack.SiteInfo) *alloctrack.Tally {
	w := &alloctrack.Window{Source: fakeSites(sites)}
	if sampled {
		w.Sampling = &alloctrack.Sampling{Every: 1}
	}
	for i, s := range sites {
		h := alloctrack.SiteHashNames(s.Class, s.Frames) + uint64(i)
		c := alloctrack.Count{Allocations: n, Bytes: 8 * n}
		w.Sites = append(w.Sites, alloctrack.SiteDelta{Hash: h, Count: c, Estimated: alloctrack.Estimate{Allocations: float64(n), Bytes: float64(8 * n)}})
		w.Total = w.Total.Plus(c)
	}
	t := alloctrack.NewTally()
	t.Add(w)
	return t
}

// Sites of a DDM report match those of a heapprofd trace (no class, no
// file or line) and of an agent log (no file or line; in the README's
// layout no frame classes either) on what both know, frames cut to the
// shallower input's depth; sites that become one are summed.
func TestDiffMatchesOnWhatBothKnow(t *testing.T) {
	ddmFrames := func(line int) []alloctrack.Frame {
		return []alloctrack.Frame{frame("a.B", "make", "B.java", line), frame("a.C", "run", "C.java", 9), frame("a.D", "main", "D.java", 1)}
	}
	// Two DDM sites that differ only in a line.
	ddm := tallyOf(false, 10,
		alloctrack.SiteInfo{Class: "int[]", Frames: ddmFrames(3)},
		alloctrack.SiteInfo{Class: "int[]", Frames: ddmFrames(4)})
	for _, c := range []struct {
		name, matching string
		other          alloctrack.SiteInfo
	}{
		{"heapprofd", "Class.method of the top 2 frames", alloctrack.SiteInfo{Heapprofd: true, Frames: []alloctrack.Frame{frame("a.B", "make", "", -1), frame("a.C", "run", "", -1)}}},
		{"agent log", "class and Class.method of the top 3 frames", alloctrack.SiteInfo{Class: "int[]", Lineless: true, Frames: []alloctrack.Frame{frame("a.B", "make", "", -1), frame("a.C", "run", "", -1), frame("a.D", "main", "", -1)}}},
		{"README agent log", "class and method names of the top 3 frames", alloctrack.SiteInfo{Class: "int[]", Lineless: true, Frames: []alloctrack.Frame{frame("", "make", "", -1), frame("", "run", "", -1), frame("", "main", "", -1)}}},
	} {
		d := offline.Compare(ddm, tallyOf(true, 20, c.other), 0, 0)
		if !strings.HasPrefix(d.Matching, c.matching) {
			t.Errorf("%s: matching %q, want %q", c.name, d.Matching, c.matching)
		}
		if len(d.Sites) != 1 || d.Sites[0].Base.Allocations != 20 || d.Sites[0].New.Allocations != 20 || d.Sites[0].Change != (offline.Rate{}) {
			t.Errorf("%s: sites %+v, want one of 20 allocations on each side", c.name, d.Sites)
		}
	}
	// Two DDM inputs still match on everything.
	if d := offline.Compare(ddm, ddm, 0, 0); len(d.Sites) != 2 || !strings.HasPrefix(d.Matching, "class and every frame") {
		t.Errorf("DDM against DDM: %d sites, matching %q", len(d.Sites), d.Matching)
	}
}
