package perfetto

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the part of perfetto's TraceConfig
// (protos/perfetto/config/trace_config.proto, data_source_config.proto and
// profiling/heapprofd_config.proto) that a heapprofd session uses.
//
//	TraceConfig
//	  1  buffers               BufferConfig: 1 size_kb, 4 fill_policy (2 = DISCARD)
//	  2  data_sources          DataSource: 1 config (DataSourceConfig)
//	  3  duration_ms
//	  8  write_into_file
//	  9  file_write_period_ms
//	 10  max_file_size_bytes   (tracing stops once the file holds this much)
//	 13  flush_period_ms       (a periodic Flush: data sources commit)
//	 14  flush_timeout_ms
//	 22  unique_session_name
//	 29  output_path
//
//	DataSourceConfig   1 name, 2 target_buffer, 105 heapprofd_config
//
//	HeapprofdConfig
//	  1  sampling_interval_bytes   4  pid (repeated)     2 process_cmdline (repeated)
//	  6  continuous_dump_config    (5 dump_phase_ms, 6 dump_interval_ms)
//	  8  shmem_size_bytes          9  block_client      20 heaps (repeated)
//	 14  block_client_timeout_us
const (
	tcBuffers           = 1
	tcDataSources       = 2
	tcDurationMS        = 3
	tcWriteIntoFile     = 8
	tcFileWritePeriodMS = 9
	tcMaxFileSize       = 10
	tcFlushPeriodMS     = 13
	tcFlushTimeoutMS    = 14
	tcUniqueSessionName = 22
	tcOutputPath        = 29

	bufSizeKB     = 1
	bufFillPolicy = 4
	fillDiscard   = 2

	dsConfig          = 1
	dscName           = 1
	dscTargetBuffer   = 2
	dscHeapprofd      = 105
	hpSamplingIntvl   = 1
	hpProcessCmdline  = 2
	hpPID             = 4
	hpContinuousDump  = 6
	hpShmemSize       = 8
	hpBlockClient     = 9
	hpBlockTimeoutUS  = 14
	hpHeaps           = 20
	cdDumpPhaseMS     = 5
	cdDumpIntervalMS  = 6
	heapprofdDataName = "android.heapprofd"
)

// HeapprofdSession is the trace config of one heapprofd session: the
// subset of perfetto's TraceConfig that sampling an app's Java heap needs.
// Marshal encodes it as the binary proto perfetto reads with `-c -`;
// ParseHeapprofdSession reads it back (simulators use that).
type HeapprofdSession struct {
	BufferKB          uint32 // trace buffer, fill policy DISCARD
	DurationMS        uint32 // 0: until stopped
	WriteIntoFile     bool
	FileWritePeriodMS uint32
	MaxFileSizeBytes  uint64 // 0: unbounded; else tracing stops at this size
	FlushPeriodMS     uint32 // 0: no periodic flush
	FlushTimeoutMS    uint32
	UniqueSessionName string
	// OutputPath has the tracing service create the file itself (Android
	// 11+). perfetto's command line refuses a config with it when -o or
	// --upload is given as well.
	OutputPath string

	SamplingInterval uint64   // sampling_interval_bytes; must not be 0
	PIDs             []uint64 // processes to profile
	ProcessCmdlines  []string // or by name
	Heaps            []string // e.g. ArtHeap
	DumpPhaseMS      uint32   // continuous_dump_config; 0 interval: no periodic dumps
	DumpIntervalMS   uint32
	ShmemSize        uint64
	BlockClient      bool
	// BlockClientTimeoutUS bounds how long a blocked client's allocating
	// thread waits for room in the shared memory; 0 waits for ever.
	BlockClientTimeoutUS uint32
}

