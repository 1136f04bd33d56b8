package jdwp

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

func TestBuffersReuse(t *testing.T) {
	b := NewBuffers(2, 0)
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
	// Too small a free buffer is not used; when full, the one free the
	// longest goes.
	b.mu.Lock()
	now := time.Unix(1000, 0)
	b.now = func() time.Time { now = now.Add(time.Second); return now }
	b.mu.Unlock()
	b.Put(make([]byte, 2*MinPooledPacket))
	b.Put(make([]byte, MinPooledPacket))
	b.Put(make([]byte, 6*MinPooledPacket))
	if b.Len() != 2 {
		t.Fatalf("%d free buffers, want 2 (the bound)", b.Len())
	}
	if got := b.get(4 * MinPooledPacket); cap(got) != 6*MinPooledPacket {
		t.Fatalf("cap %d, want the smallest free buffer large enough (%d)", cap(got), 6*MinPooledPacket)
	}
	if got := b.get(MinPooledPacket); cap(got) != MinPooledPacket {
		t.Fatalf("cap %d, want the free buffer of %d", cap(got), MinPooledPacket)
	}
	if b.Len() != 0 {
		t.Fatalf("%d free buffers left: the one free the longest was kept", b.Len())
	}
	if got := b.get(7 * MinPooledPacket); cap(got) < 7*MinPooledPacket+MinPooledPacket/2 {
		t.Fatalf("cap %d: a new buffer without room to spare", cap(got))
	}
	b.Put(make([]byte, 6*MinPooledPacket))
	if got := b.get(2 * MinPooledPacket); cap(got) == 6*MinPooledPacket {
		t.Fatal("a buffer of more than twice the packet was lent")
	}
	if got := b.get(3 * MinPooledPacket); cap(got) != 6*MinPooledPacket {
		t.Fatalf("cap %d: the free buffer was not lent to a packet of half its size", cap(got))
	}
	var nilBuffers *Buffers
	nilBuffers.Put(big)
	if len(nilBuffers.get(MinPooledPacket)) != MinPooledPacket {
		t.Fatal("nil Buffers must allocate")
	}
}

// The buffers kept follow the packet sizes of now: after a burst of large
// packets, smaller ones do not keep the large buffers in use, and those
// are dropped once idle.
func TestBuffersFollowSizes(t *testing.T) {
	b := NewBuffers(4, 0)
	now := time.Unix(1000, 0)
	b.mu.Lock()
	b.now = func() time.Time { return now }
	b.mu.Unlock()
	b.SetIdle(30 * time.Second)
	const large, small = 9 << 20, 2 << 20
	var burst [][]byte
	for range 4 { // a burst of maximum reports read at once
		burst = append(burst, b.get(large))
	}
	for _, p := range burst {
		b.Put(p)
	}
	for range 10 { // then a minute of smaller ones, one at a time
		now = now.Add(6 * time.Second)
		p := b.get(small)
		if cap(p) >= large {
			t.Fatalf("a buffer of %d bytes lent for %d", cap(p), small)
		}
		b.Put(p)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range b.free {
		if cap(f.b) >= large {
			t.Errorf("a %d-byte buffer still kept a minute after the burst", cap(f.b))
		}
	}
	if len(b.free) != 1 {
		t.Errorf("%d buffers kept, want the 1 in use", len(b.free))
	}
}

// A connection with Buffers reads a large packet into a buffer given back
// before, and the data is the packet's.
func TestConnReadsIntoBuffers(t *testing.T) {
	b := NewBuffers(1, 0)
	lent := make([]byte, 2*MinPooledPacket)
	b.Put(lent)
	data := bytes.Repeat([]byte{0xAB}, MinPooledPacket+5)
	pkt := binary.BigEndian.AppendUint32(nil, uint32(HeaderLen+len(data)))
	pkt = binary.BigEndian.AppendUint32(pkt, 0x40000001)
	pkt = append(pkt, FlagReply, 0, 0)
	pkt = append(pkt, data...)
	p, err := readPacket(bytes.NewReader(pkt), 0, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Data, data) || &p.Data[0] != &lent[0] {
		t.Fatalf("data %d bytes, reused %v", len(p.Data), &p.Data[0] == &lent[0])
	}
}

// At most readers large packets are read at once; a reader waiting for
// its turn gives up when told to stop.
func TestBuffersBoundReaders(t *testing.T) {
	b := NewBuffers(0, 1)
	data := bytes.Repeat([]byte{1}, MinPooledPacket)
	pkt := binary.BigEndian.AppendUint32(nil, uint32(HeaderLen+len(data)))
	pkt = binary.BigEndian.AppendUint32(pkt, 0x40000001)
	pkt = append(pkt, FlagReply, 0, 0)
	pkt = append(pkt, data...)
	if !b.acquire(MinPooledPacket, nil) { // another connection is reading
		t.Fatal("acquire")
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := readPacket(bytes.NewReader(pkt), 0, b, stop)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("read a large packet while another was being read (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(stop)
	if err := <-done; err != ErrClosed {
		t.Fatalf("err %v, want ErrClosed", err)
	}
	b.release(MinPooledPacket)
	if _, err := readPacket(bytes.NewReader(pkt), 0, b, nil); err != nil {
		t.Fatal(err)
	}
	if len(b.reading) != 0 {
		t.Fatal("turn not given back")
	}
	// Small packets need no turn.
	b.acquire(MinPooledPacket, nil)
	small := binary.BigEndian.AppendUint32(nil, HeaderLen+3)
	small = binary.BigEndian.AppendUint32(small, 1)
	small = append(small, FlagReply, 0, 0, 7, 7, 7)
	if _, err := readPacket(bytes.NewReader(small), 0, b, nil); err != nil {
		t.Fatal(err)
	}
}

// SetIdle: a free buffer unused for the idle time is dropped when buffers
// are taken or given back, and by the timer when nothing else happens.
func TestBuffersIdle(t *testing.T) {
	b := NewBuffers(4, 0)
	now := time.Unix(1000, 0)
	b.mu.Lock()
	b.now = func() time.Time { return now }
	b.mu.Unlock()
	b.SetIdle(time.Hour) // the timer must not fire during this part
	old, fresh := make([]byte, 2*MinPooledPacket), make([]byte, 3*MinPooledPacket)
	b.Put(old)
	now = now.Add(40 * time.Minute)
	b.Put(fresh)
	now = now.Add(20 * time.Minute) // old: free an hour; fresh: 20 minutes
	if got := b.get(MinPooledPacket); &got[0] != &fresh[0] {
		t.Fatal("the buffer free for less than the idle time was not the one lent")
	}
	if b.Len() != 0 {
		t.Fatalf("%d free buffers: the one free for the whole idle time was kept", b.Len())
	}
	b.Put(fresh)
	now = now.Add(59 * time.Minute)
	if got := b.get(MinPooledPacket); &got[0] != &fresh[0] {
		t.Fatal("a buffer free for less than the idle time was dropped")
	}

	// With nothing taken or given back, the timer drops idle buffers.
	b = NewBuffers(4, 0)
	b.SetIdle(20 * time.Millisecond)
	b.Put(make([]byte, MinPooledPacket))
	if b.Len() != 1 {
		t.Fatalf("%d free buffers, want 1", b.Len())
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("an idle free buffer was still kept 10 s after its idle time of 20 ms")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
