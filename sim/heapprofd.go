package sim

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/perfetto"
)

// What a simulated Android 12+ VM does for heapprofd: ART samples its own
// allocations (the com.android.art heap) once a heapprofd session has
// asked for them, picking one allocation in about every sampling-interval
// bytes with a geometric (memoryless) draw, and hands each sampled object
// to heapprofd with its true size. The session then writes, every dump
// interval, each call stack's values cumulative since the stack's id was
// created. A stack with nothing new since the previous dump may be dropped
// from later dumps and come back under a new id counting from zero, as
// heapprofd does with stacks that have nothing live.

// APIHeapprofdJava is the first API level whose ART reports Java heap
// samples to heapprofd (Android 12).
const APIHeapprofdJava = 31

// DefaultHeapprofdStartDelay is how long after a session starts before its
// first samples are taken: heapprofd enables a running process a few
// hundred milliseconds after its next allocation.
const DefaultHeapprofdStartDelay = 300 * time.Millisecond

// hpStack is one heapprofd call stack of a program: the frames heapprofd
// writes for it (innermost first), and the site the daemon keys it by.
type hpStack struct {
	frames []perfetto.Frame
	java   []alloctrack.Frame
	siteID string
	key    string // SiteKey("", Java frame names)
	size   uint32 // the size of every object allocated here; 0: sizes vary
}

// hpStacks are a program's heapprofd call stacks: stackOf maps a site to
// its stack, two sites sharing one when their frames are the same.
type hpStacks struct {
	stacks  []hpStack
	stackOf []int
}

// Native frames heapprofd shows around Java frames on the ART heap: the
// allocation entry points at the top (innermost), the thread's start at
// the bottom.
const libart = "/apex/com.android.art/lib64/libart.so"

var (
	hpObjectAlloc = []perfetto.Frame{
		{Function: "art::gc::Heap::AllocObjectWithAllocator<true, true, art::mirror::SetClassVisitor>(art::Thread*, art::ObjPtr<art::mirror::Class>, unsigned long, art::gc::AllocatorType, art::mirror::SetClassVisitor const&)", Mapping: libart, RelPC: 0x2a1f30},
		{Function: "artAllocObjectFromCodeInitializedRegionTLAB", Mapping: libart, RelPC: 0x6c3b14},
		{Function: "art_quick_alloc_object_initialized_region_tlab", Mapping: libart, RelPC: 0x222d60},
	}
	hpArrayAlloc = []perfetto.Frame{
		{Function: "art::gc::Heap::AllocObjectWithAllocator<true, true, art::mirror::SetLengthVisitor>(art::Thread*, art::ObjPtr<art::mirror::Class>, unsigned long, art::gc::AllocatorType, art::mirror::SetLengthVisitor const&)", Mapping: libart, RelPC: 0x2a2410},
		{Function: "artAllocArrayFromCodeResolvedRegionTLAB", Mapping: libart, RelPC: 0x6c2a88},
		{Function: "art_quick_alloc_array_resolved32_region_tlab", Mapping: libart, RelPC: 0x223100},
	}
	hpThreadStart = []perfetto.Frame{
		{Function: "art_quick_invoke_static_stub", Mapping: libart, RelPC: 0x218968},
		{Function: "art::ArtMethod::Invoke(art::Thread*, unsigned int*, unsigned int, art::JValue*, char const*)", Mapping: libart, RelPC: 0x27c0b4},
		{Function: "__pthread_start(void*)", Mapping: "/apex/com.android.runtime/lib64/bionic/libc.so", RelPC: 0xb6a50},
		{Function: "__start_thread", Mapping: "/apex/com.android.runtime/lib64/bionic/libc.so", RelPC: 0x53ec4},
	}
	// hpUnknown is the outermost frame of a stack the Android 12/13 ART
	// bug left unwound: no name, in JIT code.
	hpUnknown = perfetto.Frame{Mapping: "/memfd:jit-cache (deleted)", RelPC: 0x1f40}
)

