package perfetto

import (
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// DefaultDumpPacketBytes is about where heapprofd starts a new packet in
// the middle of a dump.
const DefaultDumpPacketBytes = 400_000

// WriterOptions tune a Writer. The zero value writes what heapprofd on
// Android 12+ writes, on sequence 1.
type WriterOptions struct {
	// Sequence is the trusted_packet_sequence_id (default 1).
	Sequence uint32
	// DumpPacketBytes is how many bytes of samples a packet holds before
	// the dump continues in the next one (default DefaultDumpPacketBytes).
	DumpPacketBytes int
	// Packed writes repeated ids (frame_ids, path_string_ids) packed.
	Packed bool
	// InPacket writes the Android 10 layout: each dump carries its own
	// string, frame, mapping and call-stack tables inside its first
	// ProfilePacket, instead of interned data written once per sequence.
	InPacket bool
}

// DumpSpec is one process's dump of one heap, as a Writer is to write it.
// Values in Samples are cumulative since the sample's callstack id was
// created, as heapprofd reports them.
type DumpSpec struct {
	PacketTimestamp      uint64 // TracePacket timestamp (BOOTTIME ns)
	PID                  uint64
	Heap                 string
	Timestamp            uint64 // end of the window, MONOTONIC_COARSE ns
	StartTimestamp       uint64 // 0: not written
	SamplingInterval     uint64
	OrigSamplingInterval uint64
	FromStartup          bool
	RejectedConcurrent   bool
	Disconnected         bool
	BufferOverran        bool
	BufferCorrupted      bool
	HitGuardrail         bool
	ClientError          uint64
	ProcessStats         ProcessStats
	Samples              []SampleSpec
}

// SampleSpec is one call stack's cumulative values in a dump.
type SampleSpec struct {
	// Frames, innermost first. A frame's RawFunction is written if set,
	// else its Function; its Mapping is split at "/" into path
	// components, as heapprofd does.
	Frames []Frame
	Values Values
}

// Writer writes a trace the way heapprofd does: a setup packet that clears
// the sequence's state and defines id 0 as the empty string; then for each
// round of dumps, packets of samples marked continued, a packet with the
// interned data first used by those samples, and an empty ProfilePacket
// that ends the round. Strings, mappings, frames and call stacks are
// interned once per sequence; ids are never reused. It is meant for
// simulators and tests.
type Writer struct {
	w       io.Writer
	opts    WriterOptions
	started bool
	index   uint64
	err     error

	nextID                         map[protowire.Number]uint64
	functionNames, paths, buildIDs map[string]uint64
	mappings                       map[string]uint64
	mappingInfo                    map[uint64]wMapping
	frames                         map[wFrameKey]uint64
	callstacks                     map[string]uint64
	defs                           map[defKey][]byte           // encoded table entries
	emitted                        map[defKey]bool             // written this round (Android 10) or ever
	pending                        map[protowire.Number][]byte // entries to write after the round's samples, by table
}

type wMapping struct {
	comps   []uint64
	buildID uint64
}

type wFrameKey struct {
	name, mapping, relPC uint64
}

// defKey names a table entry: the kind (its InternedData field number)
// and its id.
type defKey struct {
	kind protowire.Number
	id   uint64
}

// NewWriter returns a Writer writing to w. opts may be nil.
func NewWriter(w io.Writer, opts *WriterOptions) *Writer {
	var o WriterOptions
	if opts != nil {
		o = *opts
	}
	if o.Sequence == 0 {
		o.Sequence = 1
	}
	if o.DumpPacketBytes <= 0 {
		o.DumpPacketBytes = DefaultDumpPacketBytes
	}
	return &Writer{
		w: w, opts: o,
		nextID:        map[protowire.Number]uint64{},
		functionNames: map[string]uint64{"": 0},
		paths:         map[string]uint64{"": 0},
		buildIDs:      map[string]uint64{"": 0},
		mappings:      map[string]uint64{},
		mappingInfo:   map[uint64]wMapping{},
		frames:        map[wFrameKey]uint64{},
		callstacks:    map[string]uint64{},
		defs:          map[defKey][]byte{},
		emitted:       map[defKey]bool{},
		pending:       map[protowire.Number][]byte{},
	}
}

// Retire forgets the callstack id of a stack (frames innermost first), as
// heapprofd does when a stack has nothing live and nothing new: the next
// sample with these frames gets a new id, and its values count from zero.
func (w *Writer) Retire(frames []Frame) {
	if ids, ok := w.frameIDs(frames, false); ok {
		delete(w.callstacks, idsKey(ids))
	}
}

// WriteDumps writes one round of dumps (one per process and heap).
func (w *Writer) WriteDumps(dumps ...DumpSpec) error {
	if w.err != nil {
		return w.err
	}
	ts := uint64(0)
	if len(dumps) > 0 {
		ts = dumps[0].PacketTimestamp
	}
	if !w.started {
		w.started = true
		if err := w.setup(ts); err != nil {
			return err
		}
	}
	if w.opts.InPacket {
		// Android 10: a dump's tables live until the dump ends, so each
		// round carries every entry it uses.
		clear(w.emitted)
	}
	var body []byte // process_dumps of the current packet
	flush := func(continued bool, tables []byte) error {
		pp := append(tables, body...)
		pp = protowire.AppendTag(pp, fProfileContinued, protowire.VarintType)
		pp = protowire.AppendVarint(pp, protowire.EncodeBool(continued))
		pp = protowire.AppendTag(pp, fProfileIndex, protowire.VarintType)
		pp = protowire.AppendVarint(pp, w.index)
		w.index++
		pkt := w.appendPacketHead(nil, ts)
		pkt = protowire.AppendTag(pkt, fPacketProfilePacket, protowire.BytesType)
		pkt = protowire.AppendBytes(pkt, pp)
		body = nil
		return w.write(pkt)
	}
	ids := make([][]uint64, len(dumps))
	for i, d := range dumps {
		ids[i] = make([]uint64, len(d.Samples))
		for j, s := range d.Samples {
			ids[i][j] = w.callstackID(s.Frames)
		}
	}
	var tables []byte
	if w.opts.InPacket {
		tables = w.takePending()
	}
	for i := range dumps {
		d := &dumps[i]
		var samples []byte
		for j, s := range d.Samples {
			samples = appendSample(samples, ids[i][j], s.Values)
			if len(samples) >= w.opts.DumpPacketBytes {
				body = appendDump(body, d, samples)
				samples = nil
				if err := flush(true, tables); err != nil {
					return err
				}
				tables = nil
			}
		}
		// heapprofd makes a process's ProcessHeapSamples when it writes
		// the first sample into it: a process with no sample gets none,
		// and the round is then only its empty ProfilePackets.
		if len(samples) > 0 || len(d.Samples) == 0 && d.RejectedConcurrent {
			body = appendDump(body, d, samples)
		}
	}
	if w.opts.InPacket {
		return flush(false, tables)
	}
	if len(body) > 0 {
		if err := flush(true, nil); err != nil {
			return err
		}
	}
	if tables := w.takePending(); len(tables) > 0 {
		pkt := w.appendPacketHead(nil, ts)
		pkt = protowire.AppendTag(pkt, fPacketInternedData, protowire.BytesType)
		pkt = protowire.AppendBytes(pkt, tables)
		if err := w.write(pkt); err != nil {
			return err
		}
	}
	return flush(false, nil)
}

// WriteRejected writes what heapprofd writes when a data source stops and
// some of its target processes were profiled by another session all along:
// one ProfilePacket, without an index, with a rejected_concurrent
// ProcessHeapSamples for each.
func (w *Writer) WriteRejected(ts uint64, pids ...uint64) error {
	if w.err != nil || len(pids) == 0 {
		return w.err
	}
	if !w.started {
		w.started = true
		if err := w.setup(ts); err != nil {
			return err
		}
	}
	var pp []byte
	for _, pid := range pids {
		var e []byte
		e = protowire.AppendTag(e, fDumpPID, protowire.VarintType)
		e = protowire.AppendVarint(e, pid)
		e = protowire.AppendTag(e, fDumpRejectedConcurrent, protowire.VarintType)
		e = protowire.AppendVarint(e, 1)
		pp = protowire.AppendTag(pp, fProfileDumps, protowire.BytesType)
		pp = protowire.AppendBytes(pp, e)
	}
	pkt := w.appendPacketHead(nil, ts)
	pkt = protowire.AppendTag(pkt, fPacketProfilePacket, protowire.BytesType)
	pkt = protowire.AppendBytes(pkt, pp)
	return w.write(pkt)
}

// Builtin clock ids (perfetto's protos/perfetto/common/builtin_clock.proto):
// the clocks of a ClockSnapshot, which the tracing service takes at a
// session's start and then every 10 s when one drifted 10 ms or more from
// BOOTTIME (src/base/clock_snapshots.cc, tracing_service_impl.cc).
const (
	ClockRealtime        = 1
	ClockRealtimeCoarse  = 2
	ClockMonotonic       = 3
	ClockMonotonicCoarse = 4
	ClockMonotonicRaw    = 5
	ClockBoottime        = 6
)

// ClockReading is one clock of a snapshot: its builtin id and its time in
// ns.
type ClockReading struct {
	ID        uint32
	Timestamp uint64
}

// WriteClockSnapshot writes a ClockSnapshot packet stamped ts (BOOTTIME),
// as the tracing service writes into every trace.
func (w *Writer) WriteClockSnapshot(ts uint64, clocks ...ClockReading) error {
	if w.err != nil {
		return w.err
	}
	var cs []byte
	for _, c := range clocks {
		var e []byte
		e = protowire.AppendTag(e, fClockID, protowire.VarintType)
		e = protowire.AppendVarint(e, uint64(c.ID))
		e = protowire.AppendTag(e, fClockTimestamp, protowire.VarintType)
		e = protowire.AppendVarint(e, c.Timestamp)
		cs = protowire.AppendTag(cs, fSnapshotClocks, protowire.BytesType)
		cs = protowire.AppendBytes(cs, e)
	}
	var pkt []byte
	pkt = protowire.AppendTag(pkt, fPacketClockSnapshot, protowire.BytesType)
	pkt = protowire.AppendBytes(pkt, cs)
	pkt = protowire.AppendTag(pkt, fPacketTimestamp, protowire.VarintType)
	pkt = protowire.AppendVarint(pkt, ts)
	return w.write(pkt)
}

func (w *Writer) write(pkt []byte) error {
	b := protowire.AppendTag(nil, tracePacketField, protowire.BytesType)
	b = protowire.AppendBytes(b, pkt)
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	return nil
}

// appendPacketHead appends the fields every packet of the sequence has.
// Fields are written in field-number order throughout.
func (w *Writer) appendPacketHead(b []byte, ts uint64) []byte {
	b = protowire.AppendTag(b, fPacketTimestamp, protowire.VarintType)
	b = protowire.AppendVarint(b, ts)
	b = protowire.AppendTag(b, fPacketSequenceID, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(w.opts.Sequence))
}

// setup writes the packet heapprofd writes when its data source starts.
func (w *Writer) setup(ts uint64) error {
	pkt := w.appendPacketHead(nil, ts)
	if !w.opts.InPacket {
		var id []byte
		for _, f := range []protowire.Number{fInternedFunctionNames, fInternedBuildIDs, fInternedMappingPaths} {
			id = protowire.AppendTag(id, f, protowire.BytesType)
			id = protowire.AppendBytes(id, encodeString(0, ""))
		}
		pkt = protowire.AppendTag(pkt, fPacketInternedData, protowire.BytesType)
		pkt = protowire.AppendBytes(pkt, id)
	}
	pkt = protowire.AppendTag(pkt, fPacketSequenceFlags, protowire.VarintType)
	pkt = protowire.AppendVarint(pkt, seqIncrementalStateCleared)
	return w.write(pkt)
}

func encodeString(iid uint64, s string) []byte {
	e := protowire.AppendTag(nil, fStringIID, protowire.VarintType)
	e = protowire.AppendVarint(e, iid)
	e = protowire.AppendTag(e, fStringStr, protowire.BytesType)
	return protowire.AppendString(e, s)
}

func (w *Writer) appendRepeated(b []byte, field protowire.Number, vs []uint64) []byte {
	if w.opts.Packed {
		if len(vs) == 0 {
			return b
		}
		var p []byte
		for _, v := range vs {
			p = protowire.AppendVarint(p, v)
		}
		b = protowire.AppendTag(b, field, protowire.BytesType)
		return protowire.AppendBytes(b, p)
	}
	for _, v := range vs {
		b = protowire.AppendTag(b, field, protowire.VarintType)
		b = protowire.AppendVarint(b, v)
	}
	return b
}

// use queues a table entry for writing unless it was written already (this
// round, for the Android 10 layout; ever, otherwise).
func (w *Writer) use(kind protowire.Number, id uint64) {
	k := defKey{kind, id}
	if w.emitted[k] {
		return
	}
	w.emitted[k] = true
	field := kind
	if w.opts.InPacket {
		field = map[protowire.Number]protowire.Number{
			fInternedFunctionNames: fProfileStrings, fInternedMappingPaths: fProfileStrings, fInternedBuildIDs: fProfileStrings,
			fInternedMappings: fProfileMappings, fInternedFrames: fProfileFrames, fInternedCallstacks: fProfileCallstacks,
		}[kind]
	}
	b := protowire.AppendTag(w.pending[field], field, protowire.BytesType)
	w.pending[field] = protowire.AppendBytes(b, w.defs[k])
}

// takePending returns the queued table entries, tables in field-number
// order (the order protoc and perfetto's own writers use).
func (w *Writer) takePending() []byte {
	var out []byte
	for _, f := range []protowire.Number{
		fProfileStrings, fProfileFrames, fProfileCallstacks, fProfileMappings,
		fInternedFunctionNames, fInternedFrames, fInternedCallstacks,
		fInternedBuildIDs, fInternedMappingPaths, fInternedMappings,
	} {
		out = append(out, w.pending[f]...)
	}
	clear(w.pending)
	return out
}

// newID hands out ids per kind; function names, mapping paths and build
// ids share one space, as in heapprofd.
func (w *Writer) newID(kind protowire.Number) uint64 {
	if kind == fInternedMappingPaths || kind == fInternedBuildIDs {
		kind = fInternedFunctionNames
	}
	w.nextID[kind]++
	return w.nextID[kind]
}

func (w *Writer) stringID(table map[string]uint64, kind protowire.Number, s string, intern bool) (uint64, bool) {
	id, ok := table[s]
	if !ok {
		if !intern {
			return 0, false
		}
		id = w.newID(kind)
		table[s] = id
		w.defs[defKey{kind, id}] = encodeString(id, s)
	}
	if intern && id != 0 {
		w.use(kind, id)
	}
	return id, true
}

func (w *Writer) mappingID(path, buildID string, intern bool) (uint64, bool) {
	if path == "" && buildID == "" {
		return 0, true
	}
	key := path + "\x00" + buildID
	if id, ok := w.mappings[key]; ok {
		if intern {
			mi := w.mappingInfo[id]
			for _, c := range mi.comps {
				w.use(fInternedMappingPaths, c)
			}
			if mi.buildID != 0 {
				w.use(fInternedBuildIDs, mi.buildID)
			}
			w.use(fInternedMappings, id)
		}
		return id, true
	}
	if !intern {
		return 0, false
	}
	var comps []uint64
	for _, c := range strings.Split(path, "/") {
		if c != "" {
			id, _ := w.stringID(w.paths, fInternedMappingPaths, c, true)
			comps = append(comps, id)
		}
	}
	bid, _ := w.stringID(w.buildIDs, fInternedBuildIDs, buildID, true)
	id := w.newID(fInternedMappings)
	w.mappings[key] = id
	w.mappingInfo[id] = wMapping{comps: comps, buildID: bid}
	e := protowire.AppendTag(nil, fMappingIID, protowire.VarintType)
	e = protowire.AppendVarint(e, id)
	if bid != 0 {
		e = protowire.AppendTag(e, fMappingBuildID, protowire.VarintType)
		e = protowire.AppendVarint(e, bid)
	}
	e = w.appendRepeated(e, fMappingPaths, comps)
	w.defs[defKey{fInternedMappings, id}] = e
	w.use(fInternedMappings, id)
	return id, true
}

// frameIDs interns a stack's frames (or, if !intern, only looks them up)
// and returns their ids outermost first, the order on the wire.
func (w *Writer) frameIDs(frames []Frame, intern bool) ([]uint64, bool) {
	ids := make([]uint64, len(frames))
	for i, f := range frames {
		name := f.RawFunction
		if name == "" {
			name = f.Function
		}
		nid, ok := w.stringID(w.functionNames, fInternedFunctionNames, name, intern)
		if !ok {
			return nil, false
		}
		mid, ok := w.mappingID(f.Mapping, f.BuildID, intern)
		if !ok {
			return nil, false
		}
		k := wFrameKey{name: nid, mapping: mid, relPC: f.RelPC}
		id, ok := w.frames[k]
		if !ok {
			if !intern {
				return nil, false
			}
			id = w.newID(fInternedFrames)
			w.frames[k] = id
			e := protowire.AppendTag(nil, fFrameIID, protowire.VarintType)
			e = protowire.AppendVarint(e, id)
			if nid != 0 {
				e = protowire.AppendTag(e, fFrameFunction, protowire.VarintType)
				e = protowire.AppendVarint(e, nid)
			}
			if mid != 0 {
				e = protowire.AppendTag(e, fFrameMapping, protowire.VarintType)
				e = protowire.AppendVarint(e, mid)
			}
			e = protowire.AppendTag(e, fFrameRelPC, protowire.VarintType)
			e = protowire.AppendVarint(e, f.RelPC)
			w.defs[defKey{fInternedFrames, id}] = e
		}
		if intern {
			w.use(fInternedFrames, id)
		}
		ids[len(frames)-1-i] = id
	}
	return ids, true
}

func idsKey(ids []uint64) string {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b = protowire.AppendVarint(b, id)
	}
	return string(b)
}

