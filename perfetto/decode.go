package perfetto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// DefaultMaxPendingSamples bounds the samples a Decoder buffers for one
// sequence while a dump is still `continued`.
const DefaultMaxPendingSamples = 1 << 22

// ErrTooManyPendingSamples means a dump kept going (continued = true) past
// Options.MaxPendingSamples samples.
var ErrTooManyPendingSamples = errors.New("perfetto: too many samples buffered in an unfinished dump")

// Options tune a Decoder. The zero value gives the defaults.
type Options struct {
	// MaxPacketSize is the largest TracePacket accepted, in bytes
	// (default DefaultMaxPacketSize).
	MaxPacketSize int
	// MaxPendingSamples is the most samples buffered per sequence before
	// the dump that holds them ends (default DefaultMaxPendingSamples).
	MaxPendingSamples int
	// MaxStackDepth is the most frames a call stack may have (default
	// DefaultMaxStackDepth); a deeper one is an error.
	MaxStackDepth int
	// Follow reads a trace that is still being written: when the stream
	// ends inside a packet, Next returns io.EOF and keeps the bytes read,
	// and the next call continues the packet with what the reader has
	// then. Without Follow that is an error wrapping io.ErrUnexpectedEOF.
	Follow bool
	// MaxSequences is the most packet sequences with interning or profile
	// state the decoder tracks (default DefaultMaxSequences); one more is
	// an error.
	MaxSequences int
}

// DefaultMaxSequences is far more than the writers of one trace: heapprofd
// uses one sequence per data source.
const DefaultMaxSequences = 4096

// DefaultMaxStackDepth is the default Options.MaxStackDepth: deeper than
// the Java stacks of ordinary apps, small enough that a stack costs at most
// some tens of kilobytes.
const DefaultMaxStackDepth = 2048

// Values are allocation totals of a call stack.
type Values struct {
	Allocated uint64 // bytes (self_allocated; for the ART heap, the sizes of the sampled objects)
	Count     uint64 // allocations (alloc_count; for the ART heap, sampled objects)
	Freed     uint64 // bytes freed; always 0 for the ART heap, whose frees are not real
	FreeCount uint64 // frees; always 0 for the ART heap
}

func (v Values) add(w Values) Values {
	return Values{v.Allocated + w.Allocated, v.Count + w.Count, v.Freed + w.Freed, v.FreeCount + w.FreeCount}
}

// IsZero reports whether all of v is zero.
func (v Values) IsZero() bool { return v == Values{} }

// StackDelta is one call stack of a dump.
type StackDelta struct {
	Stack *Stack
	// Delta is what the stack gained since the previous dump of the same
	// process and heap.
	Delta Values
	// Total is the stack's running total over every dump of the process
	// and heap so far, Delta included. It keeps growing when heapprofd
	// drops the stack from a dump and later reports it under a new
	// callstack id starting from zero.
	Total Values
}

// ProcessStats are heapprofd's own counters for a process, as sent.
type ProcessStats struct {
	UnwindingErrors         uint64
	HeapSamples             uint64
	MapReparses             uint64
	TotalUnwindingTimeUS    uint64
	ClientSpinlockBlockedUS uint64
}

// Dump is one heapprofd dump of one process and heap: the samples of one
// ProcessHeapSamples (repeated across the `continued` packets that carry
// it), turned from cumulative values into per-stack deltas.
type Dump struct {
	Sequence uint32 // trusted_packet_sequence_id
	Packet   int    // index in the trace of the packet that ended the dump
	// PacketTimestamp is the TracePacket timestamp (BOOTTIME ns) of the
	// first packet that carried the dump.
	PacketTimestamp uint64

	PID  uint64
	Heap string // heap_name; "" for producers older than named heaps

	// Window of the dump, CLOCK_MONOTONIC_COARSE ns. StartTimestamp is 0
	// when the producer does not write it (all but very recent ones).
	Timestamp, StartTimestamp uint64
	// The window in BOOTTIME ns (the trace's own clock), converted with
	// the trace's clock snapshots as perfetto's trace processor does: by
	// the latest snapshot taken at or before the time, else the first.
	// HasBootTime is false when no snapshot relates the two clocks.
	BootTimestamp, BootStartTimestamp uint64
	HasBootTime                       bool
	// The window in REALTIME ns since the Unix epoch (the device's wall
	// clock, the clock of logcat's stamps), converted the same way with the
	// snapshots that hold REALTIME; RealPacketTimestamp is PacketTimestamp
	// in REALTIME. HasRealTime is false when no snapshot relates REALTIME
	// to MONOTONIC_COARSE (the window) and BOOTTIME (the packet).
	RealTimestamp, RealStartTimestamp, RealPacketTimestamp uint64
	HasRealTime                                            bool

	SamplingInterval     uint64 // sampling_interval_bytes
	OrigSamplingInterval uint64 // orig_sampling_interval_bytes (before adaptive sampling)

	FromStartup        bool
	RejectedConcurrent bool // another session profiles this process; the dump is empty
	Disconnected       bool
	BufferOverran      bool
	BufferCorrupted    bool
	HitGuardrail       bool
	ClientError        uint64
	ProcessStats       ProcessStats

	// Stacks that appear in this dump, in order of first appearance. A
	// stack heapprofd left out of the dump gained nothing and is not
	// listed.
	Stacks []StackDelta
	// Delta is the sum of the Stacks' deltas.
	Delta Values
	// Broken is the part of Delta on stacks that were not unwound
	// (Unwind != UnwindOK), and BrokenStacks their number: the Android
	// 12/13 ART unwinding bug shows up here.
	Broken       Values
	BrokenStacks int
	// Unresolved counts samples whose callstack id was never defined on
	// the sequence (lost interned data) or names an empty call stack;
	// they are left out of Stacks.
	Unresolved int
	// Resets counts samples whose cumulative values went down under a
	// callstack id already seen: heapprofd erased the id's entry and made
	// it again from zero (its callstack trie is shared by every process it
	// profiles, so a node can outlive one process's entry). Such a sample
	// starts a new generation: its whole value is its delta. perfetto's
	// trace processor skips these instead, and so undercounts.
	Resets int
}

