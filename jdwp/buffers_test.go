package jdwp

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestBuffersReuse(t *testing.T) {
	b := NewBuffers(2)
	small := b.get(100)
	if len(small) != 100 {
		t.Fatalf("len %d", len(small))
	}
	b.Put(small)
	if b.Len() != 0 {
		t.Fatal("a small buffer was kept")
	}
	big := b.get(1 << 20)
	b.Put(big[8:]) // a part of it, as a chunk's data is
	if b.Len() != 1 {
		t.Fatalf("%d free buffers, want 1", b.Len())
	}
	again := b.get(1<<20 - 8)
	if &again[0] != &big[8] {
		t.Fatal("the free buffer was not reused")
	}
	if b.Len() != 0 {
		t.Fatal("a buffer lent twice")
	}
	// Too small a free buffer is not used; when full, the smallest goes.
	b.Put(make([]byte, MinPooledPacket))
	b.Put(make([]byte, 2*MinPooledPacket))
	b.Put(make([]byte, 3*MinPooledPacket))
	if b.Len() != 2 {
		t.Fatalf("%d free buffers, want 2 (the bound)", b.Len())
	}
	if got := b.get(4 * MinPooledPacket); cap(got) != 4*MinPooledPacket {
		t.Fatalf("cap %d: a free buffer too small was used", cap(got))
	}
	if got := b.get(MinPooledPacket); cap(got) != 2*MinPooledPacket {
		t.Fatalf("cap %d, want the smallest large enough (%d); the smallest of three should have been dropped", cap(got), 2*MinPooledPacket)
	}
	var nilBuffers *Buffers
	nilBuffers.Put(big)
	if len(nilBuffers.get(MinPooledPacket)) != MinPooledPacket {
		t.Fatal("nil Buffers must allocate")
	}
}

// A connection with Buffers reads a large packet into a buffer given back
// before, and the data is the packet's.
func TestConnReadsIntoBuffers(t *testing.T) {
	b := NewBuffers(1)
	lent := make([]byte, 2*MinPooledPacket)
	b.Put(lent)
	data := bytes.Repeat([]byte{0xAB}, MinPooledPacket+5)
	pkt := binary.BigEndian.AppendUint32(nil, uint32(HeaderLen+len(data)))
	pkt = binary.BigEndian.AppendUint32(pkt, 0x40000001)
	pkt = append(pkt, FlagReply, 0, 0)
	pkt = append(pkt, data...)
	p, err := readPacket(bytes.NewReader(pkt), 0, b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Data, data) || &p.Data[0] != &lent[0] {
		t.Fatalf("data %d bytes, reused %v", len(p.Data), &p.Data[0] == &lent[0])
	}
}