func (w *Writer) callstackID(frames []Frame) uint64 {
	ids, _ := w.frameIDs(frames, true)
	key := idsKey(ids)
	id, ok := w.callstacks[key]
	if !ok {
		id = w.newID(fInternedCallstacks)
		w.callstacks[key] = id
		e := protowire.AppendTag(nil, fCallstackIID, protowire.VarintType)
		e = protowire.AppendVarint(e, id)
		e = w.appendRepeated(e, fCallstackFrames, ids)
		w.defs[defKey{fInternedCallstacks, id}] = e
	}
	w.use(fInternedCallstacks, id)
	return id
}

func appendSample(b []byte, id uint64, v Values) []byte {
	var e []byte
	e = protowire.AppendTag(e, fSampleCallstack, protowire.VarintType)
	e = protowire.AppendVarint(e, id)
	for _, f := range []struct {
		n protowire.Number
		v uint64
	}{{fSampleAllocated, v.Allocated}, {fSampleFreed, v.Freed}, {fSampleAllocCount, v.Count}, {fSampleFreeCount, v.FreeCount}} {
		if f.v != 0 {
			e = protowire.AppendTag(e, f.n, protowire.VarintType)
			e = protowire.AppendVarint(e, f.v)
		}
	}
	b = protowire.AppendTag(b, fDumpSamples, protowire.BytesType)
	return protowire.AppendBytes(b, e)
}