// Stats count what a Decoder has seen so far.
type Stats struct {
	Packets        int   // trace packets read
	Bytes          int64 // bytes consumed
	ProfilePackets int
	Dumps          int // dumps returned by Next

	// MissingProfilePackets counts gaps in a sequence's ProfilePacket
	// index: packets lost between the device and us.
	MissingProfilePackets int
	// SkippedPackets counts packets that needed the incremental state of
	// a sequence whose state was not valid (after data loss, before the
	// next clear); SkippedInternedData counts interned_data ignored for
	// the same reason.
	SkippedPackets      int
	SkippedInternedData int
	// AbandonedDumps counts dumps whose samples were buffered but never
	// ended (the sequence's state was cleared first).
	AbandonedDumps int

	UnresolvedSamples int
	ResetSamples      int // see Dump.Resets

	// Broken stacks (see Dump.Broken): samples and bytes on stacks with
	// heapprofd's ERROR frame (UnwindError), and on stacks whose outermost
	// frame has no name (UnwindUnknown).
	ErrorStackSamples, ErrorStackBytes     uint64
	UnknownStackSamples, UnknownStackBytes uint64

	// Dumps carrying each status flag.
	RejectedConcurrent, Disconnected, BufferOverran, BufferCorrupted, HitGuardrail, ClientError int
}

// Profile is the running per-stack totals of one process and heap.
type Profile struct {
	PID    uint64
	Heap   string
	Dumps  int
	Stacks []StackTotal // in order of first appearance
	Total  Values
}

// StackTotal is a stack's running total.
type StackTotal struct {
	Stack *Stack
	Values
}

// Decoder reads a perfetto trace packet by packet and returns heapprofd
// dumps as per-stack deltas. It is not safe for concurrent use.
type Decoder struct {
	pr   *packetReader
	opts Options
	err  error

	seqs      map[uint32]*sequence
	stacks    map[string]*Stack
	frameKeys map[string]uint32 // frame key -> small id, for compact stack keys
	pos       map[*Stack]int    // scratch for commit
	profiles  map[profileKey]*profile
	queue     []*Dump
	stats     Stats
	clocks    []clockSnap // the clock snapshots that relate two clocks we use
}

// NewDecoder returns a Decoder reading from r. opts may be nil.
func NewDecoder(r io.Reader, opts *Options) *Decoder {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxPacketSize <= 0 {
		o.MaxPacketSize = DefaultMaxPacketSize
	}
	if o.MaxPendingSamples <= 0 {
		o.MaxPendingSamples = DefaultMaxPendingSamples
	}
	if o.MaxStackDepth <= 0 {
		o.MaxStackDepth = DefaultMaxStackDepth
	}
	if o.MaxSequences <= 0 {
		o.MaxSequences = DefaultMaxSequences
	}
	return &Decoder{
		pr:        newPacketReader(r, o.MaxPacketSize, o.Follow),
		opts:      o,
		seqs:      map[uint32]*sequence{},
		stacks:    map[string]*Stack{},
		frameKeys: map[string]uint32{},
		pos:       map[*Stack]int{},
		profiles:  map[profileKey]*profile{},
	}
}

// Next returns the next completed dump. It returns io.EOF when the stream
// ends between packets (with Options.Follow, also inside one); a Decoder
// whose reader can produce more bytes later (a growing file) may be called
// again after io.EOF. Any other error
// is final and is returned by every later call; what was decoded before it
// stays available through Profiles and Stats.
func (d *Decoder) Next() (*Dump, error) {
	for len(d.queue) == 0 {
		if d.err != nil {
			return nil, d.err
		}
		pkt, start, err := d.pr.next()
		d.stats.Bytes = d.pr.off
		if err != nil {
			if err != io.EOF {
				d.err = err
			}
			return nil, err
		}
		d.stats.Packets++
		// The payload ends where the reader stands.
		if le := d.packet(pkt, d.pr.off-int64(len(pkt)), d.pr.n-1); le != nil {
			d.err = &FormatError{Packet: d.pr.n - 1, PacketOffset: start, Offset: le.off, Field: le.field, Err: le.err}
			return nil, d.err
		}
	}
	dump := d.queue[0]
	d.queue[0] = nil
	d.queue = d.queue[1:]
	d.stats.Dumps++
	return dump, nil
}

