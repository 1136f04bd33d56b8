// The window of a DDM report: its allocations summed per class and per
// site, fast enough for the largest report a VM sends.

package ddm

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"

	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/cespare/xxhash/v2"
)

// siteHasher hashes sites of one report by names, so that the same site
// hashes alike in every report whatever its table indices.
type siteHasher struct {
	classes, methods, files []uint64
}

// sameWire tells whether st's frame bytes are b.
func sameWire(st allocreport.Stack, b []byte) bool {
	sb, _ := st.Wire()
	return bytes.Equal(sb, b)
}

func (sh *siteHasher) site(a *allocreport.Allocation, st allocreport.Stack) uint64 {
	h := alloctrack.SiteHashStart(sh.classes[a.Class])
	if b, stride := st.Wire(); stride == allocreport.FrameLen {
		// The common layout, straight from the frame bytes.
		for j := 0; j+8 <= len(b); j += 8 {
			v := binary.BigEndian.Uint64(b[j : j+8])
			h = alloctrack.SiteHashFrame(h, sh.classes[v>>48], sh.methods[v>>32&0xffff], sh.files[v>>16&0xffff], int16(v))
		}
		return h
	}
	for j := range st.Len() {
		f := st.At(j)
		h = alloctrack.SiteHashFrame(h, sh.classes[f.Class], sh.methods[f.Method], sh.files[f.File], f.Line)
	}
	return h
}

// reportSiteInfo builds the labels of the site of allocation a of r, its
// stack label capped at stackMax bytes (0: none).
func reportSiteInfo(r *allocreport.Report, a *allocreport.Allocation, h uint64, stackMax int) alloctrack.SiteInfo {
	st := r.Stack(a)
	info := alloctrack.SiteInfo{ID: alloctrack.SiteID(h), Class: r.ClassName(a)}
	if j := AppFrame(r, st); j >= 0 {
		info.Frame = r.FrameString(st.At(j))
	}
	info.Frames = make([]alloctrack.Frame, st.Len())
	for j, f := range st.All() {
		info.Frames[j] = FrameOf(r, f)
	}
	if stackMax <= 0 {
		return info
	}
	var b strings.Builder
	for j, f := range st.All() {
		if j > 0 {
			b.WriteString("; ")
		}
		b.WriteString(r.FrameString(f))
		if b.Len() > stackMax {
			break
		}
	}
	info.Stack = alloctrack.CapLabel(b.String(), stackMax)
	return info
}

// rawSeq is one distinct byte sequence of class and frame indices.
type rawSeq struct {
	h     uint64
	class uint16
	site  int32 // index into the window's Sites
	rep   int32 // an allocation with these bytes
}

// reportScratch is the working memory and the window of one report, reused
// across reports (and apps) through scratchPool rather than allocated per
// window; Window.Release gives it back.
type reportScratch struct {
	win     alloctrack.Window
	r       *allocreport.Report
	reps    []int32 // by site: one allocation of it
	table   []int32 // open addressing over sites: index + 1, 0 for empty
	raws    []rawSeq
	raw     []int32            // open addressing over raws
	classes []alloctrack.Count // by class index
	hashes  [3][]uint64
}

// rawSeed seeds the hashes of raw stacks within one aggregate.
var rawSeed = maphash.MakeSeed()

var scratchPool = sync.Pool{New: func() any { return new(reportScratch) }}

// hashTables fills the scratch's name hashes of r's tables.
func (sc *reportScratch) hashTables(r *allocreport.Report) *siteHasher {
	for i, t := range [3][]string{r.Classes, r.Methods, r.Files} {
		h := zeroed(sc.hashes[i], len(t))
		for j, s := range t {
			h[j] = xxhash.Sum64String(s)
		}
		sc.hashes[i] = h
	}
	return &siteHasher{classes: sc.hashes[0], methods: sc.hashes[1], files: sc.hashes[2]}
}