// appendDump appends a ProcessHeapSamples: pid, the samples (already
// encoded as its field 2), then the rest of the header in field order.
func appendDump(b []byte, d *DumpSpec, samples []byte) []byte {
	var e []byte
	u := func(n protowire.Number, v uint64) {
		e = protowire.AppendTag(e, n, protowire.VarintType)
		e = protowire.AppendVarint(e, v)
	}
	t := func(n protowire.Number, v bool) {
		if v {
			u(n, 1)
		}
	}
	u(fDumpPID, d.PID)
	e = append(e, samples...)
	t(fDumpFromStartup, d.FromStartup)
	t(fDumpRejectedConcurrent, d.RejectedConcurrent)
	if d.ProcessStats != (ProcessStats{}) {
		var s []byte
		for _, f := range []struct {
			n protowire.Number
			v uint64
		}{
			{fStatsUnwindingErrors, d.ProcessStats.UnwindingErrors},
			{fStatsHeapSamples, d.ProcessStats.HeapSamples},
			{fStatsMapReparses, d.ProcessStats.MapReparses},
			{fStatsTotalUnwindingTimeUS, d.ProcessStats.TotalUnwindingTimeUS},
			{fStatsSpinlockBlockedUS, d.ProcessStats.ClientSpinlockBlockedUS},
		} {
			s = protowire.AppendTag(s, f.n, protowire.VarintType)
			s = protowire.AppendVarint(s, f.v)
		}
		e = protowire.AppendTag(e, fDumpStats, protowire.BytesType)
		e = protowire.AppendBytes(e, s)
	}
	t(fDumpDisconnected, d.Disconnected)
	t(fDumpBufferOverran, d.BufferOverran)
	t(fDumpBufferCorrupted, d.BufferCorrupted)
	u(fDumpTimestamp, d.Timestamp)
	t(fDumpHitGuardrail, d.HitGuardrail)
	if d.Heap != "" {
		e = protowire.AppendTag(e, fDumpHeapName, protowire.BytesType)
		e = protowire.AppendString(e, d.Heap)
	}
	u(fDumpSamplingInterval, d.SamplingInterval)
	if d.OrigSamplingInterval != 0 {
		u(fDumpOrigInterval, d.OrigSamplingInterval)
	}
	if d.ClientError != 0 {
		u(fDumpClientError, d.ClientError)
	}
	if d.StartTimestamp != 0 {
		u(fDumpStartTimestamp, d.StartTimestamp)
	}
	b = protowire.AppendTag(b, fProfileDumps, protowire.BytesType)
	return protowire.AppendBytes(b, e)
}