// Pending is the number of bytes of a packet cut short that a Decoder with
// Options.Follow holds until the rest arrives.
func (d *Decoder) Pending() int { return d.pr.pending() }

// Stats returns counts of what was decoded so far.
func (d *Decoder) Stats() Stats { return d.stats }

// Profiles returns the running totals of every process and heap seen so
// far, ordered by pid and heap name.
func (d *Decoder) Profiles() []Profile {
	out := make([]Profile, 0, len(d.profiles))
	for _, p := range d.profiles {
		q := Profile{PID: p.key.pid, Heap: p.key.heap, Dumps: p.dumps, Stacks: make([]StackTotal, 0, len(p.order))}
		for _, s := range p.order {
			v := p.totals[s]
			q.Stacks = append(q.Stacks, StackTotal{Stack: s, Values: v})
			q.Total = q.Total.add(v)
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PID != out[j].PID {
			return out[i].PID < out[j].PID
		}
		return out[i].Heap < out[j].Heap
	})
	return out
}

// The clocks a dump's times are converted between, as indexes of
// clockSnap.t.
const (
	kMono = iota // MONOTONIC_COARSE: the dump's window
	kBoot        // BOOTTIME: packet timestamps
	kReal        // REALTIME: the device's wall clock
)

// maxClockSnaps bounds the snapshots kept: the first (for times before
// any other) and the newest (a dump is converted with the latest one at or
// before its time, and dumps come in time order). The tracing service
// takes one every 10 s at most.
const maxClockSnaps = 64

// clockSnap is one clock snapshot's reading of the clocks we use; have
// has bit 1<<k set for each clock k it holds.
type clockSnap struct {
	t    [3]uint64
	have uint8
}

// convert converts time x of clock src to clock dst as perfetto's trace
// processor does: with the latest snapshot holding both clocks whose src
// reading is at or before x, else the first such snapshot.
func (d *Decoder) convert(x uint64, src, dst int) (uint64, bool) {
	need := uint8(1<<src | 1<<dst)
	var first, c *clockSnap
	for i := range d.clocks {
		p := &d.clocks[i]
		if p.have&need != need {
			continue
		}
		if first == nil {
			first = p
		}
		if p.t[src] <= x && (c == nil || p.t[src] >= c.t[src]) {
			c = p
		}
	}
	if c == nil {
		c = first
	}
	if c == nil {
		return 0, false
	}
	return x - c.t[src] + c.t[dst], true
}

// clockSnapshot records a snapshot holding two or more of the clocks we
// use.
func (d *Decoder) clockSnapshot(m *msg) {
	var f field
	var snap clockSnap
	for m.next(&f) {
		if f.num != fSnapshotClocks || !m.want(&f, "clocks", protowire.BytesType) {
			continue
		}
		cm := m.sub(&f, "clocks")
		var g field
		var id, ts uint64
		for cm.next(&g) {
			switch g.num {
			case fClockID:
				id = cm.uint(&g, "clock_id")
			case fClockTimestamp:
				ts = cm.uint(&g, "timestamp")
			}
		}
		m.inherit(&cm)
		k := -1
		switch id {
		case ClockMonotonicCoarse:
			k = kMono
		case ClockBoottime:
			k = kBoot
		case ClockRealtime:
			k = kReal
		}
		if k >= 0 {
			snap.t[k], snap.have = ts, snap.have|1<<k
		}
	}
	if m.err != nil || bits.OnesCount8(snap.have) < 2 {
		return
	}
	if len(d.clocks) == maxClockSnaps {
		copy(d.clocks[1:], d.clocks[2:])
		d.clocks = d.clocks[:maxClockSnaps-1]
	}
	d.clocks = append(d.clocks, snap)
}

// dumpTimes sets a dump's window in BOOTTIME and REALTIME.
func (d *Decoder) dumpTimes(dump *Dump) {
	if bt, ok := d.convert(dump.Timestamp, kMono, kBoot); ok {
		dump.BootTimestamp, dump.HasBootTime = bt, true
		if dump.StartTimestamp != 0 {
			dump.BootStartTimestamp, _ = d.convert(dump.StartTimestamp, kMono, kBoot)
		}
	}
	rt, ok := d.convert(dump.Timestamp, kMono, kReal)
	pt, pok := d.convert(dump.PacketTimestamp, kBoot, kReal)
	if !ok || !pok {
		return
	}
	dump.RealTimestamp, dump.RealPacketTimestamp, dump.HasRealTime = rt, pt, true
	if dump.StartTimestamp != 0 {
		dump.RealStartTimestamp, _ = d.convert(dump.StartTimestamp, kMono, kReal)
	}
}

type profileKey struct {
	pid  uint64
	heap string
}

type profile struct {
	key    profileKey
	dumps  int
	totals map[*Stack]Values
	order  []*Stack
}

