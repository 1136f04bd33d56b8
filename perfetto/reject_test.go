package perfetto_test

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/alloctrack/alloctrack/perfetto"
)

// packet wraps a TracePacket payload as a trace's field 1.
func packet(payload []byte) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(payload)))
	return append(b, payload...)
}

func lenField(num protowire.Number, payload []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(payload)))
	return append(b, payload...)
}

func varintField(num protowire.Number, v uint64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestRejections(t *testing.T) {
	good := packet(varintField(8, 1))
	tests := []struct {
		name      string
		in        []byte
		opts      *perfetto.Options
		is        error
		tooLarge  bool
		packet    int
		pktOff    int64
		off       int64
		field     string
		goodDumps int
	}{{
		name: "top-level group", in: []byte{0x0b}, is: perfetto.ErrMalformed, field: "packet tag",
	}, {
		name: "top-level field 0", in: []byte{0x02, 0x00}, is: perfetto.ErrMalformed, field: "packet tag",
	}, {
		name: "tag varint overflows", in: bytes.Repeat([]byte{0xff}, 11), is: perfetto.ErrMalformed, field: "packet tag",
	}, {
		name: "top-level field 1 as fixed64 is skipped, not a packet", in: cat([]byte{0x09}, make([]byte, 8), []byte{0x0a, 1, 0x43}), is: perfetto.ErrMalformed,
		pktOff: 9, off: 11, field: "timestamp",
	}, {
		name: "padded length varint", in: cat([]byte{0x0a, 0x83, 0x00}, []byte{0x40, 0xff, 0xff}), is: perfetto.ErrMalformed, off: 4, field: "timestamp",
	}, {
		name: "stream ends in a top-level varint", in: []byte{0x30}, is: io.ErrUnexpectedEOF, off: 1, field: "top-level field 6",
	}, {
		name: "stream ends in the length", in: []byte{0x0a, 0x80}, is: io.ErrUnexpectedEOF, off: 1, field: "packet length",
	}, {
		name: "packet too large", in: cat([]byte{0x0a}, protowire.AppendVarint(nil, 101)), opts: &perfetto.Options{MaxPacketSize: 100},
		tooLarge: true, off: 1, field: "packet length",
	}, {
		name: "payload cut short", in: []byte{0x0a, 10, 0x40, 1, 0x50}, is: io.ErrUnexpectedEOF, off: 5, field: "packet payload (3 of 10 bytes read)",
	}, {
		name: "second packet cut short", in: cat(good, []byte{0x0a, 10, 0x40}), is: io.ErrUnexpectedEOF, packet: 1, pktOff: 4, off: 7,
		field: "packet payload (1 of 10 bytes read)",
	}, {
		name: "top-level fixed32 cut short", in: []byte{0x15, 1, 2}, is: io.ErrUnexpectedEOF, off: 3, field: "top-level field 2",
	}, {
		name: "bad varint in packet", in: packet(cat([]byte{0x40}, bytes.Repeat([]byte{0xff}, 10))), is: perfetto.ErrMalformed, off: 3, field: "timestamp",
	}, {
		name: "length past the end", in: packet(cat([]byte{0x62, 50}, []byte{1, 2})), is: perfetto.ErrMalformed, off: 4, field: "interned_data",
	}, {
		name: "timestamp as bytes", in: packet(lenField(8, []byte{1})), is: perfetto.ErrMalformed, off: 2, field: "timestamp",
	}, {
		name: "sample callstack_id as bytes",
		in:   cat(good, packet(lenField(37, lenField(5, lenField(2, lenField(1, []byte{7})))))),
		is:   perfetto.ErrMalformed, packet: 1, pktOff: 4, off: 4 + 3 + 2 + 2 + 2, field: "profile_packet.process_dumps.samples.callstack_id",
	}, {
		name: "packed frame ids end inside a varint",
		in:   packet(cat(varintField(10, 1), varintField(13, 1), lenField(12, lenField(7, cat(varintField(1, 1), lenField(2, []byte{0x01, 0x80})))))),
		is:   perfetto.ErrMalformed, off: 2 + 2 + 2 + 2 + 2 + 2 + 2 + 1, field: "interned_data.callstacks.frame_ids",
	}, {
		name: "repeated field as fixed64",
		in:   packet(cat(varintField(10, 1), varintField(13, 1), lenField(12, lenField(7, cat(protowire.AppendTag(nil, 2, protowire.Fixed64Type), make([]byte, 8)))))),
		is:   perfetto.ErrMalformed, off: 2 + 2 + 2 + 2 + 2, field: "interned_data.callstacks.frame_ids",
	}, {
		name: "call stack too deep",
		in:   packet(cat(varintField(10, 1), varintField(13, 1), lenField(12, lenField(7, cat(varintField(1, 1), varintField(2, 1), varintField(2, 1), varintField(2, 1)))))),
		opts: &perfetto.Options{MaxStackDepth: 2}, is: perfetto.ErrMalformed, off: 2 + 2 + 2 + 2 + 2 + 2 + 2 + 2, field: "interned_data.callstacks.frame_ids",
	}, {
		name: "too many sequences",
		in:   cat(packet(cat(varintField(10, 1), varintField(42, 1))), packet(cat(varintField(10, 2), varintField(8, 5))), packet(cat(varintField(10, 3), varintField(42, 1)))),
		opts: &perfetto.Options{MaxSequences: 1}, is: perfetto.ErrMalformed, packet: 2, pktOff: 13, off: 15, field: "trusted_packet_sequence_id",
	}, {
		name: "group inside a packet", in: packet([]byte{0x43}), is: perfetto.ErrMalformed, off: 2, field: "timestamp",
	}, {
		name: "unfinished dump too big",
		in: packet(lenField(37, cat(varintField(6, 1), lenField(5, cat(
			lenField(2, varintField(1, 1)), lenField(2, varintField(1, 2))))))),
		opts: &perfetto.Options{MaxPendingSamples: 1}, is: perfetto.ErrTooManyPendingSamples, off: 7, field: "profile_packet.process_dumps.samples",
	}, {
		name:      "garbage after a good trace",
		in:        cat(mustFixture("art_heapprofd"), []byte{0x0a, 3, 0x62, 5, 0}),
		is:        perfetto.ErrMalformed,
		packet:    9,
		pktOff:    int64(len(mustFixture("art_heapprofd"))),
		off:       int64(len(mustFixture("art_heapprofd"))) + 4,
		field:     "interned_data",
		goodDumps: 4,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := perfetto.NewDecoder(bytes.NewReader(tt.in), tt.opts)
			var err error
			dumps := 0
			for {
				if _, err = d.Next(); err != nil {
					break
				}
				dumps++
			}
			if dumps != tt.goodDumps {
				t.Errorf("%d dumps before the error, want %d", dumps, tt.goodDumps)
			}
			if err == io.EOF {
				t.Fatal("no error")
			}
			t.Log(err)
			var fe *perfetto.FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("%v (%T) is not a *FormatError", err, err)
			}
			if tt.tooLarge {
				var tl *perfetto.PacketTooLargeError
				if !errors.As(err, &tl) || tl.Size != 101 || tl.Max != 100 {
					t.Errorf("%v: want *PacketTooLargeError 101 > 100", err)
				}
			} else if !errors.Is(err, tt.is) {
				t.Errorf("%v: want %v", err, tt.is)
			}
			if fe.Packet != tt.packet || fe.PacketOffset != tt.pktOff || fe.Offset != tt.off || fe.Field != tt.field {
				t.Errorf("packet %d at %d, offset %d, field %q; want %d at %d, %d, %q",
					fe.Packet, fe.PacketOffset, fe.Offset, fe.Field, tt.packet, tt.pktOff, tt.off, tt.field)
			}
			// Errors are final.
			if _, err2 := d.Next(); err2 != err {
				t.Errorf("second Next: %v, want the same error", err2)
			}
			if tt.goodDumps > 0 && len(d.Profiles()) == 0 {
				t.Error("profiles lost after the error")
			}
		})
	}
}

