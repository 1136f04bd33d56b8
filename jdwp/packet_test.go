package jdwp

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
)

func TestAppendPacketExactBytes(t *testing.T) {
	tests := []struct {
		name string
		p    Packet
		want []byte
	}{
		{"command", Packet{ID: 0x40000001, CommandSet: 0xC7, Command: 0x01, Data: []byte{1, 2, 3}},
			[]byte{0, 0, 0, 14, 0x40, 0, 0, 1, 0, 0xC7, 0x01, 1, 2, 3}},
		{"empty command", Packet{ID: 7, CommandSet: 1, Command: 2},
			[]byte{0, 0, 0, 11, 0, 0, 0, 7, 0, 1, 2}},
		{"reply", Packet{ID: 0x80000001, Flags: FlagReply, ErrorCode: 0x0102, Data: []byte{9}},
			[]byte{0, 0, 0, 12, 0x80, 0, 0, 1, 0x80, 0x01, 0x02, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendPacket(nil, &tt.p)
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("encoded % x, want % x", got, tt.want)
			}
			back, err := ReadPacket(iotest.OneByteReader(bytes.NewReader(got)), 0)
			if err != nil {
				t.Fatal(err)
			}
			if back.ID != tt.p.ID || back.Flags != tt.p.Flags || back.CommandSet != tt.p.CommandSet ||
				back.Command != tt.p.Command || back.ErrorCode != tt.p.ErrorCode || !bytes.Equal(back.Data, tt.p.Data) {
				t.Fatalf("decoded %+v, want %+v", back, tt.p)
			}
		})
	}
}

func TestReadPacketRejects(t *testing.T) {
	hdr := func(length uint32) []byte {
		return []byte{byte(length >> 24), byte(length >> 16), byte(length >> 8), byte(length), 0, 0, 0, 1, 0, 0xC7, 1}
	}
	t.Run("length below header", func(t *testing.T) {
		_, err := ReadPacket(bytes.NewReader(hdr(10)), 0)
		if !errors.Is(err, ErrShortPacket) {
			t.Fatalf("err = %v, want ErrShortPacket", err)
		}
	})
	t.Run("too large, checked before allocating", func(t *testing.T) {
		_, err := ReadPacket(bytes.NewReader(hdr(0xffffffff)), 1024)
		var tl *PacketTooLargeError
		if !errors.As(err, &tl) || tl.Length != 0xffffffff || tl.Max != 1024 {
			t.Fatalf("err = %v, want PacketTooLargeError{0xffffffff, 1024}", err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ReadPacket(bytes.NewReader(hdr(0x7fffffff)), 0)
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
			t.Errorf("%d bytes allocated for a rejected 2 GiB packet", d)
		}
	})
	t.Run("default maximum", func(t *testing.T) {
		_, err := ReadPacket(bytes.NewReader(hdr(DefaultMaxPacketSize+1)), 0)
		var tl *PacketTooLargeError
		if !errors.As(err, &tl) || tl.Max != DefaultMaxPacketSize {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("truncated header", func(t *testing.T) {
		_, err := ReadPacket(bytes.NewReader(hdr(20)[:5]), 0)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("clean end between packets", func(t *testing.T) {
		_, err := ReadPacket(bytes.NewReader(nil), 0)
		if err != io.EOF {
			t.Fatalf("err = %v, want io.EOF", err)
		}
	})
	t.Run("truncated data", func(t *testing.T) {
		b := append(hdr(20), 1, 2, 3)
		_, err := ReadPacket(iotest.HalfReader(bytes.NewReader(b)), 0)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
		}
	})
}

func TestReadPacketSequenceShortReads(t *testing.T) {
	var stream []byte
	for i := range 5 {
		stream = AppendPacket(stream, &Packet{ID: uint32(i), CommandSet: 0xC7, Command: 1, Data: bytes.Repeat([]byte{byte(i)}, i*3)})
	}
	for _, mk := range []func(io.Reader) io.Reader{iotest.OneByteReader, iotest.HalfReader, iotest.DataErrReader} {
		r := mk(bytes.NewReader(stream))
		for i := range 5 {
			p, err := ReadPacket(r, 0)
			if err != nil {
				t.Fatalf("packet %d: %v", i, err)
			}
			if p.ID != uint32(i) || len(p.Data) != i*3 {
				t.Fatalf("packet %d: %+v", i, p)
			}
		}
		if _, err := ReadPacket(r, 0); err != io.EOF {
			t.Fatalf("after last packet: %v, want io.EOF", err)
		}
	}
}

func FuzzReadPacket(f *testing.F) {
	f.Add(AppendPacket(nil, &Packet{ID: 1, CommandSet: 0xC7, Command: 1, Data: []byte("HELO\x00\x00\x00\x04\x00\x00\x00\x01")}))
	f.Add(AppendPacket(nil, &Packet{ID: 0x80000001, Flags: FlagReply}))
	f.Add([]byte{0, 0, 0, 3})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			p, err := ReadPacket(r, 1<<16)
			if err != nil {
				return
			}
			if len(p.Data) > len(b) {
				t.Fatalf("decoded %d data bytes from %d input bytes", len(p.Data), len(b))
			}
			re := AppendPacket(nil, &p)
			if p.IsReply() == false && len(re) != HeaderLen+len(p.Data) {
				t.Fatalf("re-encoded length %d", len(re))
			}
		}
	})
}