// rawFrame, rawMapping: interned entries as sent, resolved on use.
type rawFrame struct{ name, mapping, relPC uint64 }

type rawMapping struct {
	buildID uint64
	paths   []uint64
}

// tables is one family of interning tables: either a sequence's
// InternedData or a ProfilePacket's own (Android 10), where one string
// table serves names, paths and build ids alike.
type tables struct {
	names, paths, buildIDs map[uint64]string // the same map three times for in-packet tables
	frames                 map[uint64]rawFrame
	mappings               map[uint64]rawMapping
	callstacks             map[uint64][]uint64
	cache                  map[uint64]*Stack        // resolved callstacks
	frameCache             map[uint64]resolvedFrame // resolved frames
	pathCache              map[uint64]string        // mapping id -> path
}

type resolvedFrame struct {
	f   *Frame
	key uint32
}

func newTables(shared bool) *tables {
	t := &tables{
		names:      map[uint64]string{},
		frames:     map[uint64]rawFrame{},
		mappings:   map[uint64]rawMapping{},
		callstacks: map[uint64][]uint64{},
		cache:      map[uint64]*Stack{},
		frameCache: map[uint64]resolvedFrame{},
		pathCache:  map[uint64]string{},
	}
	if shared {
		t.paths, t.buildIDs = t.names, t.names
	} else {
		t.paths, t.buildIDs = map[uint64]string{}, map[uint64]string{}
	}
	return t
}

func (t *tables) empty() bool {
	return len(t.names) == 0 && len(t.paths) == 0 && len(t.frames) == 0 && len(t.mappings) == 0 && len(t.callstacks) == 0
}

// put stores an interned entry. An id defined again drops what was
// resolved with its old meaning.
func put[V any](t *tables, m map[uint64]V, iid uint64, v V) {
	if _, ok := m[iid]; ok {
		t.redefined()
	}
	m[iid] = v
}

// redefined drops resolved stacks when an existing id gets a new meaning.
func (t *tables) redefined() {
	clear(t.cache)
	clear(t.frameCache)
	clear(t.pathCache)
}

type idKey struct {
	pid  uint64
	heap string
	id   uint64
}

type idState struct {
	stack *Stack
	last  Values
}

type pendingSample struct {
	id     uint64
	v      Values
	hasMax bool
	max    uint64
	maxCnt uint64
}

type pendingGroup struct {
	d       *Dump
	samples []pendingSample
}

type groupKey struct {
	pid  uint64
	heap string
	ts   uint64
}

// sequence is the state perfetto keeps per trusted_packet_sequence_id.
type sequence struct {
	id        uint32
	valid     bool // incremental state valid: cleared since the last loss
	interned  *tables
	inPacket  *tables
	ids       map[idKey]*idState
	groups    []*pendingGroup
	groupIdx  map[groupKey]*pendingGroup
	pending   int
	hasIndex  bool
	lastIndex uint64
}

func newSequence(id uint32) *sequence {
	return &sequence{
		id:       id,
		interned: newTables(false),
		inPacket: newTables(true),
		ids:      map[idKey]*idState{},
		groupIdx: map[groupKey]*pendingGroup{},
	}
}

// clearState starts a new generation of a sequence's incremental state, as
// perfetto's trace processor does on SEQ_INCREMENTAL_STATE_CLEARED: interned
// data, callstack-id baselines and any unfinished dump are dropped. Totals
// per stack are kept: they are keyed by frames, not ids.
func (d *Decoder) clearState(s *sequence) {
	if len(s.groups) > 0 {
		d.stats.AbandonedDumps += len(s.groups)
	}
	ns := newSequence(s.id)
	ns.valid = true
	ns.hasIndex, ns.lastIndex = s.hasIndex, s.lastIndex
	*s = *ns
}

