// The seam between the backends and everything that counts: a window of
// per-site deltas, the same whatever produced it. A backend turns what it
// reads (a DDM report, a heapprofd dump, a file of either) into a Window;
// Counters, Tally, ProfileBuilder and CaptureWriter each take it with one
// Add.

package alloctrack

import (
	"math"
	"time"
)

// Window is what one app allocated from Start to End, summed per class
// and per site.
type Window struct {
	Start, End time.Time
	// Sampling is set for a window of sampled allocations (heapprofd, or
	// an agent log of known rate): Total and the sites' Count are then
	// the samples, exactly, and Estimated the allocations estimated from
	// them. Nil for exact counts (DDM).
	Sampling *Sampling
	Total    Count
	// Estimated is the allocations estimated from the samples (sampled
	// windows only).
	Estimated Estimate
	// Classes are the allocations per class: counted (exact windows) or
	// estimated (sampled windows of a backend that knows the class, an
	// agent log; heapprofd does not). Counters.Add sorts them.
	Classes []ClassDelta
	// Sites are the distinct sites, each once.
	Sites []SiteDelta
	// Source names the sites on demand; nil for a window without sites.
	Source WindowSource
}

// Sampling describes the samples of a sampled window.
type Sampling struct {
	Interval uint64 // heapprofd: mean bytes between samples
	// Every is an agent log's rate: one allocation in Every, per thread,
	// was logged (0 for heapprofd).
	Every uint64
	// Samples on broken stacks, by kind (see perfetto.Dump.Broken).
	ErrorStackSamples, UnknownStackSamples uint64
}

// ClassDelta is one class's share of a window.
type ClassDelta struct {
	Class string
	Count
}

// SiteDelta is one site's share of a window.
type SiteDelta struct {
	Hash uint64 // SiteHashNames of the site's class and frames
	// Count is the site's allocations (exact windows) or samples (sampled
	// windows); Estimated the allocations estimated from the samples.
	Count     Count
	Estimated Estimate
}

// ThreadDelta is the share of one thread in one site of a window.
type ThreadDelta struct {
	Site   int // index into Window.Sites
	Thread int
	Count
}

// WindowSource is what a backend keeps behind a window's sites.
type WindowSource interface {
	// SiteInfo returns the labels of Sites[i], its stack label capped
	// at stackMax bytes (0: no stack label). Consumers call it only for
	// the sites they keep, so that the others cost no names.
	SiteInfo(i, stackMax int) SiteInfo
	// Threads splits the sites by allocating thread, in order of first
	// allocation; nil when the backend does not know threads.
	Threads() []ThreadDelta
	// Release gives back what the window holds; neither the window nor
	// its slices are used after.
	Release()
}

// Release gives back what w holds, once every consumer has added it.
func (w *Window) Release() {
	if w.Source != nil {
		w.Source.Release()
	}
}

// Info returns the labels of site i (see WindowSource.SiteInfo).
func (w *Window) Info(i, stackMax int) SiteInfo { return w.Source.SiteInfo(i, stackMax) }

// Threads returns the sites split by thread, or nil (see
// WindowSource.Threads).
func (w *Window) Threads() []ThreadDelta {
	if w.Source == nil {
		return nil
	}
	return w.Source.Threads()
}

// weight is a site's weight for admission to a series of its own: its
// allocations, counted or estimated (at least 1 for a site with samples).
func (w *Window) weight(s *SiteDelta) uint64 {
	if w.Sampling == nil {
		return s.Count.Allocations
	}
	n := uint64(math.Round(s.Estimated.Allocations))
	if n == 0 && s.Count.Allocations > 0 {
		n = 1
	}
	return n
}
