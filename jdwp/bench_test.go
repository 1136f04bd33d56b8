package jdwp

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// realReplyLen is the data length of the largest allocation report a VM
// sends (about 68 MB, docs/ddm-devices.md).
const realReplyLen = 68_000_000

// largeReply is the encoded bytes of a reply with n bytes of data.
func largeReply(n int) []byte {
	p := make([]byte, HeaderLen+n)
	binary.BigEndian.PutUint32(p, uint32(HeaderLen+n))
	binary.BigEndian.PutUint32(p[4:], 1)
	p[8] = FlagReply
	return p
}

// pieceReader gives at most 256 KiB per Read, as a socket gives what has
// arrived.
type pieceReader struct{ r *bytes.Reader }

func (p pieceReader) Read(b []byte) (int, error) { return p.r.Read(b[:min(len(b), 256<<10)]) }

// benchRead reads a 68 MB reply b.N times, its data lent by bufs (or new
// if bufs is nil) and given back.
func benchRead(b *testing.B, bufs func() *Buffers) {
	raw := largeReply(realReplyLen)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		pool := bufs()
		p, n, err := readHeader(pieceReader{bytes.NewReader(raw)}, 0)
		r := pieceReader{bytes.NewReader(raw[HeaderLen:])}
		if err == nil {
			err = readData(r, &p, n, pool, pool != nil, nil)
		}
		if err != nil || len(p.Data) != realReplyLen {
			b.Fatalf("read %d bytes: %v", len(p.Data), err)
		}
		pool.Put(p.Data)
	}
}

// BenchmarkReadLargeNew reads the largest report into Go memory of its own
// (ReadPacket, or a reply nobody owns).
func BenchmarkReadLargeNew(b *testing.B) {
	benchRead(b, func() *Buffers { return nil })
}

// BenchmarkReadLargePooled reads it into a buffer lent again and again, as
// the report of every window is.
func BenchmarkReadLargePooled(b *testing.B) {
	pool := NewBuffers(2, 1)
	benchRead(b, func() *Buffers { return pool })
}

// BenchmarkReadLargeFirst reads it into a new lent buffer each time (a
// Buffers that keeps none), as the first report of an app is.
func BenchmarkReadLargeFirst(b *testing.B) {
	benchRead(b, func() *Buffers { return NewBuffers(0, 1) })
}

var _ io.Reader = pieceReader{}