// packet decodes one TracePacket whose payload starts at stream offset
// base.
func (d *Decoder) packet(b []byte, base int64, index int) *locErr {
	m := newMsg(b, base)
	var (
		f                     field
		seqID                 uint32
		seqOff                = base
		hasSeq                bool
		flags                 uint64
		cleared, dropped      bool
		ts                    uint64
		interned, profilePkts []field
	)
	for m.next(&f) {
		switch f.num {
		case fPacketClockSnapshot:
			if m.want(&f, "clock_snapshot", protowire.BytesType) {
				cs := m.sub(&f, "clock_snapshot")
				d.clockSnapshot(&cs)
				m.inherit(&cs)
			}
		case fPacketTimestamp:
			ts = m.uint(&f, "timestamp")
		case fPacketSequenceID:
			seqID, hasSeq, seqOff = uint32(m.uint(&f, "trusted_packet_sequence_id")), true, f.off
		case fPacketInternedData:
			if m.want(&f, "interned_data", protowire.BytesType) {
				interned = append(interned, f)
			}
		case fPacketSequenceFlags:
			flags = m.uint(&f, "sequence_flags")
		case fPacketProfilePacket:
			if m.want(&f, "profile_packet", protowire.BytesType) {
				profilePkts = append(profilePkts, f)
			}
		case fPacketIncrementalClear:
			cleared = m.bool(&f, "incremental_state_cleared")
		case fPacketPreviousDropped:
			dropped = m.bool(&f, "previous_packet_dropped")
		}
	}
	if m.err != nil {
		return m.err
	}
	if len(interned) == 0 && len(profilePkts) == 0 && !cleared && !dropped && flags&seqIncrementalStateCleared == 0 {
		return nil // nothing for us: other data sources' packets
	}
	s := d.seqs[seqID]
	if s == nil {
		if len(d.seqs) >= d.opts.MaxSequences {
			return &locErr{off: seqOff, field: "trusted_packet_sequence_id",
				err: fmt.Errorf("%w: more than %d packet sequences", ErrMalformed, d.opts.MaxSequences)}
		}
		s = newSequence(seqID)
		d.seqs[seqID] = s
	}
	// Incremental state first, as the trace processor orders it.
	if cleared || flags&seqIncrementalStateCleared != 0 {
		if hasSeq {
			d.clearState(s)
		}
	} else if dropped && hasSeq {
		s.valid = false
	}
	for i := range interned {
		if !hasSeq || !s.valid {
			d.stats.SkippedInternedData++
			continue
		}
		sub := m.sub(&interned[i], "interned_data")
		d.internedData(s, &sub)
		if sub.err != nil {
			return sub.err
		}
	}
	if flags&seqNeedsIncrementalState != 0 && !s.valid {
		d.stats.SkippedPackets++
		return nil
	}
	for i := range profilePkts {
		sub := m.sub(&profilePkts[i], "profile_packet")
		d.profilePacket(s, &sub, ts, index)
		if sub.err != nil {
			return sub.err
		}
	}
	return nil
}

func (d *Decoder) internedData(s *sequence, m *msg) {
	t := s.interned
	var f field
	for m.next(&f) {
		switch f.num {
		case fInternedFunctionNames:
			d.internString(t, t.names, m, &f, "function_names")
		case fInternedMappingPaths:
			d.internString(t, t.paths, m, &f, "mapping_paths")
		case fInternedBuildIDs:
			d.internString(t, t.buildIDs, m, &f, "build_ids")
		case fInternedFrames:
			d.internFrame(t, m, &f, "frames")
		case fInternedMappings:
			d.internMapping(t, m, &f, "mappings")
		case fInternedCallstacks:
			d.internCallstack(t, m, &f, "callstacks")
		}
	}
}

func (d *Decoder) internString(t *tables, dst map[uint64]string, m *msg, f *field, name string) {
	if !m.want(f, name, protowire.BytesType) {
		return
	}
	sm := m.sub(f, name)
	var g field
	var iid uint64
	var str []byte
	for sm.next(&g) {
		switch g.num {
		case fStringIID:
			iid = sm.uint(&g, "iid")
		case fStringStr:
			str = sm.bytes(&g, "str")
		}
	}
	m.inherit(&sm)
	if m.err != nil {
		return
	}
	put(t, dst, iid, string(str))
}

func (d *Decoder) internFrame(t *tables, m *msg, f *field, name string) {
	if !m.want(f, name, protowire.BytesType) {
		return
	}
	sm := m.sub(f, name)
	var g field
	var iid uint64
	var fr rawFrame
	for sm.next(&g) {
		switch g.num {
		case fFrameIID:
			iid = sm.uint(&g, "iid")
		case fFrameFunction:
			fr.name = sm.uint(&g, "function_name_id")
		case fFrameMapping:
			fr.mapping = sm.uint(&g, "mapping_id")
		case fFrameRelPC:
			fr.relPC = sm.uint(&g, "rel_pc")
		}
	}
	m.inherit(&sm)
	if m.err != nil {
		return
	}
	put(t, t.frames, iid, fr)
}

func (d *Decoder) internMapping(t *tables, m *msg, f *field, name string) {
	if !m.want(f, name, protowire.BytesType) {
		return
	}
	sm := m.sub(f, name)
	var g field
	var iid uint64
	var mp rawMapping
	for sm.next(&g) {
		switch g.num {
		case fMappingIID:
			iid = sm.uint(&g, "iid")
		case fMappingBuildID:
			mp.buildID = sm.uint(&g, "build_id")
		case fMappingPaths:
			mp.paths = sm.appendRepeated(mp.paths, &g, "path_string_ids")
		}
	}
	m.inherit(&sm)
	if m.err != nil {
		return
	}
	put(t, t.mappings, iid, mp)
}

func (d *Decoder) internCallstack(t *tables, m *msg, f *field, name string) {
	if !m.want(f, name, protowire.BytesType) {
		return
	}
	sm := m.sub(f, name)
	var g field
	var iid uint64
	var frames []uint64
	for sm.next(&g) {
		switch g.num {
		case fCallstackIID:
			iid = sm.uint(&g, "iid")
		case fCallstackFrames:
			frames = sm.appendRepeated(frames, &g, "frame_ids")
			if len(frames) > d.opts.MaxStackDepth {
				sm.fail(g.off, sm.name("frame_ids"), "call stack deeper than %d frames", d.opts.MaxStackDepth)
			}
		}
	}
	m.inherit(&sm)
	if m.err != nil {
		return
	}
	put(t, t.callstacks, iid, frames)
}

