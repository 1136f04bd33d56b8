package perfetto_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/alloctrack/alloctrack/perfetto"
)

// FuzzDecodeTrace feeds arbitrary bytes to the decoder. It must not panic,
// must fail only with a *FormatError, and what it returns must add up: a
// dump's delta is the sum of its stacks' deltas, and every running total
// is the sum of the deltas reported for that stack.
func FuzzDecodeTrace(f *testing.F) {
	for _, name := range fixtures {
		f.Add(fixture(f, name, false))
		f.Add(fixture(f, name, true))
	}
	f.Add([]byte{0x0a, 0x80})
	f.Add([]byte{0x0a, 3, 0x62, 5, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		d := perfetto.NewDecoder(bytes.NewReader(data), &perfetto.Options{MaxPacketSize: 1 << 20, MaxPendingSamples: 1 << 12})
		sums := map[string]perfetto.Values{}
		var dumps []*perfetto.Dump
		failed := false
		for {
			dp, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				failed = true
				var fe *perfetto.FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("%v (%T) is not a *FormatError", err, err)
				}
				if fe.Offset < fe.PacketOffset || fe.Offset > int64(len(data)) {
					t.Fatalf("offset %d outside packet at %d / input of %d: %v", fe.Offset, fe.PacketOffset, len(data), err)
				}
				break
			}
			var sum perfetto.Values
			for _, s := range dp.Stacks {
				sum = add(sum, s.Delta)
				k := fmt.Sprintf("%d/%s/%s", dp.PID, dp.Heap, s.Stack.Key)
				sums[k] = add(sums[k], s.Delta)
				if sums[k] != s.Total {
					t.Fatalf("stack %q total %+v, deltas so far add up to %+v", k, s.Total, sums[k])
				}
				if dp.Heap == perfetto.ArtHeap && (s.Delta.Freed != 0 || s.Delta.FreeCount != 0) {
					t.Fatalf("frees counted for the ART heap: %+v", s.Delta)
				}
			}
			if sum != dp.Delta {
				t.Fatalf("dump delta %+v, stacks add up to %+v", dp.Delta, sum)
			}
			dumps = append(dumps, dp)
		}
		for _, p := range d.Profiles() {
			for _, s := range p.Stacks {
				k := fmt.Sprintf("%d/%s/%s", p.PID, p.Heap, s.Stack.Key)
				if sums[k] != s.Values {
					t.Fatalf("profile stack %q total %+v, deltas add up to %+v", k, s.Values, sums[k])
				}
			}
		}
		if failed {
			return
		}
		// The same bytes arriving in two pieces, followed, decode alike.
		want := summary(dumps, d)
		half := len(data) / 2
		f := perfetto.NewDecoder(&pausingReader{parts: [][]byte{bytes.Clone(data[:half]), bytes.Clone(data[half:])}},
			&perfetto.Options{MaxPacketSize: 1 << 20, MaxPendingSamples: 1 << 12, Follow: true})
		var got []*perfetto.Dump
		for eofs := 0; eofs < 3; {
			dp, err := f.Next()
			if err == io.EOF {
				eofs++
				continue
			}
			if err != nil {
				t.Fatalf("followed: %v", err)
			}
			got = append(got, dp)
		}
		if g := summary(got, f); g != want {
			t.Fatalf("followed in two pieces:\n%s\nwhole:\n%s", g, want)
		}
	})
}

func add(a, b perfetto.Values) perfetto.Values {
	return perfetto.Values{Allocated: a.Allocated + b.Allocated, Count: a.Count + b.Count, Freed: a.Freed + b.Freed, FreeCount: a.FreeCount + b.FreeCount}
}