// heapprofdStacks builds the program's heapprofd stacks. Java frames are
// named as heapprofd names them: the dotted class and the method; some
// compiled frames carry their return type and parameters (full debug info)
// or the [DEDUPED] marker, as devices show them. With broken set, every
// stack is what the Android 12/13 ART unwinding bug leaves: the allocation
// entry points and one unnamed frame.
func (p *program) heapprofdStacks(pkg string, broken bool) *hpStacks {
	hs := &hpStacks{stackOf: make([]int, len(p.sites))}
	byKey := map[string]int{}
	appMap := fmt.Sprintf("/data/app/~~c2ltdWxhdGVk==/%s-YXBw==/oat/arm64/base.odex", pkg)
	appDex := fmt.Sprintf("/data/app/~~c2ltdWxhdGVk==/%s-YXBw==/oat/arm64/base.vdex", pkg)
	for i := range p.sites {
		s := &p.sites[i]
		var fr []perfetto.Frame
		if s.arr {
			fr = append(fr, hpArrayAlloc...)
		} else {
			fr = append(fr, hpObjectAlloc...)
		}
		var java []alloctrack.Frame
		if broken {
			fr = append(fr, hpUnknown)
		} else {
			for j, f := range s.frames {
				cls := dotted(p.tables.RawClasses[f.Class])
				m := p.tables.Methods[f.Method]
				name := cls + "." + m
				raw := name
				mapping := "/system/framework/arm64/boot.oat"
				switch {
				case strings.HasPrefix(cls, "android.") || strings.HasPrefix(cls, "com.android."):
					mapping = "/system/framework/arm64/boot-framework.oat"
				case !alloctrack.IsFrameworkClass(cls):
					mapping = appMap
					switch (i + j) % 7 {
					case 0:
						raw = "void " + name + "(int, java.lang.String)"
					case 1:
						mapping = appDex // interpreted
					case 2:
						raw = name + " [DEDUPED]"
					}
				}
				fr = append(fr, perfetto.Frame{Function: name, RawFunction: raw, Mapping: mapping, RelPC: pcOf(mapping, name, f.Line)})
				java = append(java, alloctrack.Frame{Class: cls, Method: m, Line: -1})
			}
			fr = append(fr, hpThreadStart...)
		}
		k := stackKey(fr)
		si, ok := byKey[k]
		if !ok {
			names := make([]string, len(java))
			for j, f := range java {
				names[j] = f.Function()
			}
			si = len(hs.stacks)
			byKey[k] = si
			hs.stacks = append(hs.stacks, hpStack{
				frames: fr, java: java,
				siteID: alloctrack.SiteID(heapprofd.SiteHash(java)),
				key:    SiteKey("", names),
			})
		}
		hs.stackOf[i] = si
		st := &hs.stacks[si]
		switch {
		case s.arr:
			st.size = 0
		case !ok:
			st.size = s.size
		case st.size != s.size:
			st.size = 0
		}
	}
	return hs
}

// dotted turns a type descriptor ("Ljava/util/ArrayList;") into a Java
// class name ("java.util.ArrayList").
func dotted(desc string) string {
	s := strings.TrimSuffix(strings.TrimPrefix(desc, "L"), ";")
	return strings.ReplaceAll(s, "/", ".")
}

// pcOf is a frame's pc within its mapping: one per method and line.
func pcOf(mapping, name string, line int16) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", mapping, name, line)
	return h.Sum64()%0x400000 + 0x1000
}

func stackKey(fr []perfetto.Frame) string {
	var b strings.Builder
	for _, f := range fr {
		fmt.Fprintf(&b, "%s|%s|%x\n", f.RawFunction+f.Function, f.Mapping, f.RelPC)
	}
	return b.String()
}

// hpSampler is ART's heap sampler while one heapprofd session profiles the
// VM, with what that session's dumps have said so far.
type hpSampler struct {
	owner    *perfettoProc
	interval uint64
	onAt     time.Time // sampling starts here (the start-up delay)
	on       bool
	until    uint64 // bytes before the next sample point
	rng      *rand.Rand
	// last is the newest sample's time: heapprofd's committed timestamp,
	// the end of its next dump's window.
	last time.Time

	cum    []perfetto.Values // per stack, since its id was created
	fresh  []bool            // the stack was sampled since the last dump
	listed []bool            // the stack has an id (was in a dump, not dropped)
	alloc  []alloctrack.Count
	smp    []alloctrack.Count // per site since the last dump
	dumps  int
}

// draw is the distance in bytes to the next sample point: exponential
// with mean interval, at least one byte.
func (h *hpSampler) draw() uint64 {
	return uint64(math.Ceil(h.rng.ExpFloat64() * float64(h.interval)))
}

// take tells whether an allocation of size bytes is sampled: whether a
// sample point falls inside it. One allocation is one sample however many
// points it spans; the process of points goes on past it. Interval 1
// samples every allocation, as ART does.
func (h *hpSampler) take(size uint32) bool {
	if h.interval <= 1 {
		return true
	}
	s := uint64(size)
	if s < h.until {
		h.until -= s
		return false
	}
	rest := s - h.until
	h.until = max(h.draw(), 1)
	for rest >= h.until {
		rest -= h.until
		h.until = max(h.draw(), 1)
	}
	h.until -= rest
	return true
}