func (d *Decoder) profilePacket(s *sequence, m *msg, ts uint64, index int) {
	d.stats.ProfilePackets++
	var f field
	continued := false
	var idx uint64
	hasIdx := false
	t := s.inPacket
	for m.next(&f) {
		switch f.num {
		case fProfileStrings:
			d.internString(t, t.names, m, &f, "strings")
		case fProfileFrames:
			d.internFrame(t, m, &f, "frames")
		case fProfileCallstacks:
			d.internCallstack(t, m, &f, "callstacks")
		case fProfileMappings:
			d.internMapping(t, m, &f, "mappings")
		case fProfileDumps:
			d.processDump(s, m, &f, ts)
		case fProfileContinued:
			continued = m.bool(&f, "continued")
		case fProfileIndex:
			idx, hasIdx = m.uint(&f, "index"), true
		}
	}
	if m.err != nil {
		return
	}
	// heapprofd numbers a sequence's profile packets 0, 1, 2, ...; a gap
	// means packets were lost (the trace processor's
	// heapprofd_missing_packet). The packet heapprofd writes when a data
	// source stops, listing the processes another session held
	// (rejected_concurrent), has no index and is outside the count.
	if hasIdx {
		if (!s.hasIndex && idx != 0) || (s.hasIndex && s.lastIndex+1 != idx) {
			d.stats.MissingProfilePackets++
		}
		s.hasIndex, s.lastIndex = true, idx
	}
	if !continued {
		d.commit(s, index)
	}
}

func (d *Decoder) processDump(s *sequence, m *msg, f *field, pktTS uint64) {
	if !m.want(f, "process_dumps", protowire.BytesType) {
		return
	}
	sm := m.sub(f, "process_dumps")
	var g field
	h := Dump{Sequence: s.id, PacketTimestamp: pktTS}
	// First pass: the header (its fields may follow the samples) and the
	// number of samples.
	nSamples := 0
	for sm.next(&g) {
		switch g.num {
		case fDumpPID:
			h.PID = sm.uint(&g, "pid")
		case fDumpSamples:
			if sm.want(&g, "samples", protowire.BytesType) {
				nSamples++
			}
		case fDumpFromStartup:
			h.FromStartup = sm.bool(&g, "from_startup")
		case fDumpRejectedConcurrent:
			h.RejectedConcurrent = sm.bool(&g, "rejected_concurrent")
		case fDumpStats:
			h.ProcessStats = d.processStats(&sm, &g)
		case fDumpDisconnected:
			h.Disconnected = sm.bool(&g, "disconnected")
		case fDumpBufferOverran:
			h.BufferOverran = sm.bool(&g, "buffer_overran")
		case fDumpBufferCorrupted:
			h.BufferCorrupted = sm.bool(&g, "buffer_corrupted")
		case fDumpTimestamp:
			h.Timestamp = sm.uint(&g, "timestamp")
		case fDumpHitGuardrail:
			h.HitGuardrail = sm.bool(&g, "hit_guardrail")
		case fDumpHeapName:
			h.Heap = string(sm.bytes(&g, "heap_name"))
		case fDumpSamplingInterval:
			h.SamplingInterval = sm.uint(&g, "sampling_interval_bytes")
		case fDumpOrigInterval:
			h.OrigSamplingInterval = sm.uint(&g, "orig_sampling_interval_bytes")
		case fDumpClientError:
			h.ClientError = sm.uint(&g, "client_error")
		case fDumpStartTimestamp:
			h.StartTimestamp = sm.uint(&g, "start_timestamp")
		}
	}
	if sm.err != nil {
		m.inherit(&sm)
		return
	}
	// Count before buffering: every sample is at least its two-byte
	// header, so nSamples is bounded by the packet's size.
	if s.pending+nSamples > d.opts.MaxPendingSamples {
		sm.fail(f.off, sm.name("samples"), "%w: %d buffered + %d new > %d", ErrTooManyPendingSamples, s.pending, nSamples, d.opts.MaxPendingSamples)
		m.inherit(&sm)
		return
	}
	k := groupKey{h.PID, h.Heap, h.Timestamp}
	grp := s.groupIdx[k]
	if grp == nil {
		hd := h
		grp = &pendingGroup{d: &hd}
		s.groupIdx[k] = grp
		s.groups = append(s.groups, grp)
	} else {
		// The header is repeated in each continued packet; keep any flag
		// that any copy raised.
		g := grp.d
		g.FromStartup = g.FromStartup || h.FromStartup
		g.RejectedConcurrent = g.RejectedConcurrent || h.RejectedConcurrent
		g.Disconnected = g.Disconnected || h.Disconnected
		g.BufferOverran = g.BufferOverran || h.BufferOverran
		g.BufferCorrupted = g.BufferCorrupted || h.BufferCorrupted
		g.HitGuardrail = g.HitGuardrail || h.HitGuardrail
		g.ClientError = max(g.ClientError, h.ClientError)
		g.SamplingInterval = max(g.SamplingInterval, h.SamplingInterval)
		g.OrigSamplingInterval = max(g.OrigSamplingInterval, h.OrigSamplingInterval)
		g.StartTimestamp = max(g.StartTimestamp, h.StartTimestamp)
		if h.ProcessStats != (ProcessStats{}) {
			g.ProcessStats = h.ProcessStats
		}
	}
	if nSamples == 0 {
		return
	}
	if grp.samples == nil {
		grp.samples = make([]pendingSample, 0, nSamples)
	}
	// Second pass: the samples.
	sm.pos = 0
	for sm.next(&g) {
		if g.num != fDumpSamples {
			continue
		}
		grp.samples = append(grp.samples, d.sample(&sm, &g))
		if sm.err != nil {
			m.inherit(&sm)
			return
		}
	}
	s.pending += nSamples
}