// Marshal encodes the config as a binary TraceConfig.
func (c *HeapprofdSession) Marshal() []byte {
	var hp []byte
	hp = appendVarint(hp, hpSamplingIntvl, c.SamplingInterval)
	for _, s := range c.ProcessCmdlines {
		hp = protowire.AppendTag(hp, hpProcessCmdline, protowire.BytesType)
		hp = protowire.AppendString(hp, s)
	}
	for _, p := range c.PIDs {
		hp = appendVarint(hp, hpPID, p)
	}
	if c.DumpIntervalMS > 0 {
		var cd []byte
		cd = appendVarint(cd, cdDumpPhaseMS, uint64(c.DumpPhaseMS))
		cd = appendVarint(cd, cdDumpIntervalMS, uint64(c.DumpIntervalMS))
		hp = protowire.AppendTag(hp, hpContinuousDump, protowire.BytesType)
		hp = protowire.AppendBytes(hp, cd)
	}
	if c.ShmemSize > 0 {
		hp = appendVarint(hp, hpShmemSize, c.ShmemSize)
	}
	if c.BlockClient {
		hp = appendVarint(hp, hpBlockClient, 1)
	}
	if c.BlockClientTimeoutUS > 0 {
		hp = appendVarint(hp, hpBlockTimeoutUS, uint64(c.BlockClientTimeoutUS))
	}
	for _, h := range c.Heaps {
		hp = protowire.AppendTag(hp, hpHeaps, protowire.BytesType)
		hp = protowire.AppendString(hp, h)
	}

	var dsc []byte
	dsc = protowire.AppendTag(dsc, dscName, protowire.BytesType)
	dsc = protowire.AppendString(dsc, heapprofdDataName)
	dsc = appendVarint(dsc, dscTargetBuffer, 0)
	dsc = protowire.AppendTag(dsc, dscHeapprofd, protowire.BytesType)
	dsc = protowire.AppendBytes(dsc, hp)
	var ds []byte
	ds = protowire.AppendTag(ds, dsConfig, protowire.BytesType)
	ds = protowire.AppendBytes(ds, dsc)

	var buf []byte
	buf = appendVarint(buf, bufSizeKB, uint64(c.BufferKB))
	buf = appendVarint(buf, bufFillPolicy, fillDiscard)

	var b []byte
	b = protowire.AppendTag(b, tcBuffers, protowire.BytesType)
	b = protowire.AppendBytes(b, buf)
	b = protowire.AppendTag(b, tcDataSources, protowire.BytesType)
	b = protowire.AppendBytes(b, ds)
	b = appendVarint(b, tcDurationMS, uint64(c.DurationMS))
	if c.WriteIntoFile {
		b = appendVarint(b, tcWriteIntoFile, 1)
	}
	if c.FileWritePeriodMS > 0 {
		b = appendVarint(b, tcFileWritePeriodMS, uint64(c.FileWritePeriodMS))
	}
	if c.MaxFileSizeBytes > 0 {
		b = appendVarint(b, tcMaxFileSize, c.MaxFileSizeBytes)
	}
	if c.FlushPeriodMS > 0 {
		b = appendVarint(b, tcFlushPeriodMS, uint64(c.FlushPeriodMS))
	}
	if c.FlushTimeoutMS > 0 {
		b = appendVarint(b, tcFlushTimeoutMS, uint64(c.FlushTimeoutMS))
	}
	if c.UniqueSessionName != "" {
		b = protowire.AppendTag(b, tcUniqueSessionName, protowire.BytesType)
		b = protowire.AppendString(b, c.UniqueSessionName)
	}
	if c.OutputPath != "" {
		b = protowire.AppendTag(b, tcOutputPath, protowire.BytesType)
		b = protowire.AppendString(b, c.OutputPath)
	}
	return b
}