func mustFixture(name string) []byte { return fixture(&testing.T{}, name, false) }

func TestReaderError(t *testing.T) {
	boom := errors.New("boom")
	d := perfetto.NewDecoder(io.MultiReader(bytes.NewReader(packet(varintField(8, 1))), iotest.ErrReader(boom)), nil)
	_, err := d.Next()
	if !errors.Is(err, boom) {
		t.Fatalf("%v, want boom", err)
	}
	var fe *perfetto.FormatError
	if errors.As(err, &fe) {
		t.Errorf("a reader's error is not a format error: %v", err)
	}
}

// TestDeclaredLengthDoesNotAllocate declares a packet just under the
// maximum and sends ten bytes of it: the decoder must not allocate the
// declared size.
func TestDeclaredLengthDoesNotAllocate(t *testing.T) {
	in := cat([]byte{0x0a}, protowire.AppendVarint(nil, perfetto.DefaultMaxPacketSize-1), make([]byte, 10))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	d := perfetto.NewDecoder(bytes.NewReader(in), nil)
	_, err := d.Next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("%v, want unexpected EOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
		t.Errorf("allocated %d bytes for a 10-byte packet declaring %d", got, perfetto.DefaultMaxPacketSize-1)
	}
}

// pausingReader returns io.EOF once between its parts, as a file that is
// still being written does.
type pausingReader struct {
	parts [][]byte
	pause bool
}