func (d *Decoder) processStats(m *msg, f *field) ProcessStats {
	var st ProcessStats
	if !m.want(f, "stats", protowire.BytesType) {
		return st
	}
	sm := m.sub(f, "stats")
	var g field
	for sm.next(&g) {
		switch g.num {
		case fStatsUnwindingErrors:
			st.UnwindingErrors = sm.uint(&g, "unwinding_errors")
		case fStatsHeapSamples:
			st.HeapSamples = sm.uint(&g, "heap_samples")
		case fStatsMapReparses:
			st.MapReparses = sm.uint(&g, "map_reparses")
		case fStatsTotalUnwindingTimeUS:
			st.TotalUnwindingTimeUS = sm.uint(&g, "total_unwinding_time_us")
		case fStatsSpinlockBlockedUS:
			st.ClientSpinlockBlockedUS = sm.uint(&g, "client_spinlock_blocked_us")
		}
	}
	m.inherit(&sm)
	return st
}

func (d *Decoder) sample(m *msg, f *field) pendingSample {
	sm := m.sub(f, "samples")
	var g field
	var ps pendingSample
	for sm.next(&g) {
		switch g.num {
		case fSampleCallstack:
			ps.id = sm.uint(&g, "callstack_id")
		case fSampleAllocated:
			ps.v.Allocated = sm.uint(&g, "self_allocated")
		case fSampleFreed:
			ps.v.Freed = sm.uint(&g, "self_freed")
		case fSampleTimestamp:
			sm.uint(&g, "timestamp")
		case fSampleAllocCount:
			ps.v.Count = sm.uint(&g, "alloc_count")
		case fSampleFreeCount:
			ps.v.FreeCount = sm.uint(&g, "free_count")
		case fSampleSelfMax:
			ps.max, ps.hasMax = sm.uint(&g, "self_max"), true
		case fSampleSelfMaxCount:
			ps.maxCnt = sm.uint(&g, "self_max_count")
		}
	}
	m.inherit(&sm)
	return ps
}

// commit ends a dump: resolves the buffered samples' callstacks and turns
// cumulative values into deltas, then drops the packet's own tables.
func (d *Decoder) commit(s *sequence, index int) {
	for _, grp := range s.groups {
		dump := grp.d
		dump.Packet = index
		d.dumpTimes(dump)
		art := dump.Heap == ArtHeap
		pos := d.pos
		clear(pos)
		dump.Stacks = make([]StackDelta, 0, len(grp.samples))
		prof := d.profile(dump.PID, dump.Heap)
		prof.dumps++
		for _, ps := range grp.samples {
			cur := ps.v
			if ps.hasMax {
				// dump_at_max profiles: the peak, with a count only from
				// producers new enough to fill it in correctly.
				cur = Values{Allocated: ps.max}
				if dump.OrigSamplingInterval > 0 {
					cur.Count = ps.maxCnt
				}
			}
			if art {
				cur.Freed, cur.FreeCount = 0, 0
			}
			st := d.resolve(s, ps.id)
			if st == nil {
				dump.Unresolved++
				d.stats.UnresolvedSamples++
				continue
			}
			k := idKey{dump.PID, dump.Heap, ps.id}
			is := s.ids[k]
			if is == nil || is.stack != st {
				is = &idState{stack: st}
				s.ids[k] = is
			}
			if cur.Allocated < is.last.Allocated || cur.Count < is.last.Count ||
				cur.Freed < is.last.Freed || cur.FreeCount < is.last.FreeCount {
				// A new generation of the id: it counts from zero again.
				dump.Resets++
				d.stats.ResetSamples++
				is.last = Values{}
			}
			delta := Values{
				cur.Allocated - is.last.Allocated, cur.Count - is.last.Count,
				cur.Freed - is.last.Freed, cur.FreeCount - is.last.FreeCount,
			}
			is.last = cur
			tot, seen := prof.totals[st]
			if !seen {
				prof.order = append(prof.order, st)
			}
			tot = tot.add(delta)
			prof.totals[st] = tot
			i, ok := pos[st]
			if !ok {
				i = len(dump.Stacks)
				pos[st] = i
				dump.Stacks = append(dump.Stacks, StackDelta{Stack: st})
			}
			dump.Stacks[i].Delta = dump.Stacks[i].Delta.add(delta)
			dump.Stacks[i].Total = tot
			dump.Delta = dump.Delta.add(delta)
		}
		for _, sd := range dump.Stacks {
			if sd.Stack.Unwind == UnwindOK {
				continue
			}
			dump.BrokenStacks++
			dump.Broken = dump.Broken.add(sd.Delta)
			if sd.Stack.Unwind == UnwindError {
				d.stats.ErrorStackSamples += sd.Delta.Count
				d.stats.ErrorStackBytes += sd.Delta.Allocated
			} else {
				d.stats.UnknownStackSamples += sd.Delta.Count
				d.stats.UnknownStackBytes += sd.Delta.Allocated
			}
		}
		d.countFlags(dump)
		d.queue = append(d.queue, dump)
	}
	s.groups = nil
	clear(s.groupIdx)
	s.pending = 0
	if !s.inPacket.empty() {
		s.inPacket = newTables(true)
	}
}

