package perfetto

// Field numbers of the perfetto protos this package reads and writes. They
// are perfetto's own (protos/perfetto/trace/trace_packet.proto,
// interned_data/interned_data.proto, profiling/profile_common.proto and
// profiling/profile_packet.proto); every other field is skipped.
//
//	Trace
//	  1  packet            repeated TracePacket (LEN)
//
//	TracePacket
//	  6  clock_snapshot                LEN     ClockSnapshot
//	  8  timestamp                     varint  BOOTTIME ns when written
//	 10  trusted_packet_sequence_id    varint  one per writer; interning is per sequence
//	 12  interned_data                 LEN     InternedData
//	 13  sequence_flags                varint  1 = incremental state cleared,
//	                                           2 = needs incremental state
//	 37  profile_packet                LEN     ProfilePacket
//	 41  incremental_state_cleared     varint  bool (older writers)
//	 42  previous_packet_dropped       varint  bool
//
//	ClockSnapshot    1 clocks (repeated Clock)
//	Clock            1 clock_id varint (builtin ids: 1 REALTIME,
//	                   2 REALTIME_COARSE, 3 MONOTONIC, 4 MONOTONIC_COARSE,
//	                   5 MONOTONIC_RAW, 6 BOOTTIME),
//	                 2 timestamp varint (ns)
//
//	InternedData                       (each entry: InternedString, Frame, ...)
//	  5  function_names   InternedString   16 build_ids      InternedString
//	  6  frames           Frame            17 mapping_paths  InternedString
//	  7  callstacks       Callstack        19 mappings       Mapping
//
//	InternedString   1 iid varint, 2 str bytes
//	Frame            1 iid, 2 function_name_id, 3 mapping_id, 4 rel_pc  (varints)
//	Mapping          1 iid, 2 build_id (string id), 3 start_offset, 4 start,
//	                 5 end, 6 load_bias, 7 path_string_ids (repeated, packed
//	                 or not), 8 exact_offset
//	Callstack        1 iid, 2 frame_ids (repeated, packed or not; outermost
//	                 frame first)
//
//	ProfilePacket
//	  1  strings        InternedString  \
//	  2  frames         Frame            | Android 10: tables carried in the
//	  3  callstacks     Callstack        | packet, valid until the dump ends
//	  4  mappings       Mapping         /
//	  5  process_dumps  ProcessHeapSamples (repeated)
//	  6  continued      varint bool: more packets of this dump follow
//	  7  index          varint: 0, 1, 2, ... per sequence
//
//	ProcessHeapSamples
//	  1 pid                  6 disconnected       11 heap_name (string)
//	  2 samples (HeapSample) 7 buffer_overran     12 sampling_interval_bytes
//	  3 from_startup         8 buffer_corrupted   13 orig_sampling_interval_bytes
//	  4 rejected_concurrent  9 timestamp          14 client_error
//	  5 stats (ProcessStats) 10 hit_guardrail     15 start_timestamp
//
//	HeapSample   1 callstack_id, 2 self_allocated, 3 self_freed, 4 timestamp,
//	             5 alloc_count, 6 free_count, 8 self_max, 9 self_max_count
//	             (all varints; values cumulative since the profile started)
//
//	ProcessStats 1 unwinding_errors, 2 heap_samples, 3 map_reparses,
//	             4 unwinding_time_us (a histogram, skipped),
//	             5 total_unwinding_time_us, 6 client_spinlock_blocked_us
const (
	fPacketClockSnapshot    = 6
	fPacketTimestamp        = 8
	fPacketSequenceID       = 10
	fPacketInternedData     = 12
	fPacketSequenceFlags    = 13
	fPacketProfilePacket    = 37
	fPacketIncrementalClear = 41
	fPacketPreviousDropped  = 42

	fSnapshotClocks = 1
	fClockID        = 1
	fClockTimestamp = 2

	seqIncrementalStateCleared = 1
	seqNeedsIncrementalState   = 2

	fInternedFunctionNames = 5
	fInternedFrames        = 6
	fInternedCallstacks    = 7
	fInternedBuildIDs      = 16
	fInternedMappingPaths  = 17
	fInternedMappings      = 19

	fStringIID = 1
	fStringStr = 2

	fFrameIID      = 1
	fFrameFunction = 2
	fFrameMapping  = 3
	fFrameRelPC    = 4

	fMappingIID     = 1
	fMappingBuildID = 2
	fMappingPaths   = 7

	fCallstackIID    = 1
	fCallstackFrames = 2

	fProfileStrings    = 1
	fProfileFrames     = 2
	fProfileCallstacks = 3
	fProfileMappings   = 4
	fProfileDumps      = 5
	fProfileContinued  = 6
	fProfileIndex      = 7

	fDumpPID                = 1
	fDumpSamples            = 2
	fDumpFromStartup        = 3
	fDumpRejectedConcurrent = 4
	fDumpStats              = 5
	fDumpDisconnected       = 6
	fDumpBufferOverran      = 7
	fDumpBufferCorrupted    = 8
	fDumpTimestamp          = 9
	fDumpHitGuardrail       = 10
	fDumpHeapName           = 11
	fDumpSamplingInterval   = 12
	fDumpOrigInterval       = 13
	fDumpClientError        = 14
	fDumpStartTimestamp     = 15

	fSampleCallstack    = 1
	fSampleAllocated    = 2
	fSampleFreed        = 3
	fSampleTimestamp    = 4
	fSampleAllocCount   = 5
	fSampleFreeCount    = 6
	fSampleSelfMax      = 8
	fSampleSelfMaxCount = 9

	fStatsUnwindingErrors      = 1
	fStatsHeapSamples          = 2
	fStatsMapReparses          = 3
	fStatsTotalUnwindingTimeUS = 5
	fStatsSpinlockBlockedUS    = 6
)

// ArtHeap is the heap name ART registers with heapprofd for Java
// allocations (Android 12 and later).
const ArtHeap = "com.android.art"
