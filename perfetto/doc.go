// Package perfetto decodes the traces perfetto records when heapprofd
// samples an Android app's Java heap (the "com.android.art" heap, Android 12
// and later), and turns them into allocation counts per call stack.
//
// # The trace
//
// A trace is a run of TracePacket messages (fields.go has the field
// numbers). Several writers share one trace; each has its own
// trusted_packet_sequence_id, and the ids that packets use for strings,
// frames, mappings and call stacks ("interning") are only meaningful within
// one sequence. A writer announces a fresh start with sequence_flags bit 1
// (or the older incremental_state_cleared field); the decoder then forgets
// that sequence's interned data, as perfetto's trace processor does. After
// previous_packet_dropped the sequence's interned data is not trusted until
// the next fresh start: interned data arriving meanwhile is ignored and
// packets flagged as needing it are skipped, both counted in Stats.
//
// heapprofd writes one dump per process and heap every dump interval. A
// dump is a ProfilePacket holding ProcessHeapSamples (pid, heap name,
// sampling interval, status flags and one HeapSample per call stack). A big
// dump spans several packets marked continued = true, and the interned data
// its samples refer to follows the samples, so the decoder buffers a dump's
// samples until the packet with continued = false ends it, and only then
// resolves call stacks. On Android 10, heapprofd put the string, frame,
// mapping and call-stack tables inside the ProfilePacket instead; those
// tables are looked up first and are forgotten when the dump ends.
// Repeated id lists (a call stack's frames, a mapping's path) may arrive
// packed or unpacked; both are read.
//
// # From cumulative values to deltas
//
// A HeapSample's values are totals since the call stack's id was created.
// heapprofd drops an id with nothing new and nothing live from later dumps,
// and if the same frames allocate again they come back under a new id
// starting from zero. The decoder therefore keeps, per callstack id, the
// last values seen (delta = current - last), and adds each delta to a
// running total keyed by the stack's frames, never by its id: a stack that
// is missing from a dump gained zero; a stack back under a new id continues
// from its total. Values that go down are left out and counted, as the
// trace processor does. ART reports no frees (heapprofd infers them from
// reused addresses), so frees are ignored for the ART heap.
//
// A dump's window is in CLOCK_MONOTONIC_COARSE; the decoder also gives it
// in BOOTTIME, the trace's own clock, through the trace's clock snapshots.
//
// Frames are named the way heapprofd's unwinder found them: Java methods
// with or without a return type and parameter list, sometimes marked
// "[DEDUPED]". NormalizeFunction brings them to one form ("pkg.Class.method")
// and stacks are keyed by the normalized names, so one method is one frame.
// Stacks that were not unwound whole, holding heapprofd's synthetic
// "ERROR <code>" frame or ending in a frame without a name where the
// thread's entry point should be (the Android 12/13 ART unwinding bug, shown
// by the perfetto UI as one "unknown" frame at the top of the stack), are
// classified (Stack.Unwind) and their share is counted in each Dump and in
// Stats so a caller can report it.
//
// # Bounds and errors
//
// The Decoder reads from an io.Reader one packet at a time (with
// Options.Follow, from a trace file that is still growing: a packet cut
// short at the current end is kept until the rest arrives) and holds only
// the packet being decoded, the interning tables, the samples of unfinished
// dumps and the running totals. A packet's declared length is checked
// against Options.MaxPacketSize before anything is read, and its bytes are
// read in chunks so memory grows only with the bytes that actually arrive;
// lists are counted before they are allocated. Each frame is resolved once
// and shared by the stacks that hold it, and a stack's key costs four bytes
// a frame, so what the decoder keeps stays proportional to its input
// (TestAllocationBoundedByInput). Options also cap a stack's depth, the
// samples an unfinished dump may buffer, and the number of sequences.
// A malformed trace gives a *FormatError naming the packet's index, the
// packet's byte offset, the field and the byte offset of the fault; what
// was decoded before it stays available.
//
// The package knows nothing of adb, logging or metrics. Writer (encode.go)
// produces traces in heapprofd's packet order for simulators and tests.
package perfetto

// The .pb fixtures in testdata are protoc encodings of the text protos there.
//go:generate go test -run ^TestFixturesMatchProtoc$ -update
