package heapprofd_test

import (
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/perfetto"
)

// TestDumpTimes: a dump covers (its start, its end] in REALTIME: the start
// the producer wrote (perfetto v58+), else the end of the process's last
// dump, else (a first dump) one dump interval before the dump was written.
func TestDumpTimes(t *testing.T) {
	const s = int64(time.Second)
	at := func(ns int64) time.Time { return time.Unix(0, ns) }
	real := func(start, end, pkt int64) *perfetto.Dump {
		d := &perfetto.Dump{HasRealTime: true, RealTimestamp: uint64(end), RealPacketTimestamp: uint64(pkt), Timestamp: 7}
		if start != 0 {
			d.StartTimestamp, d.RealStartTimestamp = 3, uint64(start)
		}
		return d
	}
	for _, tt := range []struct {
		name     string
		d        *perfetto.Dump
		prev     time.Time
		from, to time.Time
		ok       bool
	}{
		{"start written", real(100*s, 101*s, 102*s), at(99 * s), at(100 * s), at(101 * s), true},
		{"after another dump", real(0, 101*s, 102*s), at(100*s + 5), at(100*s + 5), at(101 * s), true},
		{"first dump", real(0, 101*s, 101*s+s/10), time.Time{}, at(101*s + s/10 - s/4), at(101 * s), true},
		{"first dump, last sample long before", real(0, 90*s, 101*s), time.Time{}, at(90 * s), at(90 * s), true},
		{"no REALTIME", &perfetto.Dump{Timestamp: 7, HasBootTime: true, BootTimestamp: 9}, at(1), time.Time{}, time.Time{}, false},
	} {
		from, to, ok := heapprofd.DumpTimes(tt.d, tt.prev, 250*time.Millisecond)
		if !from.Equal(tt.from) || !to.Equal(tt.to) || ok != tt.ok {
			t.Errorf("%s: (%v, %v] %v; want (%v, %v] %v", tt.name, from, to, ok, tt.from, tt.to, tt.ok)
		}
	}
}
