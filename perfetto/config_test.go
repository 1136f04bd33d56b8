package perfetto

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestHeapprofdSessionRoundTrip(t *testing.T) {
	in := &HeapprofdSession{
		BufferKB: 65536, WriteIntoFile: true, FileWritePeriodMS: 2500, FlushTimeoutMS: 30000,
		MaxFileSizeBytes: 64 << 20, FlushPeriodMS: 5000, BlockClientTimeoutUS: 500000,
		UniqueSessionName: "alloctrack-com.example-123", OutputPath: "/data/misc/perfetto-traces/alloctrack-x",
		SamplingInterval: 4096, PIDs: []uint64{123, 456}, ProcessCmdlines: []string{"com.example"},
		Heaps: []string{ArtHeap}, DumpPhaseMS: 10000, DumpIntervalMS: 10000, ShmemSize: 8 << 20, BlockClient: true,
	}
	out, err := ParseHeapprofdSession(in.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestParseHeapprofdSessionErrors(t *testing.T) {
	good := (&HeapprofdSession{SamplingInterval: 4096, PIDs: []uint64{1}, Heaps: []string{ArtHeap}}).Marshal()
	if _, err := ParseHeapprofdSession(good[:len(good)-3]); err == nil || !strings.Contains(err.Error(), "byte") {
		t.Fatalf("truncated config: %v", err)
	}
	// A config with only a buffer has no heapprofd data source.
	if _, err := ParseHeapprofdSession([]byte{0x0a, 0x02, 0x08, 0x01}); !errors.Is(err, ErrNoHeapprofd) {
		t.Fatalf("no data source: %v", err)
	}
}
