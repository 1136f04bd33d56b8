package jdwp

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/internal/testwait"
)

func TestBuffersReuse(t *testing.T) {
	b := NewBuffers(2, 0)
	small := b.get(100)
	if len(small) != 100 {
		t.Fatalf("len %d", len(small))
	}
	b.Put(small)
	if b.Len() != 0 || b.Lent() != 0 {
		t.Fatalf("a small buffer was kept (%d free) or counted as lent (%d)", b.Len(), b.Lent())
	}
	big := b.get(1 << 20)
	if b.Lent() != 1 {
		t.Fatalf("%d lent, want 1", b.Lent())
	}
	b.Put(big[8:]) // a part of it, as a chunk's data is
	if b.Len() != 1 || b.Lent() != 0 {
		t.Fatalf("%d free buffers, %d lent; want 1 and 0", b.Len(), b.Lent())
	}
	b.Put(big) // twice: ignored
	if b.Len() != 1 {
		t.Fatalf("%d free buffers after a buffer was given back twice, want 1", b.Len())
	}
	again := b.get(1<<20 - 8)
	if &again[0] != &big[0] {
		t.Fatal("the free buffer was not reused from its start")
	}
	if b.Len() != 0 {
		t.Fatal("a buffer lent twice")
	}
	b.Put(again)
	// Memory Buffers did not lend is not kept.
	b.Put(make([]byte, 4*MinPooledPacket))
	if b.Len() != 1 {
		t.Fatalf("%d free buffers, want 1: a buffer Buffers did not lend was kept", b.Len())
	}
	b.get(1 << 20)

	// Too small a free buffer is not used; when full, the smallest goes.
	const m = MinPooledPacket
	one, two, three := b.get(m), b.get(2*m), b.get(3*m)
	if cap(one) != 2*m || cap(two) != 3*m || cap(three) != 4*m {
		t.Fatalf("caps %d, %d, %d: want n + n/8 rounded up to MinPooledPacket", cap(one), cap(two), cap(three))
	}
	b.Put(one)
	b.Put(two)
	b.Put(three)
	if b.Len() != 2 {
		t.Fatalf("%d free buffers, want 2 (the bound)", b.Len())
	}
	if got := b.get(5 * m); cap(got) < 5*m+m/2 {
		t.Fatalf("cap %d: a free buffer too small was used, or a new one without room to spare", cap(got))
	}
	if got := b.get(m); cap(got) != 4*m {
		t.Fatalf("cap %d, want the one given back last (%d); the smallest of three should have been dropped", cap(got), 4*m)
	}
	if got := b.get(m); cap(got) != 3*m {
		t.Fatalf("cap %d, want the other one kept (%d)", cap(got), 3*m)
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
	b := NewBuffers(1, 0)
	lent := b.get(2 * MinPooledPacket)
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

// setClock makes b read the time from *now, which the test moves by hand.
func setClock(b *Buffers, now *time.Time) {
	b.mu.Lock()
	b.now = func() time.Time { return *now }
	b.mu.Unlock()
}

// SetIdle: a free buffer unused for the idle time is dropped when buffers
// are taken or given back, and by the timer when nothing else happens.
func TestBuffersIdle(t *testing.T) {
	b := NewBuffers(4, 0)
	now := time.Unix(1000, 0)
	setClock(b, &now)
	b.SetIdle(time.Hour) // the timer must not fire during this part
	old, fresh := b.get(2*MinPooledPacket), b.get(3*MinPooledPacket)
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
	b.Put(b.get(MinPooledPacket))
	if b.Len() != 1 {
		t.Fatalf("%d free buffers, want 1", b.Len())
	}
	deadline := time.Now().Add(testwait.Bound)
	for b.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("an idle free buffer was still kept %v after its idle time of 20 ms", testwait.Bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The trim timer is set for when the first free buffer's idle time ends,
// not a whole idle time after the last look: a buffer given back just
// after a look would otherwise be kept for up to twice its idle time.
func TestBuffersTrimWhenIdleEnds(t *testing.T) {
	b := NewBuffers(4, 0)
	now := time.Unix(1000, 0)
	setClock(b, &now)
	b.SetIdle(time.Hour) // the timer Put sets must not fire: it is stopped below
	first, second := b.get(MinPooledPacket), b.get(MinPooledPacket)
	b.Put(first)
	now = now.Add(40 * time.Minute)
	b.Put(second)
	b.mu.Lock()
	defer b.mu.Unlock()
	if got := b.nextTrimLocked(now); got != 20*time.Minute {
		t.Fatalf("next trim in %v, want 20m: when the first buffer given back has been free an hour", got)
	}
	now = now.Add(20 * time.Minute) // first: free an hour; second: 20 minutes
	b.timer.Stop()
	b.timer = nil
	b.trimLocked()
	if len(b.free) != 1 || &b.free[0].b[0] != &second[0] {
		t.Fatalf("%d free buffers after the first one's idle time, want the second only", len(b.free))
	}
	if got := b.nextTrimLocked(now); got != 40*time.Minute {
		t.Fatalf("next trim in %v, want 40m: when the second buffer has been free an hour", got)
	}
	b.timer.Stop()
	b.timer = nil
}

func TestBufferSize(t *testing.T) {
	const m, huge = MinPooledPacket, hugePage
	for _, c := range []struct {
		n, want int
		huge    bool
	}{
		{m, 2 * m, false},                   // an eighth more, in MinPooledPacket
		{1 << 20, 1<<20 + 2*m, false},       // 1.125 MiB exactly
		{2_400_000, 42 * m, false},          // a soak's report: small pages
		{2 * huge * 16 / 17, 68 * m, false}, // just under 4 MiB with a sixteenth more
		{2*huge*16/17 + 1, 2 * huge, true},  // 4 MiB: huge pages
		{9_400_000, 5 * huge, true},         // a maximum report: 10 MiB
		{5 * huge * 16 / 17, 5 * huge, true},
		{5*huge*16/17 + 2, 6 * huge, true},
	} {
		got, h := bufferSize(c.n)
		if got != c.want || h != c.huge || got < c.n {
			t.Errorf("bufferSize(%d) = %d, %v; want %d, %v", c.n, got, h, c.want, c.huge)
		}
	}
}

// A buffer more than twice the size a packet needs is not lent for it,
// and one given back far larger than its packet needed is dropped: after
// a burst of large reports, the buffers kept shrink back.
func TestBuffersDropOversized(t *testing.T) {
	b := NewBuffers(4, 0)
	big := b.get(8 << 20)
	b.Put(big[:4<<20]) // half: kept
	if b.Len() != 1 {
		t.Fatalf("%d free buffers, want 1", b.Len())
	}
	small := b.get(3 << 20)
	if &small[0] == &big[0] {
		t.Fatalf("a free buffer of %d bytes was lent for a packet of %d", cap(big), len(small))
	}
	b.Put(small)
	if b.Len() != 2 {
		t.Fatalf("%d free buffers, want 2", b.Len())
	}
	big = b.get(8 << 20)
	if cap(big) < 8<<20 {
		t.Fatalf("cap %d: the large free buffer was not lent", cap(big))
	}
	b.Put(big[:3<<20]) // 3 MiB used in a buffer of 10: dropped
	if b.Len() != 1 || b.Lent() != 0 {
		t.Fatalf("%d free, %d lent: an oversized buffer was kept", b.Len(), b.Lent())
	}
	if in, free := b.Bytes(); in != 0 || free != int64(cap(small)) {
		t.Fatalf("%d bytes in use, %d free; want 0 and %d", in, free, cap(small))
	}
}

// Packets read one at a time use one buffer, the one given back last, so
// that the other free buffers go unused and are dropped once idle.
func TestBuffersLendLastGivenBack(t *testing.T) {
	b := NewBuffers(8, 0)
	now := time.Unix(1000, 0)
	setClock(b, &now)
	b.SetIdle(time.Hour)
	const m = MinPooledPacket
	var out [][]byte
	for _, n := range []int{3 * m, 2 * m, 4 * m, 3 * m} {
		out = append(out, b.get(n))
	}
	for _, p := range out {
		b.Put(p)
	}
	last := out[len(out)-1]
	for i := 0; i < 12; i++ { // a packet every 10 minutes, sizes as above
		now = now.Add(10 * time.Minute)
		got := b.get([]int{2 * m, 3 * m, 3*m + 5}[i%3])
		if &got[0] != &last[0] {
			t.Fatalf("packet %d: lent a buffer of %d bytes, not the one given back last", i, cap(got))
		}
		b.Put(got)
	}
	if b.Len() != 1 {
		t.Fatalf("%d free buffers after two hours of one packet at a time, want 1", b.Len())
	}
}

// Bytes counts the memory of buffers out and free.
func TestBuffersBytes(t *testing.T) {
	b := NewBuffers(4, 0)
	x, y := b.get(MinPooledPacket), b.get(3*MinPooledPacket)
	b.get(100) // small: not lent
	if in, free := b.Bytes(); in != int64(cap(x)+cap(y)) || free != 0 {
		t.Fatalf("in use %d, free %d; want %d, 0", in, free, cap(x)+cap(y))
	}
	b.Put(y[5:])
	if in, free := b.Bytes(); in != int64(cap(x)) || free != int64(cap(y)) {
		t.Fatalf("in use %d, free %d; want %d, %d", in, free, cap(x), cap(y))
	}
	var none *Buffers
	if in, free := none.Bytes(); in != 0 || free != 0 {
		t.Fatal("a nil Buffers holds nothing")
	}
}
