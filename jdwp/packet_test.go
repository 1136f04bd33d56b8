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

// TestReadDataGrowsAsBytesArrive: a header that declares 100 MiB followed
// by 10 bytes and the end of the stream costs about what arrived, in Go
// memory and in lent buffers, and the error says what was declared and
// what arrived (issue 33 item 8).
func TestReadDataGrowsAsBytesArrive(t *testing.T) {
	const declared = 100 << 20
	stream := append(largeReply(declared)[:HeaderLen], "0123456789"...)
	const bound = 1 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadPacket(bytes.NewReader(stream), 0)
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > bound {
		t.Errorf("ReadPacket allocated %d bytes for 10 bytes of a packet declaring %d", d, declared)
	}
	want := "jdwp: packet 0x1 declares 104857600 data bytes, 10 arrived: unexpected EOF"
	if !errors.Is(err, io.ErrUnexpectedEOF) || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}

	bufs := NewBuffers(2, 1)
	p, n, err := readHeader(bytes.NewReader(stream), 0)
	if err != nil {
		t.Fatal(err)
	}
	var most int64
	err = readData(&watchBuffers{bytes.NewReader(stream[HeaderLen:]), bufs, &most}, &p, n, bufs, true, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) || err.Error() != want {
		t.Errorf("lent: err = %v, want %q", err, want)
	}
	if most > bound {
		t.Errorf("lent: %d bytes of buffers while reading 10 bytes of a packet declaring %d", most, declared)
	}
	if bufs.Lent() != 0 {
		t.Errorf("%d buffers still lent after the error", bufs.Lent())
	}
}

// watchBuffers is a reader that notes the most memory bufs holds (lent or
// free) whenever it is read.
type watchBuffers struct {
	r    io.Reader
	bufs *Buffers
	most *int64
}

func (w *watchBuffers) Read(p []byte) (int, error) {
	inUse, free := w.bufs.Bytes()
	*w.most = max(*w.most, inUse+free)
	return w.r.Read(p)
}

// TestReadDataGrowsToFullPacket: a packet read through every size of new
// buffer, a byte at a time and lent or not, arrives whole and intact, and
// a buffer that fits is lent again at once.
func TestReadDataGrowsToFullPacket(t *testing.T) {
	const n = 5*MinPooledPacket + 123
	raw := largeReply(n)
	for i := range n {
		raw[HeaderLen+i] = byte(i * 7)
	}
	bufs := NewBuffers(2, 1)
	for _, lend := range []bool{false, true, true} {
		p, _, _ := readHeader(bytes.NewReader(raw), 0)
		err := readData(iotest.HalfReader(bytes.NewReader(raw[HeaderLen:])), &p, n, bufs, lend, nil)
		if err != nil || !bytes.Equal(p.Data, raw[HeaderLen:]) {
			t.Fatalf("lend %v: %d bytes, err %v", lend, len(p.Data), err)
		}
		if lend {
			bufs.Put(p.Data)
		}
	}
	if inUse, free := bufs.Bytes(); bufs.Len() != 1 || inUse != 0 || free > 2*n {
		t.Errorf("after reading twice: %d free buffers of %d bytes, %d in use", bufs.Len(), free, inUse)
	}
}
