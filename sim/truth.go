package sim

import (
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// Counts are exact allocation counts per class (dotted name) and per site
// (SiteKey, with stacks cut to the VM's depth), and per site id (the
// alloctrack.SiteID the daemon labels that site with).
type Counts struct {
	Total    alloctrack.Count
	ByClass  map[string]alloctrack.Count
	BySite   map[string]alloctrack.Count
	BySiteID map[string]alloctrack.Count
}

// Truth is what a VM knows of one tracking window.
type Truth struct {
	// Allocated counts every allocation made while tracking was on.
	Allocated Counts
	// Reported counts the records of the last whole report the VM sent
	// during the window. It falls short of Allocated when the report
	// overflowed or allocations came after it.
	Reported Counts
}

type truthAcc struct {
	sites []alloctrack.Count
}

func newTruthAcc(n int) *truthAcc { return &truthAcc{sites: make([]alloctrack.Count, n)} }

func (t *truthAcc) add(site uint32, size uint32) {
	c := &t.sites[site]
	c.Allocations++
	c.Bytes += uint64(size)
}

func (t *truthAcc) reset() { clear(t.sites) }

// total sums every site.
func (t *truthAcc) total() alloctrack.Count {
	var c alloctrack.Count
	for _, s := range t.sites {
		c.Allocations += s.Allocations
		c.Bytes += s.Bytes
	}
	return c
}

func (t *truthAcc) addAll(o *truthAcc) {
	for i, c := range o.sites {
		t.sites[i].Allocations += c.Allocations
		t.sites[i].Bytes += c.Bytes
	}
}

func (t *truthAcc) snapshot(p *program, depth int) Counts { return p.counts(t.sites, depth) }

// counts turns per-site counts into named Counts, stacks cut to depth
// (0: no cut).
func (p *program) counts(sites []alloctrack.Count, depth int) Counts {
	c := newCounts()
	for i, n := range sites {
		if n.Allocations == 0 {
			continue
		}
		s := &p.sites[i]
		cls := p.tables.Classes[s.class]
		addCount(c.ByClass, cls, n)
		fr := s.frames
		if depth > 0 && len(fr) > depth {
			fr = fr[:depth]
		}
		names := make([]string, len(fr))
		fn := make([]alloctrack.Frame, len(fr))
		for j, f := range fr {
			names[j] = p.tables.FrameString(f)
			fn[j] = alloctrack.Frame{Class: p.tables.Classes[f.Class], Method: p.tables.Methods[f.Method], File: p.tables.Files[f.File], Line: int(f.Line)}
		}
		addCount(c.BySite, SiteKey(cls, names), n)
		addCount(c.BySiteID, alloctrack.SiteID(alloctrack.SiteHashNames(cls, fn)), n)
		c.Total.Allocations += n.Allocations
		c.Total.Bytes += n.Bytes
	}
	return c
}

func newCounts() Counts {
	return Counts{ByClass: map[string]alloctrack.Count{}, BySite: map[string]alloctrack.Count{}, BySiteID: map[string]alloctrack.Count{}}
}

func addCount(m map[string]alloctrack.Count, k string, n alloctrack.Count) {
	v := m[k]
	v.Allocations += n.Allocations
	v.Bytes += n.Bytes
	m[k] = v
}

// Windows returns the ground truth of every tracking window that has ended
// (the newest 4,096).
func (vm *VM) Windows() []Truth {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return append([]Truth(nil), vm.windows...)
}

// CurrentWindow returns the ground truth of the window now open (empty if
// tracking is off).
func (vm *VM) CurrentWindow() Truth {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.advanceLocked(time.Now())
	return Truth{Allocated: vm.truth.snapshot(vm.prog, vm.cfg.Depth), Reported: vm.reported.snapshot(vm.prog, vm.cfg.Depth)}
}

// TotalTracked counts every allocation made while tracking was on, over
// the VM's life.
func (vm *VM) TotalTracked() Counts {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.advanceLocked(time.Now())
	return vm.total.snapshot(vm.prog, vm.cfg.Depth)
}

// TotalReported counts the records of every whole report the VM sent: the
// last report of each window, over the VM's life. A client that counted
// every report it was sent has exactly these counts. TotalTracked minus
// TotalReported is what was lost: overflowed windows, and allocations made
// between a window's last REAL and the REAE 0 that ended it.
func (vm *VM) TotalReported() Counts {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	acc := newTruthAcc(len(vm.prog.sites))
	acc.addAll(vm.closedReported)
	acc.addAll(vm.reported)
	return acc.snapshot(vm.prog, vm.cfg.Depth)
}