// sampleLocked runs one allocation of site si, made at time at, through
// the sampler.
func (vm *VM) sampleLocked(si uint32, size uint32, at time.Time) {
	h := vm.hp
	h.alloc[si].Allocations++
	h.alloc[si].Bytes += uint64(size)
	if !h.take(size) {
		return
	}
	h.smp[si].Allocations++
	h.smp[si].Bytes += uint64(size)
	h.last = at
	st := vm.hps.stackOf[si]
	h.cum[st].Count++
	h.cum[st].Allocated += uint64(size)
	h.fresh[st] = true
}

// HeapprofdTruth is the ground truth of a VM's heapprofd sampling, over
// its life, up to the newest dump written: every allocation made while
// sampling was on, and the samples the dumps held. Classes are the
// allocated classes (which heapprofd data does not hold); sites and site
// ids are heapprofd sites (Java frames only), as the daemon keys them.
type HeapprofdTruth struct {
	Allocated Counts
	Sampled   Counts
	Dumps     int
	// Dropped counts stacks dropped from a dump for having nothing new;
	// their next samples came under a new callstack id.
	Dropped int
	// Interval is the sampling interval of the newest session.
	Interval uint64
	// SiteSize gives, per site id, the size of every object allocated
	// there, or 0 where sizes vary (arrays).
	SiteSize map[string]uint32
}

// HeapprofdPending tells whether the VM holds samples that its next dump
// will write: none once a dump has taken them, or once its session is
// gone (with it, what it had not dumped). A test that has paused the
// workload waits for this to be false before it compares totals.
func (vm *VM) HeapprofdPending() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.alive {
		vm.advanceLocked(time.Now())
	}
	if vm.hp == nil {
		return false
	}
	for _, c := range vm.hp.smp {
		if c.Allocations > 0 {
			return true
		}
	}
	return false
}

// HeapprofdAllocated is what the VM allocated while heapprofd sampled it,
// up to now, whether a dump took it yet or not (HeapprofdTruth counts up
// to the newest dump): read between two spans of allocations, it gives
// each span's truth.
func (vm *VM) HeapprofdAllocated() alloctrack.Count {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.alive {
		vm.advanceLocked(time.Now())
	}
	var c alloctrack.Count
	for i := range vm.hpAlloc {
		c = c.Plus(vm.hpAlloc[i])
		if vm.hp != nil {
			c = c.Plus(vm.hp.alloc[i])
		}
	}
	return c
}

// HeapprofdTruth returns the VM's heapprofd ground truth.
func (vm *VM) HeapprofdTruth() HeapprofdTruth {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return HeapprofdTruth{
		Allocated: vm.heapprofdCounts(vm.hpAlloc),
		Sampled:   vm.heapprofdCounts(vm.hpSampled),
		Dumps:     vm.hpDumps,
		Dropped:   vm.hpDropped,
		Interval:  vm.hpInterval,
		SiteSize:  vm.hpSiteSizes(),
	}
}

func (vm *VM) hpSiteSizes() map[string]uint32 {
	m := map[string]uint32{}
	if vm.hps == nil {
		return m
	}
	for _, st := range vm.hps.stacks {
		if sz, ok := m[st.siteID]; ok && sz != st.size {
			m[st.siteID] = 0 // one site, stacks of other sizes
			continue
		}
		m[st.siteID] = st.size
	}
	return m
}

func (vm *VM) heapprofdCounts(sites []alloctrack.Count) Counts {
	c := newCounts()
	for i, n := range sites {
		if n.Allocations == 0 {
			continue
		}
		st := &vm.hps.stacks[vm.hps.stackOf[i]]
		addCount(c.ByClass, vm.prog.tables.Classes[vm.prog.sites[i].class], n)
		addCount(c.BySite, st.key, n)
		addCount(c.BySiteID, st.siteID, n)
		c.Total.Allocations += n.Allocations
		c.Total.Bytes += n.Bytes
	}
	return c
}

// hpAttach is how a VM answered a session that asked to profile it.
type hpAttach int

const (
	hpAttached   hpAttach = iota
	hpRejected            // another session profiles it
	hpIneligible          // neither debuggable nor profileable, or no ART heap
)