func (p *pausingReader) Read(b []byte) (int, error) {
	for len(p.parts) > 0 && len(p.parts[0]) == 0 {
		p.parts = p.parts[1:]
		if p.pause {
			p.pause = false
			return 0, io.EOF
		}
	}
	if len(p.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.parts[0])
	p.parts[0] = p.parts[0][n:]
	if len(p.parts[0]) == 0 {
		p.pause = true
	}
	return n, nil
}

// packetEnds returns the offsets at which a trace's packets end.
func packetEnds(t *testing.T, b []byte) []int {
	var ends []int
	for off := 0; off < len(b); {
		_, _, n := protowire.ConsumeField(b[off:])
		if n < 0 {
			t.Fatal(protowire.ParseError(n))
		}
		off += n
		ends = append(ends, off)
	}
	return ends
}

// TestResumeAfterEOF reads a trace that arrives in pieces split at packet
// boundaries, calling Next again after each io.EOF.
func TestResumeAfterEOF(t *testing.T) {
	raw := fixture(t, "art_heapprofd", false)
	want := summary(decodeAll(t, bytes.NewReader(raw)))
	ends := packetEnds(t, raw)
	var parts [][]byte
	prev := 0
	for _, e := range ends {
		parts = append(parts, raw[prev:e])
		prev = e
	}
	d := perfetto.NewDecoder(&pausingReader{parts: parts}, nil)
	var dumps []*perfetto.Dump
	eofs := 0
	for eofs < len(parts)+2 {
		dp, err := d.Next()
		if err == io.EOF {
			eofs++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		dumps = append(dumps, dp)
	}
	if got := summary(dumps, d); got != want {
		t.Errorf("resumed:\n%s\nwant:\n%s", got, want)
	}
}

func TestSkipsOtherTopLevelFields(t *testing.T) {
	raw := fixture(t, "new_stack", false)
	want := summary(decodeAll(t, bytes.NewReader(raw)))
	ends := packetEnds(t, raw)
	in := cat(varintField(3, 9), lenField(4, []byte("xyz")), protowire.AppendTag(nil, 5, protowire.Fixed32Type), []byte{1, 2, 3, 4},
		raw[:ends[1]], protowire.AppendTag(nil, 6, protowire.Fixed64Type), make([]byte, 8), raw[ends[1]:])
	dumps, d := decodeAll(t, bytes.NewReader(in))
	got := summary(dumps, d)
	if got != want {
		t.Errorf("with extra fields:\n%s\nwant:\n%s", got, want)
	}
	if st := d.Stats(); st.Bytes != int64(len(in)) {
		t.Errorf("bytes %d, want %d", st.Bytes, len(in))
	}
}

// TestClearDropsUnfinishedDump: a sequence whose state is cleared in the
// middle of a continued dump abandons that dump, as the trace processor
// does.
func TestClearDropsUnfinishedDump(t *testing.T) {
	clearSeq := packet(cat(varintField(10, 1), varintField(13, 1), lenField(12, cat(
		lenField(5, cat(varintField(1, 1), lenField(2, []byte("f")))),
		lenField(6, cat(varintField(1, 1), varintField(2, 1))),
		lenField(7, cat(varintField(1, 1), varintField(2, 1)))))))
	sample := func(idx uint64, continued bool, alloc uint64) []byte {
		cont := uint64(0)
		if continued {
			cont = 1
		}
		return packet(cat(varintField(10, 1), lenField(37, cat(
			lenField(5, cat(varintField(1, 5), lenField(2, cat(varintField(1, 1), varintField(2, alloc), varintField(5, 1))))),
			varintField(6, cont), varintField(7, idx)))))
	}
	in := cat(clearSeq, sample(0, true, 100), clearSeq, sample(1, false, 40))
	dumps, d := decodeAll(t, bytes.NewReader(in))
	if len(dumps) != 1 || len(dumps[0].Stacks) != 1 || dumps[0].Stacks[0].Delta != (perfetto.Values{Allocated: 40, Count: 1}) {
		t.Fatalf("dumps %+v", dumps)
	}
	if st := d.Stats(); st.AbandonedDumps != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestFollowGrowingTrace reads traces that arrive in two pieces split at
// every byte, with Options.Follow: each piece ends with io.EOF, the decoder
// keeps the packet cut short, and the result is that of reading it whole.
func TestFollowGrowingTrace(t *testing.T) {
	for _, name := range []string{"art_heapprofd", "lost_state", "android10_dump_max"} {
		raw := fixture(t, name, false)
		want := summary(decodeAll(t, bytes.NewReader(raw)))
		for k := 0; k <= len(raw); k++ {
			head, tail := bytes.Clone(raw[:k]), bytes.Clone(raw[k:])
			d := perfetto.NewDecoder(&pausingReader{parts: [][]byte{head, tail}}, &perfetto.Options{Follow: true})
			var dumps []*perfetto.Dump
			eofs := 0
			for eofs < 3 {
				dp, err := d.Next()
				if err == io.EOF {
					eofs++
					continue
				}
				if err != nil {
					t.Fatalf("%s split at %d: %v", name, k, err)
				}
				dumps = append(dumps, dp)
			}
			if got := summary(dumps, d); got != want {
				t.Fatalf("%s split at %d:\n%s\nwant:\n%s", name, k, got, want)
			}
			if d.Pending() != 0 {
				t.Fatalf("%s split at %d: %d bytes pending at the end", name, k, d.Pending())
			}
		}
	}
}

// TestFollowTruncated: a trace that stops inside a packet leaves the
// packet pending, and Stats count only whole packets.
func TestFollowTruncated(t *testing.T) {
	raw := fixture(t, "art_heapprofd", false)
	ends := packetEnds(t, raw)
	cut := ends[3] + 5
	d := perfetto.NewDecoder(bytes.NewReader(raw[:cut]), &perfetto.Options{Follow: true})
	for {
		if _, err := d.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if d.Pending() != 5 || d.Stats().Bytes != int64(ends[3]) || d.Stats().Packets != 4 {
		t.Errorf("pending %d, stats %+v", d.Pending(), d.Stats())
	}
}

// TestRedefinedID: an interned id given a new meaning resolves to the new
// stack from then on, whose values count from zero.
func TestRedefinedID(t *testing.T) {
	name := func(iid uint64, s string) []byte {
		return lenField(5, cat(varintField(1, iid), lenField(2, []byte(s))))
	}
	setup := packet(cat(varintField(10, 1), lenField(12, cat(name(1, "com.example.A.a"),
		lenField(6, cat(varintField(1, 1), varintField(2, 1))),
		lenField(7, cat(varintField(1, 1), varintField(2, 1))))), varintField(13, 1)))
	dump := func(idx, alloc uint64, interned []byte) []byte {
		var id []byte
		if interned != nil {
			id = lenField(12, interned)
		}
		return packet(cat(varintField(10, 1), id, lenField(37, cat(
			lenField(5, cat(varintField(1, 5), lenField(2, cat(varintField(1, 1), varintField(2, alloc), varintField(5, 1))))),
			varintField(7, idx)))))
	}
	in := cat(setup, dump(0, 100, nil), dump(1, 150, name(1, "com.example.B.b")))
	dumps, d := decodeAll(t, bytes.NewReader(in))
	if len(dumps) != 2 {
		t.Fatalf("%d dumps", len(dumps))
	}
	if s := dumps[1].Stacks; len(s) != 1 || s[0].Stack.String() != "com.example.B.b" || s[0].Delta != (perfetto.Values{Allocated: 150, Count: 1}) {
		t.Errorf("after redefinition: %+v", s)
	}
	equalTotals(t, totals(d), map[string]perfetto.Values{
		"5//com.example.A.a": {Allocated: 100, Count: 1},
		"5//com.example.B.b": {Allocated: 150, Count: 1},
	})
}