func appendVarint(b []byte, n protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// ErrNoHeapprofd is what ParseHeapprofdSession returns for a config without
// an android.heapprofd data source.
var ErrNoHeapprofd = errors.New("perfetto: the config has no android.heapprofd data source")

// ParseHeapprofdSession reads a binary TraceConfig: the session-wide fields
// and the first android.heapprofd data source. Other data sources and
// unknown fields are skipped. Errors name the field and byte offset.
func ParseHeapprofdSession(b []byte) (*HeapprofdSession, error) {
	c := &HeapprofdSession{}
	found := false
	err := walk(b, 0, "TraceConfig", func(n protowire.Number, typ protowire.Type, v uint64, sub []byte, off int) error {
		switch n {
		case tcBuffers:
			if c.BufferKB != 0 {
				return nil // the first buffer is the one data sources name
			}
			return walk(sub, off, "TraceConfig.buffers", func(n protowire.Number, _ protowire.Type, v uint64, _ []byte, _ int) error {
				if n == bufSizeKB {
					c.BufferKB = uint32(v)
				}
				return nil
			})
		case tcDataSources:
			return walk(sub, off, "TraceConfig.data_sources", func(n protowire.Number, _ protowire.Type, _ uint64, dsc []byte, off int) error {
				if n != dsConfig || found {
					return nil
				}
				var name string
				var hp []byte
				hpOff := 0
				if err := walk(dsc, off, "DataSourceConfig", func(n protowire.Number, _ protowire.Type, _ uint64, s []byte, o int) error {
					switch n {
					case dscName:
						name = string(s)
					case dscHeapprofd:
						hp, hpOff = s, o
					}
					return nil
				}); err != nil {
					return err
				}
				if name != heapprofdDataName {
					return nil
				}
				found = true
				return c.parseHeapprofd(hp, hpOff)
			})
		case tcDurationMS:
			c.DurationMS = uint32(v)
		case tcWriteIntoFile:
			c.WriteIntoFile = v != 0
		case tcFileWritePeriodMS:
			c.FileWritePeriodMS = uint32(v)
		case tcMaxFileSize:
			c.MaxFileSizeBytes = v
		case tcFlushPeriodMS:
			c.FlushPeriodMS = uint32(v)
		case tcFlushTimeoutMS:
			c.FlushTimeoutMS = uint32(v)
		case tcUniqueSessionName:
			c.UniqueSessionName = string(sub)
		case tcOutputPath:
			c.OutputPath = string(sub)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, ErrNoHeapprofd
	}
	return c, nil
}

func (c *HeapprofdSession) parseHeapprofd(b []byte, base int) error {
	return walk(b, base, "HeapprofdConfig", func(n protowire.Number, typ protowire.Type, v uint64, s []byte, off int) error {
		switch n {
		case hpSamplingIntvl:
			c.SamplingInterval = v
		case hpProcessCmdline:
			c.ProcessCmdlines = append(c.ProcessCmdlines, string(s))
		case hpPID:
			if typ == protowire.BytesType { // packed
				for len(s) > 0 {
					p, m := protowire.ConsumeVarint(s)
					if m < 0 {
						return fmt.Errorf("perfetto: config: HeapprofdConfig.pid at byte %d: %w", off, protowire.ParseError(m))
					}
					c.PIDs = append(c.PIDs, p)
					s = s[m:]
				}
				return nil
			}
			c.PIDs = append(c.PIDs, v)
		case hpContinuousDump:
			return walk(s, off, "HeapprofdConfig.continuous_dump_config", func(n protowire.Number, _ protowire.Type, v uint64, _ []byte, _ int) error {
				switch n {
				case cdDumpPhaseMS:
					c.DumpPhaseMS = uint32(v)
				case cdDumpIntervalMS:
					c.DumpIntervalMS = uint32(v)
				}
				return nil
			})
		case hpShmemSize:
			c.ShmemSize = v
		case hpBlockClient:
			c.BlockClient = v != 0
		case hpBlockTimeoutUS:
			c.BlockClientTimeoutUS = uint32(v)
		case hpHeaps:
			c.Heaps = append(c.Heaps, string(s))
		}
		return nil
	})
}

// walk calls fn for each field of the message b, which starts at byte base
// of the whole config: varints with v, length-delimited fields with their
// bytes and those bytes' offset. Fixed-width fields are skipped; groups
// are an error.
func walk(b []byte, base int, msgName string, fn func(n protowire.Number, typ protowire.Type, v uint64, sub []byte, off int) error) error {
	for i := 0; i < len(b); {
		n, typ, m := protowire.ConsumeTag(b[i:])
		if m < 0 {
			return fmt.Errorf("perfetto: config: %s: tag at byte %d: %w", msgName, base+i, protowire.ParseError(m))
		}
		at := i
		i += m
		switch typ {
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b[i:])
			if m < 0 {
				return fmt.Errorf("perfetto: config: %s field %d at byte %d: %w", msgName, n, base+at, protowire.ParseError(m))
			}
			i += m
			if err := fn(n, typ, v, nil, 0); err != nil {
				return err
			}
		case protowire.BytesType:
			s, m := protowire.ConsumeBytes(b[i:])
			if m < 0 {
				return fmt.Errorf("perfetto: config: %s field %d at byte %d: %w", msgName, n, base+at, protowire.ParseError(m))
			}
			off := base + i + (m - len(s))
			i += m
			if err := fn(n, typ, 0, s, off); err != nil {
				return err
			}
		default:
			m := protowire.ConsumeFieldValue(n, typ, b[i:])
			if m < 0 {
				return fmt.Errorf("perfetto: config: %s field %d at byte %d: %w", msgName, n, base+at, protowire.ParseError(m))
			}
			i += m
		}
	}
	return nil
}