// attachHeapprofd makes the session p the VM's profiler, if it may be.
func (vm *VM) attachHeapprofd(p *perfettoProc, interval uint64, delay time.Duration, now time.Time) hpAttach {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	switch {
	case !vm.alive || vm.cfg.API < APIHeapprofdJava || (vm.cfg.NotDebuggable && !vm.cfg.Profileable):
		return hpIneligible
	case vm.faults.ForeignProfiler || (vm.hp != nil && vm.hp.owner != p):
		return hpRejected
	case vm.hp != nil:
		return hpAttached
	}
	vm.advanceLocked(now)
	if interval == 0 {
		interval = 1
	}
	n, ns := len(vm.prog.sites), len(vm.hps.stacks)
	vm.hp = &hpSampler{
		owner: p, interval: interval, onAt: now.Add(delay),
		rng: rand.New(rand.NewPCG(vm.prog.w.Seed^0x68656170, uint64(vm.cfg.PID)<<20|uint64(vm.hpSessions))),
		cum: make([]perfetto.Values, ns), fresh: make([]bool, ns), listed: make([]bool, ns),
		alloc: make([]alloctrack.Count, n), smp: make([]alloctrack.Count, n),
	}
	vm.hp.until = vm.hp.draw()
	vm.hpSessions++
	vm.hpInterval = interval
	return hpAttached
}

// detachHeapprofd ends p's profile of the VM: samples not dumped are lost.
func (vm *VM) detachHeapprofd(p *perfettoProc) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.hp != nil && vm.hp.owner == p {
		vm.advanceLocked(time.Now())
		vm.hp = nil
	}
}

// hpDump is one process's part of a dump round.
type hpDump struct {
	spec    perfetto.DumpSpec
	retire  [][]perfetto.Frame
	ended   bool // the profile ended with this dump
	present bool // the process is in this round
}

// heapprofdDump takes the VM's dump for session p: every stack sampled
// since the last dump with its cumulative values, and the stacks with
// nothing new either kept as they were or dropped (to come back under a
// new id). Faults turn it into a rejection, an overrun or a guardrail; a
// dead VM's dump says disconnected and ends its profile.
func (vm *VM) heapprofdDump(p *perfettoProc, now time.Time) hpDump {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	d := hpDump{present: true}
	d.spec.PID = uint64(vm.cfg.PID)
	d.spec.Heap = perfetto.ArtHeap
	// A foreign profiler (ForeignProfiler) that came after p took the VM
	// keeps nothing from p: heapprofd rejects a process only at a data
	// source's setup or the process's connection, and says so only when
	// the rejected data source stops (fact 14).
	if vm.hp == nil || vm.hp.owner != p {
		return hpDump{} // not profiled by p
	}
	h := vm.hp
	if vm.alive {
		vm.advanceLocked(now)
	}
	d.spec.SamplingInterval = h.interval
	d.spec.OrigSamplingInterval = h.interval
	// The window ends at the newest sample heapprofd committed, in
	// CLOCK_MONOTONIC_COARSE (heapprofd_producer.cc DumpProcessState).
	last := h.last
	if last.IsZero() {
		last = h.onAt
	}
	d.spec.Timestamp = p.d.monoCoarse(last)
	h.dumps++
	for st := range h.cum {
		switch {
		case h.fresh[st]:
			h.fresh[st], h.listed[st] = false, true
		case !h.listed[st]:
			continue
		case (st+h.dumps)%2 == 0:
			// Nothing new and nothing live: heapprofd drops the stack;
			// its next sample starts from zero under a new id.
			h.listed[st] = false
			h.cum[st] = perfetto.Values{}
			d.retire = append(d.retire, vm.hps.stacks[st].frames)
			vm.hpDropped++
			continue
		}
		d.spec.Samples = append(d.spec.Samples, perfetto.SampleSpec{Frames: vm.hps.stacks[st].frames, Values: h.cum[st]})
	}
	for i := range h.alloc {
		vm.hpAlloc[i].Allocations += h.alloc[i].Allocations
		vm.hpAlloc[i].Bytes += h.alloc[i].Bytes
		vm.hpSampled[i].Allocations += h.smp[i].Allocations
		vm.hpSampled[i].Bytes += h.smp[i].Bytes
	}
	clear(h.alloc)
	clear(h.smp)
	var samples uint64
	for _, s := range d.spec.Samples {
		samples += s.Values.Count
	}
	if len(d.spec.Samples) > 0 {
		// Only a process with a sample has a ProcessHeapSamples in the
		// trace: a dump of one without is not written.
		vm.hpDumps++
	}
	d.spec.ProcessStats = perfetto.ProcessStats{HeapSamples: samples}
	switch {
	case len(d.spec.Samples) == 0 && vm.alive:
		// Faults are taken once samples flow, so that they show.
	case take(&vm.faults.HeapprofdOverrun):
		d.spec.BufferOverran = true
		d.ended = true
	case take(&vm.faults.HeapprofdGuardrail):
		d.spec.HitGuardrail = true
		d.ended = true
	case !vm.alive:
		d.spec.Disconnected = true
		d.ended = true
	}
	if d.ended {
		vm.hp = nil
	}
	return d
}