func (d *Decoder) countFlags(dp *Dump) {
	b := func(v bool, n *int) {
		if v {
			*n++
		}
	}
	b(dp.RejectedConcurrent, &d.stats.RejectedConcurrent)
	b(dp.Disconnected, &d.stats.Disconnected)
	b(dp.BufferOverran, &d.stats.BufferOverran)
	b(dp.BufferCorrupted, &d.stats.BufferCorrupted)
	b(dp.HitGuardrail, &d.stats.HitGuardrail)
	b(dp.ClientError != 0, &d.stats.ClientError)
}

func (d *Decoder) profile(pid uint64, heap string) *profile {
	k := profileKey{pid, heap}
	p := d.profiles[k]
	if p == nil {
		p = &profile{key: k, totals: map[*Stack]Values{}}
		d.profiles[k] = p
	}
	return p
}

// resolve finds a callstack by id: in the current dump's own tables first
// (Android 10), then in the sequence's interned data. It returns nil when
// the id, or a frame or mapping it names, is not defined, or when the
// call stack is empty.
func (d *Decoder) resolve(s *sequence, id uint64) *Stack {
	for _, t := range [...]*tables{s.inPacket, s.interned} {
		if st := t.cache[id]; st != nil {
			return st
		}
		fids, ok := t.callstacks[id]
		if !ok {
			continue
		}
		st := d.build(t, fids)
		if st != nil {
			t.cache[id] = st
		}
		return st
	}
	return nil
}

func (d *Decoder) build(t *tables, fids []uint64) *Stack {
	n := len(fids)
	if n == 0 {
		return nil // an empty call stack is dropped, as the trace processor does
	}
	frames := make([]*Frame, n)
	key := make([]byte, 4*n)
	for i, fid := range fids {
		rf, ok := d.frame(t, fid)
		if !ok {
			return nil
		}
		j := n - 1 - i // innermost first
		frames[j] = rf.f
		binary.LittleEndian.PutUint32(key[4*j:], rf.key)
	}
	if st := d.stacks[string(key)]; st != nil {
		return st
	}
	st := &Stack{Frames: frames, Key: string(key), Unwind: classify(frames)}
	d.stacks[st.Key] = st
	return st
}

// frame resolves a frame id once per table generation. Id 0 is the empty
// string and the empty mapping even when the trace does not define it
// (heapprofd defines both; hand-written traces often do not).
func (d *Decoder) frame(t *tables, fid uint64) (resolvedFrame, bool) {
	if rf, ok := t.frameCache[fid]; ok {
		return rf, true
	}
	raw, ok := t.frames[fid]
	if !ok {
		return resolvedFrame{}, false
	}
	name, ok := t.names[raw.name]
	if !ok && raw.name != 0 {
		return resolvedFrame{}, false
	}
	fr := &Frame{RawFunction: name, Function: NormalizeFunction(name), RelPC: raw.relPC}
	if mp, ok := t.mappings[raw.mapping]; ok {
		fr.BuildID = t.buildIDs[mp.buildID]
		fr.Mapping = t.path(raw.mapping, mp)
	} else if raw.mapping != 0 {
		return resolvedFrame{}, false
	}
	k := fr.key()
	id, ok := d.frameKeys[k]
	if !ok {
		id = uint32(len(d.frameKeys))
		d.frameKeys[k] = id
	}
	rf := resolvedFrame{f: fr, key: id}
	t.frameCache[fid] = rf
	return rf, true
}

// path joins a mapping's path components, once per mapping.
func (t *tables) path(id uint64, mp rawMapping) string {
	if p, ok := t.pathCache[id]; ok {
		return p
	}
	var pb strings.Builder
	for _, pid := range mp.paths {
		p, ok := t.paths[pid]
		if !ok {
			break // as the trace processor does: keep what resolved
		}
		pb.WriteByte('/')
		pb.WriteString(p)
	}
	p := pb.String()
	if p == "/ERROR" {
		p = "ERROR"
	}
	t.pathCache[id] = p
	return p
}
