package pertest

import (
	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/cespare/xxhash/v2"
)

// reportSites holds, for one report, each record's site hash: the hash
// alloctrack.SiteHashNames gives (the one the daemon's counters use), so
// that a test's sites are the sites of every other output.
type reportSites struct {
	r     *allocreport.Report
	hash  []uint64
	names [3][]uint64 // xxhash of the dotted class, method and file names
}

func newReportSites(r *allocreport.Report) *reportSites {
	rs := &reportSites{r: r, hash: make([]uint64, len(r.Allocations))}
	for k, table := range [3][]string{r.Classes, r.Methods, r.Files} {
		rs.names[k] = make([]uint64, len(table))
		for i, s := range table {
			rs.names[k][i] = xxhash.Sum64String(s)
		}
	}
	for i := range r.Allocations {
		a := &r.Allocations[i]
		h := alloctrack.SiteHashStart(rs.name(0, a.Class))
		for _, f := range r.Stack(a).All() {
			h = alloctrack.SiteHashFrame(h, rs.name(0, f.Class), rs.name(1, f.Method), rs.name(2, f.File), f.Line)
		}
		rs.hash[i] = h
	}
	return rs
}

// name returns the hash of entry i of table k, or of "" for an index past
// the table (a parsed report has none; a built one may).
func (rs *reportSites) name(k int, i uint16) uint64 {
	if int(i) < len(rs.names[k]) {
		return rs.names[k][i]
	}
	return xxhash.Sum64String("")
}

// subset is the window of some records of a report; it names its sites
// from the report while the report is at hand.
type subset struct {
	rs   *reportSites
	reps []int32 // a record of each site
}

// window returns the window of the records idx of the report: exact
// counts per class and per site. It is valid while the report is.
func (rs *reportSites) window(idx []int32) *alloctrack.Window {
	src := &subset{rs: rs}
	w := &alloctrack.Window{Source: src}
	classes := map[uint16]int{}
	sites := map[uint64]int{}
	for _, i := range idx {
		a := &rs.r.Allocations[i]
		w.Total.Allocate(a.Size)
		c, ok := classes[a.Class]
		if !ok {
			c = len(w.Classes)
			classes[a.Class] = c
			w.Classes = append(w.Classes, alloctrack.ClassDelta{Class: className(rs.r, a.Class)})
		}
		w.Classes[c].Count.Allocate(a.Size)
		s, ok := sites[rs.hash[i]]
		if !ok {
			s = len(w.Sites)
			sites[rs.hash[i]] = s
			w.Sites = append(w.Sites, alloctrack.SiteDelta{Hash: rs.hash[i]})
			src.reps = append(src.reps, i)
		}
		w.Sites[s].Count.Allocate(a.Size)
	}
	return w
}

func className(r *allocreport.Report, i uint16) string {
	if int(i) < len(r.Classes) {
		return r.Classes[i]
	}
	return ""
}

// CopyWindow returns a copy of w that holds nothing of w's memory (its
// sites' frames included): for a caller that keeps a window lent to it
// only for a call, to feed it to an Attributor later.
func CopyWindow(w *alloctrack.Window) *alloctrack.Window { return &freeze(w).w }

// SiteInfo implements alloctrack.WindowSource.
func (s *subset) SiteInfo(i, stackMax int) alloctrack.SiteInfo {
	r := s.rs.r
	a := &r.Allocations[s.reps[i]]
	info := alloctrack.SiteInfo{ID: alloctrack.SiteID(s.rs.hash[s.reps[i]]), Class: className(r, a.Class)}
	st := r.Stack(a)
	info.Frames = make([]alloctrack.Frame, st.Len())
	for j, f := range st.All() {
		info.Frames[j] = alloctrack.Frame{Class: tableName(r.Classes, f.Class), Method: tableName(r.Methods, f.Method),
			File: tableName(r.Files, f.File), Line: int(f.Line)}
	}
	for _, f := range info.Frames {
		if !alloctrack.IsFrameworkClass(f.Class) {
			info.Frame = f.String()
			break
		}
	}
	if info.Frame == "" && len(info.Frames) > 0 {
		info.Frame = info.Frames[0].String()
	}
	return info
}

func tableName(t []string, i uint16) string {
	if int(i) < len(t) {
		return t[i]
	}
	return ""
}

// Threads implements alloctrack.WindowSource (a test's tally needs none).
func (s *subset) Threads() []alloctrack.ThreadDelta { return nil }

// Release implements alloctrack.WindowSource.
func (s *subset) Release() {}

var _ alloctrack.WindowSource = (*subset)(nil)

// frozen is a copy of a window whose source may be released: a heapprofd
// dump kept until the runner's lines place it.
type frozen struct {
	w     alloctrack.Window
	infos []alloctrack.SiteInfo
}

func freeze(w *alloctrack.Window) *frozen {
	f := &frozen{w: *w}
	if w.Sampling != nil {
		s := *w.Sampling
		f.w.Sampling = &s
	}
	f.w.Classes = append([]alloctrack.ClassDelta(nil), w.Classes...)
	f.w.Sites = append([]alloctrack.SiteDelta(nil), w.Sites...)
	f.infos = make([]alloctrack.SiteInfo, len(w.Sites))
	for i := range w.Sites {
		if w.Source != nil {
			f.infos[i] = w.Info(i, 0)
		}
	}
	f.w.Source = f
	return f
}

// SiteInfo implements alloctrack.WindowSource.
func (f *frozen) SiteInfo(i, stackMax int) alloctrack.SiteInfo { return f.infos[i] }

// Threads implements alloctrack.WindowSource.
func (f *frozen) Threads() []alloctrack.ThreadDelta { return nil }

// Release implements alloctrack.WindowSource.
func (f *frozen) Release() {}

var _ alloctrack.WindowSource = (*frozen)(nil)