// aggregate sums r's allocations per class and per distinct site, into
// sc.win.Sites in order of first allocation.
func (sc *reportScratch) aggregate(r *allocreport.Report) (total alloctrack.Count) {
	sh := sc.hashTables(r)
	sc.classes = zeroed(sc.classes, len(r.Classes))
	n := len(r.Allocations)
	size := 16
	for size < 2*n {
		size <<= 1
	}
	sc.table = zeroed(sc.table, size)
	sc.raw = zeroed(sc.raw, size)
	mask := uint64(size - 1)
	sites := sc.win.Sites[:0]
	sc.reps = sc.reps[:0]
	sc.raws = sc.raws[:0]
	// Allocations of one site usually repeat the same bytes (class and
	// frame indices): those are matched by their bytes first, and the
	// site's hash by names is computed once per distinct byte sequence.
	// When nearly every entry is a new sequence, that costs more than it
	// saves, and is stopped.
	useRaw := true
	for i := range r.Allocations {
		a := &r.Allocations[i]
		total.Allocate(a.Size)
		sc.classes[a.Class].Allocate(a.Size)
		st := r.Stack(a)
		var rh uint64
		if useRaw {
			if i == 4096 && len(sc.raws) > 3*4096/4 {
				useRaw = false
			} else {
				// Raw keys live only in this table: the runtime's hash
				// (AES-based where the CPU has it) is several times
				// cheaper than xxhash on stacks this short.
				stb, _ := st.Wire()
				rh = maphash.Bytes(rawSeed, stb) ^ uint64(a.Class)*0x9e3779b97f4a7c15
				found := false
				for j := rh & mask; ; j = (j + 1) & mask {
					k := sc.raw[j]
					if k == 0 {
						break
					}
					if e := &sc.raws[k-1]; e.h == rh && e.class == a.Class && sameWire(r.Stack(&r.Allocations[e.rep]), stb) {
						sites[e.site].Count.Allocate(a.Size)
						found = true
						break
					}
				}
				if found {
					continue
				}
			}
		}
		h := sh.site(a, st)
		site := int32(-1)
		for j := h & mask; ; j = (j + 1) & mask {
			k := sc.table[j]
			if k == 0 {
				sites = append(sites, alloctrack.SiteDelta{Hash: h})
				sc.reps = append(sc.reps, int32(i))
				site = int32(len(sites) - 1)
				sites[site].Count.Allocate(a.Size)
				sc.table[j] = site + 1
				break
			}
			if s := &sites[k-1]; s.Hash == h {
				s.Count.Allocate(a.Size)
				site = k - 1
				break
			}
		}
		if useRaw {
			sc.raws = append(sc.raws, rawSeq{h: rh, class: a.Class, site: site, rep: int32(i)})
			for j := rh & mask; ; j = (j + 1) & mask {
				if sc.raw[j] == 0 {
					sc.raw[j] = int32(len(sc.raws))
					break
				}
			}
		}
	}
	sc.win.Sites = sites
	return total
}

// WindowOfReport returns the window of report r, from start to end (a
// zero start: since the window before, see Counters.Add): its allocations
// summed per class and per site, exactly, with every allocation's thread
// kept (Window.Threads). The window refers to r: keep r unchanged until the
// window is released.
func WindowOfReport(r *allocreport.Report, start, end time.Time) *alloctrack.Window {
	sc := scratchPool.Get().(*reportScratch)
	sc.r = r
	w := &sc.win
	*w = alloctrack.Window{Start: start, End: end, Classes: w.Classes[:0], Sites: w.Sites[:0], Source: sc}
	if len(r.Allocations) == 0 {
		return w
	}
	w.Total = sc.aggregate(r)
	for idx, n := range sc.classes {
		if n.Allocations > 0 {
			w.Classes = append(w.Classes, alloctrack.ClassDelta{Class: r.Classes[idx], Count: n})
		}
	}
	return w
}

// SiteInfo implements WindowSource.
func (sc *reportScratch) SiteInfo(i, stackMax int) alloctrack.SiteInfo {
	return reportSiteInfo(sc.r, &sc.r.Allocations[sc.reps[i]], sc.win.Sites[i].Hash, stackMax)
}

// Threads implements WindowSource: the report's allocations summed per
// site and thread, in order of first allocation. Only profiles ask for
// threads, so each allocation's site is found again here rather than
// noted for every window in aggregate.
func (sc *reportScratch) Threads() []alloctrack.ThreadDelta {
	site := make(map[uint64]int32, len(sc.win.Sites))
	for i, sd := range sc.win.Sites {
		site[sd.Hash] = int32(i)
	}
	sh := &siteHasher{classes: sc.hashes[0], methods: sc.hashes[1], files: sc.hashes[2]}
	var out []alloctrack.ThreadDelta
	idx := map[[2]int32]int{}
	for i := range sc.r.Allocations {
		a := &sc.r.Allocations[i]
		k := [2]int32{site[sh.site(a, sc.r.Stack(a))], int32(a.Thread)}
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, alloctrack.ThreadDelta{Site: int(k[0]), Thread: int(a.Thread)})
		}
		out[j].Count.Allocate(a.Size)
	}
	return out
}

// Release implements WindowSource.
func (sc *reportScratch) Release() {
	sc.r = nil
	sc.win.Source = nil
	scratchPool.Put(sc)
}

// FrameOf returns frame f of r by names.
func FrameOf(r *allocreport.Report, f allocreport.Frame) alloctrack.Frame {
	return alloctrack.Frame{Class: r.Classes[f.Class], Method: r.Methods[f.Method], File: r.Files[f.File], Line: int(f.Line)}
}

// AppFrame returns the index of the first frame of st that is not in a
// framework package, or 0 (the top frame) when all are; -1 when st is empty.
func AppFrame(r *allocreport.Report, st allocreport.Stack) int {
	for j, f := range st.All() {
		if !alloctrack.IsFrameworkClass(r.Classes[f.Class]) {
			return j
		}
	}
	if st.Len() == 0 {
		return -1
	}
	return 0
}

// SiteHash returns the stable hash of allocation i's site.
func SiteHash(r *allocreport.Report, i int) uint64 {
	a := &r.Allocations[i]
	return new(reportScratch).hashTables(r).site(a, r.Stack(a))
}

// zeroed returns s with length n, all zero, reusing its array when large
// enough.
func zeroed[T any](s []T, n int) []T {
	s = slices.Grow(s[:0], n)[:n]
	clear(s)
	return s
}
