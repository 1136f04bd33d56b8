package alloctrack

import (
	"errors"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/google/pprof/profile"
)

// noStack stands for the empty stack, so that every sample has a location.
var noStack = Frame{Class: "<no stack>", Method: "<unknown>"}

// ProfileBuilder builds a pprof allocation profile: sample types
// alloc_objects/count and alloc_space/bytes, one location per distinct frame
// with a stable, unique, non-zero synthetic address (profile consumers such
// as Grafana Alloy tell stacks apart by addresses), and sample labels for the
// allocated class and, when known, the thread.
type ProfileBuilder struct {
	p       *profile.Profile
	mapping *profile.Mapping
	locs    map[Frame]*profile.Location
	addrs   map[uint64]Frame
	funcs   map[[2]string]*profile.Function
	samples map[sampleKey]*profile.Sample
	// Heapprofd builders: the estimate of each sample, rounded into its
	// values by Profile.
	est map[*profile.Sample]*Estimate
}

type sampleKey struct {
	site   uint64
	class  string
	thread int
}

// NewProfileBuilder returns an empty builder.
func NewProfileBuilder() *ProfileBuilder {
	m := &profile.Mapping{ID: 1, Start: 0x1000, Limit: ^uint64(0), File: "[java]", HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
	return &ProfileBuilder{
		p: &profile.Profile{
			SampleType: []*profile.ValueType{
				{Type: "alloc_objects", Unit: "count"},
				{Type: "alloc_space", Unit: "bytes"},
			},
			DefaultSampleType: "alloc_space",
			PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
			Period:            1,
			Mapping:           []*profile.Mapping{m},
		},
		mapping: m,
		locs:    map[Frame]*profile.Location{},
		addrs:   map[uint64]Frame{},
		funcs:   map[[2]string]*profile.Function{},
		samples: map[sampleKey]*profile.Sample{},
	}
}

// Sample types of a heapprofd profile (NewHeapprofdProfileBuilder), in
// the order of a sample's values.
const (
	SampleTypeSamples          = "samples"                 // sampled allocations: exact, what the traces held
	SampleTypeSampledSpace     = "sampled_space"           // their bytes: exact
	SampleTypeEstimatedObjects = "estimated_alloc_objects" // allocations estimated from the samples
	SampleTypeEstimatedSpace   = "estimated_alloc_space"   // bytes estimated from the samples
)

// NewHeapprofdProfileBuilder returns an empty builder for heapprofd dumps
// (sampled windows). Its samples have four values: samples/count and
// sampled_space/bytes are what the traces held, exactly;
// estimated_alloc_objects/count and estimated_alloc_space/bytes are
// estimates (see EstimateValues), rounded, and the default. The profile's
// comments say so too. Samples carry no class label: heapprofd does not
// record the allocated class.
func NewHeapprofdProfileBuilder() *ProfileBuilder {
	b := NewProfileBuilder()
	b.p.SampleType = []*profile.ValueType{
		{Type: SampleTypeSamples, Unit: "count"},
		{Type: SampleTypeSampledSpace, Unit: "bytes"},
		{Type: SampleTypeEstimatedObjects, Unit: "count"},
		{Type: SampleTypeEstimatedSpace, Unit: "bytes"},
	}
	b.p.DefaultSampleType = SampleTypeEstimatedSpace
	b.p.Comments = []string{
		"heapprofd samples of the Java heap (com.android.art): samples and sampled_space are exact counts of what the traces held",
		"estimated_alloc_objects and estimated_alloc_space are estimates: each stack's samples scaled by 1/(1-exp(-avg/interval)), avg = sampled bytes / samples",
	}
	b.est = map[*profile.Sample]*Estimate{}
	return b
}

// NewAgentProfileBuilder returns an empty builder for the sampled windows
// of agent logs of known rate: the four values of a heapprofd builder,
// samples labelled with their class, and comments that say how the
// estimates were made.
func NewAgentProfileBuilder(every uint64) *ProfileBuilder {
	b := NewHeapprofdProfileBuilder()
	b.p.Comments = []string{
		"tiallocsample agent log: samples and sampled_space are exact counts of what the log held",
		"estimated_alloc_objects and estimated_alloc_space are estimates: the samples times the agent's rate, one in " + strconv.FormatUint(every, 10) + " allocations per thread",
	}
	return b
}

// NewSamplesProfileBuilder returns an empty builder for exact windows
// whose counts are samples of an unknown rate (agent logs without a
// rate): sample types samples/count and sampled_space/bytes.
func NewSamplesProfileBuilder() *ProfileBuilder {
	b := NewProfileBuilder()
	b.p.SampleType = []*profile.ValueType{
		{Type: SampleTypeSamples, Unit: "count"},
		{Type: SampleTypeSampledSpace, Unit: "bytes"},
	}
	b.p.DefaultSampleType = SampleTypeSampledSpace
	b.p.Comments = []string{"tiallocsample agent log of unknown rate: the values are samples (one allocation in N per thread), not allocations"}
	return b
}

// Heapprofd tells whether b was made by NewHeapprofdProfileBuilder.
func (b *ProfileBuilder) Heapprofd() bool { return b.est != nil }

// Add adds a window: each site with its class and, where the window
// knows them, its threads; a sampled window's sites with their samples and
// estimates. A sampled window needs a builder from
// NewHeapprofdProfileBuilder, an exact one a builder from
// NewProfileBuilder: one profile does not mix the two.
func (b *ProfileBuilder) Add(w *Window) error {
	if (w.Sampling != nil) != b.Heapprofd() {
		return errors.New("alloctrack: a profile cannot mix sampled (heapprofd) and exact (DDM) windows")
	}
	if len(w.Sites) == 0 {
		return nil
	}
	infos := make([]*SiteInfo, len(w.Sites))
	info := func(i int) *SiteInfo {
		if infos[i] == nil {
			si := w.Info(i, 0)
			infos[i] = &si
		}
		return infos[i]
	}
	if w.Sampling != nil {
		for i := range w.Sites {
			b.AddSampledSite(info(i).Class, info(i).Frames, w.Sites[i].Count, w.Sites[i].Estimated)
		}
		return nil
	}
	if th := w.Threads(); th != nil {
		for _, t := range th {
			si := info(t.Site)
			b.AddSite(si.Class, si.Frames, t.Thread, t.Allocations, t.Bytes)
		}
		return nil
	}
	for i := range w.Sites {
		si := info(i)
		b.AddSite(si.Class, si.Frames, -1, w.Sites[i].Count.Allocations, w.Sites[i].Count.Bytes)
	}
	return nil
}

// AddSampledSite adds samples and an estimate at a sampled site of class
// ("" for heapprofd's, which do not know it; frames innermost first). b
// must come from NewHeapprofdProfileBuilder or NewAgentProfileBuilder.
func (b *ProfileBuilder) AddSampledSite(class string, frames []Frame, smp Count, est Estimate) {
	if b.est == nil {
		panic("alloctrack: AddSampledSite on a builder not made by NewHeapprofdProfileBuilder")
	}
	if smp == (Count{}) && est == (Estimate{}) {
		return
	}
	s, isNew := b.sample(frames, class, -1, 4)
	if isNew {
		b.est[s] = &Estimate{}
		if class != "" {
			s.Label = map[string][]string{"class": {class}}
		}
	}
	s.Value[0] += int64(smp.Allocations)
	s.Value[1] += int64(smp.Bytes)
	b.est[s].add(est)
}

// FrameAddress is the synthetic address of a frame before collision
// handling: a hash of function, file and line, inside the mapping.
func FrameAddress(f Frame) uint64 {
	h := xxhash.Sum64String(f.Function() + "\x00" + f.File + "\x00" + strconv.Itoa(f.Line))
	return h | 0x1000 // never zero, never below the mapping
}

func (b *ProfileBuilder) location(f Frame) *profile.Location {
	if l := b.locs[f]; l != nil {
		return l
	}
	addr := FrameAddress(f)
	for {
		other, taken := b.addrs[addr]
		if !taken || other == f {
			break
		}
		addr = (addr + 0x10) | 0x1000 // a collision: probe on, deterministically
	}
	b.addrs[addr] = f
	fk := [2]string{f.Function(), f.File}
	fn := b.funcs[fk]
	if fn == nil {
		fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: fk[0], SystemName: fk[0], Filename: f.File}
		b.funcs[fk] = fn
		b.p.Function = append(b.p.Function, fn)
	}
	line := int64(f.Line)
	if line < 0 {
		line = 0 // -1 unknown, -2 native: pprof has no such lines
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Mapping: b.mapping, Address: addr, Line: []profile.Line{{Function: fn, Line: line}}}
	b.locs[f] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

// AddSite adds count allocations of bytes at a site (frames top first).
// thread < 0 means unknown.
func (b *ProfileBuilder) AddSite(class string, frames []Frame, thread int, count, bytes uint64) {
	if count == 0 && bytes == 0 {
		return
	}
	s, isNew := b.sample(frames, class, thread, 2)
	if isNew {
		s.Label = map[string][]string{"class": {class}}
		if thread >= 0 {
			s.Label["thread"] = []string{strconv.Itoa(thread)}
		}
	}
	s.Value[0] += int64(count)
	s.Value[1] += int64(bytes)
}

// Profile returns the profile built so far, stamped with a time and a
// duration.
func (b *ProfileBuilder) Profile(start time.Time, d time.Duration) *profile.Profile {
	for s, e := range b.est {
		c := roundCount(*e)
		s.Value[2], s.Value[3] = int64(c.Allocations), int64(c.Bytes)
	}
	b.p.TimeNanos = start.UnixNano()
	b.p.DurationNanos = int64(d)
	return b.p
}

// sample returns the sample of frames (top first), class and thread,
// creating it with n zero values when there is none yet (isNew).
func (b *ProfileBuilder) sample(frames []Frame, class string, thread, n int) (s *profile.Sample, isNew bool) {
	h := uint64(0x9e3779b97f4a7c15)
	for _, f := range frames {
		h = mix(h, FrameAddress(f))
	}
	k := sampleKey{site: h, class: class, thread: thread}
	if s := b.samples[k]; s != nil {
		return s, false
	}
	if len(frames) == 0 {
		frames = []Frame{noStack}
	}
	locs := make([]*profile.Location, len(frames))
	for i, f := range frames {
		locs[i] = b.location(f)
	}
	s = &profile.Sample{Location: locs, Value: make([]int64, n)}
	b.samples[k] = s
	b.p.Sample = append(b.p.Sample, s)
	return s, true
}
