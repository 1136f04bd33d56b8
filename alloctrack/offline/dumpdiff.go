package offline

import (
	"cmp"
	"slices"
	"strings"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
)

// DumpCount is one class's objects in one heap of one dump.
type DumpCount struct {
	Instances int64 `json:"instances"`
	Bytes     int64 `json:"bytes"`
	Retained  int64 `json:"retained_bytes"`
}

// DumpDiffRow compares one class in one heap between two dumps.
type DumpDiffRow struct {
	Heap   string    `json:"heap"`
	Class  string    `json:"class"`
	Base   DumpCount `json:"base"`
	New    DumpCount `json:"new"`
	Change DumpCount `json:"change"` // New - Base
}

// DumpDiff compares two heap dumps per heap and class, and their leaks
// and duplicates.
type DumpDiff struct {
	Classes []DumpDiffRow `json:"classes"`
	// Leaks and the bytes duplicates waste, in each dump.
	BaseLeaks      int    `json:"base_leaks"`
	NewLeaks       int    `json:"new_leaks"`
	BaseDuplicates uint64 `json:"base_duplicate_bytes"`
	NewDuplicates  uint64 `json:"new_duplicate_bytes"`
	// The bytes each dump made for itself, left out of every row
	// (Android 15's Bitmap.dumpData).
	BaseLeftOutBytes uint64 `json:"base_left_out_bytes,omitempty"`
	NewLeftOutBytes  uint64 `json:"new_left_out_bytes,omitempty"`
}

func dumpCount(c heapdump.ClassCount) DumpCount {
	return DumpCount{int64(c.Instances), int64(c.Bytes), int64(c.Retained)}
}

func wasted(a *heapdump.Analysis) (n uint64) {
	for _, d := range a.DuplicateStrings {
		n += d.Wasted
	}
	for _, d := range a.DuplicateBitmaps {
		n += d.Wasted
	}
	return n
}

// CompareDumps compares two dumps' analyses. Rows are sorted by growth:
// retained bytes first, then bytes, then instances.
func CompareDumps(base, nw *heapdump.Analysis) *DumpDiff {
	d := &DumpDiff{BaseLeaks: len(base.Leaks), NewLeaks: len(nw.Leaks), BaseDuplicates: wasted(base), NewDuplicates: wasted(nw),
		BaseLeftOutBytes: base.Histogram.LeftOutBytes, NewLeftOutBytes: nw.Histogram.LeftOutBytes}
	rows := map[[2]string]*DumpDiffRow{}
	get := func(c heapdump.ClassCount) *DumpDiffRow {
		k := [2]string{c.Heap, c.Class}
		r := rows[k]
		if r == nil {
			r = &DumpDiffRow{Heap: c.Heap, Class: c.Class}
			rows[k] = r
		}
		return r
	}
	for _, c := range base.Histogram.Classes {
		get(c).Base = dumpCount(c)
	}
	for _, c := range nw.Histogram.Classes {
		get(c).New = dumpCount(c)
	}
	for _, r := range rows {
		r.Change = DumpCount{r.New.Instances - r.Base.Instances, r.New.Bytes - r.Base.Bytes, r.New.Retained - r.Base.Retained}
		d.Classes = append(d.Classes, *r)
	}
	slices.SortFunc(d.Classes, func(a, b DumpDiffRow) int {
		for _, c := range []int{cmp.Compare(b.Change.Retained, a.Change.Retained), cmp.Compare(b.Change.Bytes, a.Change.Bytes),
			cmp.Compare(b.Change.Instances, a.Change.Instances), strings.Compare(a.Heap, b.Heap), strings.Compare(a.Class, b.Class)} {
			if c != 0 {
				return c
			}
		}
		return 0
	})
	return d
}
