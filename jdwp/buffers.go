package jdwp

import (
	"io"
	"slices"
	"sync"
	"time"
)

// MinPooledPacket is the smallest packet data a Buffers lends: below it a
// fresh allocation is cheap.
const MinPooledPacket = 64 << 10

// hugePage is the size of a transparent huge page (x86-64 and arm64 with
// 4 KiB pages): buffers of at least this size are made of whole ones.
const hugePage = 2 << 20

// bufferSize is the size of a new buffer for n bytes: room to spare, so
// that it also fits the next packets of about this size (reports vary
// from window to window): an eighth more, in multiples of
// MinPooledPacket; or, from 4 MiB on, a sixteenth more in whole huge
// pages, whose rounding adds 1 MiB on average. A huge page is resident as
// soon as any of it is touched, so smaller buffers keep small pages: only
// what a packet fills is resident.
func bufferSize(n int) (size int, huge bool) {
	if n+n/16 < 2*hugePage {
		return (n + n/8 + MinPooledPacket - 1) / MinPooledPacket * MinPooledPacket, false
	}
	return (n + n/16 + hugePage - 1) / hugePage * hugePage, true
}

// oversized tells whether a buffer of size size is too large to keep for
// packets of n bytes: more than twice what a new one would be. After a
// burst of large packets, such as every app reporting what piled up while
// its adb server restarted, the buffers kept then follow the packets of
// now rather than the largest ever read.
func oversized(size, n int) bool {
	want, _ := bufferSize(n)
	return size > 2*want
}

// Buffers lends the data buffers of large replies, such as the allocation
// report an app sends every window, so that reading one does not allocate
// a new buffer each time, and bounds how many large packets its
// connections read at once: a connection waits for its turn before it
// allocates for a large packet's data, so memory for packets being read
// stays bounded however many peers send at the same time. One Buffers may
// serve many connections; it is safe for concurrent use.
//
// Where the system has anonymous memory maps (Unix), a buffer is a map of
// its own rather than Go heap: the garbage collector's goal (twice what is
// live, by default) then counts none of the reports, and a buffer dropped
// goes back to the system at once rather than after collection. Such a
// buffer is only freed by Buffers, so everything lent must be given back
// with Put (see Conn.StartOwned); Lent counts what is out.
//
// It keeps at most a fixed number of free buffers, the largest ones, and
// (see SetIdle) only as long as they are used.
type Buffers struct {
	mu      sync.Mutex
	keep    int
	free    []freeBuffer
	lent    map[*byte]buffer // by the address of the last byte, out or free
	out     int              // buffers lent and not given back
	reading chan struct{}    // one token per large packet being read

	idle  time.Duration // a free buffer unused this long is dropped (0: never)
	now   func() time.Time
	timer *time.Timer // pending trim while buffers are free and idle > 0
}

// buffer is one buffer of a Buffers, out or free.
type buffer struct {
	b      []byte // the whole buffer
	mapped bool   // its own memory map, rather than Go heap
}

// freeBuffer is a buffer given back; Buffers.free holds them in the order
// they were given back.
type freeBuffer struct {
	b     []byte // the whole buffer
	since time.Time
}

// NewBuffers returns a Buffers that keeps at most keep free buffers and
// lets at most readers large packets be read at once (0: no bound).
func NewBuffers(keep, readers int) *Buffers {
	b := &Buffers{keep: keep, now: time.Now, lent: map[*byte]buffer{}}
	if readers > 0 {
		b.reading = make(chan struct{}, readers)
	}
	return b
}

// SetIdle makes b drop a free buffer that no packet has taken for d (0,
// the default: keep free buffers for ever). A burst of concurrent reads,
// such as every app of a farm reporting at once after its adb server
// restarts, then does not leave more memory held than the steady load
// uses. Free buffers are checked when buffers are taken and given back,
// and by a timer while any are free.
func (b *Buffers) SetIdle(d time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.idle = d
	b.trimLocked()
}

// trimLocked drops the buffers free for longer than idle and, if some
// are left, makes sure a timer will look again.
func (b *Buffers) trimLocked() {
	if b.idle <= 0 {
		return
	}
	now := b.now()
	kept := b.free[:0]
	for _, f := range b.free {
		if now.Sub(f.since) < b.idle {
			kept = append(kept, f)
		} else {
			b.dropLocked(f.b)
		}
	}
	clear(b.free[len(kept):])
	b.free = kept
	if len(b.free) > 0 && b.timer == nil {
		b.timer = time.AfterFunc(b.nextTrimLocked(now), func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.timer = nil
			b.trimLocked()
		})
	}
}

// nextTrimLocked is how long after now the first free buffer becomes
// idle: the timer fires then, so that a buffer is dropped when its idle
// time ends rather than up to twice that after it was given back.
func (b *Buffers) nextTrimLocked(now time.Time) time.Duration {
	d := b.idle
	for _, f := range b.free {
		d = min(d, f.since.Add(b.idle).Sub(now))
	}
	return max(d, time.Millisecond)
}

// dropLocked forgets buffer p and gives its memory back.
func (b *Buffers) dropLocked(p []byte) {
	k := key(p)
	if b.lent[k].mapped {
		freeMemory(p)
	}
	delete(b.lent, k)
}

// key identifies the buffer p is part of: the address of its last byte
// is the same for every part from any offset to its end.
func key(p []byte) *byte {
	p = p[:cap(p)]
	return &p[len(p)-1]
}

// acquire waits for a turn to read a large packet of n bytes; it returns
// false if stop closes first. release ends the turn.
func (b *Buffers) acquire(n int, stop <-chan struct{}) bool {
	if b == nil || b.reading == nil || n < MinPooledPacket {
		return true
	}
	select {
	case b.reading <- struct{}{}:
		return true
	case <-stop:
		return false
	}
}

func (b *Buffers) release(n int) {
	if b == nil || b.reading == nil || n < MinPooledPacket {
		return
	}
	<-b.reading
}

// get lends a buffer of length n: of the free ones large enough and not
// oversized for n, the one given back last; else a new one. Lending the
// one given back last keeps as few buffers in use as there are packets
// read at once, and the others, unused, are dropped once idle (SetIdle).
// (Lending the smallest large enough spread one read at a time over
// every free buffer, which kept them all: 29 MiB of free buffers in the
// soak, whose reads seldom overlap.) Below MinPooledPacket (or from a
// nil Buffers) it returns Go memory of its own, which Put ignores.
func (b *Buffers) get(n int) []byte {
	if p := b.take(n); p != nil {
		return p
	}
	return b.grow(nil, n)
}

// take lends a free buffer for n bytes as get does, or returns nil if
// none fits (or n is below MinPooledPacket, or b is nil).
func (b *Buffers) take(n int) []byte {
	if b == nil || n < MinPooledPacket {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trimLocked()
	for i := len(b.free) - 1; i >= 0; i-- {
		if f := b.free[i].b; cap(f) >= n && !oversized(cap(f), n) {
			b.free = slices.Delete(b.free, i, i+1)
			b.out++
			return f[:n]
		}
	}
	return nil
}

// grow lends a new buffer of length n holding a copy of old, and forgets
// old (nil, or a buffer grow lent and nothing else refers to), whose
// memory goes back at once rather than to the free ones. Below
// MinPooledPacket (or from a nil Buffers) it returns Go memory of its
// own, which Put ignores.
func (b *Buffers) grow(old []byte, n int) []byte {
	if b == nil || n < MinPooledPacket {
		p := make([]byte, n)
		copy(p, old)
		return p
	}
	size, huge := bufferSize(n)
	p, mapped := allocMemory(size, huge)
	if !mapped {
		p = make([]byte, size) // no map to be had: Go heap, as without maps
	}
	copy(p, old)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trimLocked()
	b.lent[key(p)] = buffer{p, mapped}
	if cap(old) > 0 && b.lent[key(old)].b != nil {
		b.dropLocked(old)
	} else {
		b.out++
	}
	return p[:n]
}

// read reads n bytes from r into a buffer lent by b (see get): a free one
// if one fits, else a new one that grows as bytes arrive, from
// MinPooledPacket and doubling, so that a peer that declares more than it
// sends costs only about what it sent. It returns the buffer (of length
// n once all arrived) and how many bytes arrived; on error the caller
// gives the buffer back with Put.
func (b *Buffers) read(r io.Reader, n int) (p []byte, got int, err error) {
	p = b.take(n)
	if p == nil {
		p = b.grow(nil, min(n, MinPooledPacket))
	}
	for {
		p = p[:min(cap(p), n)]
		m, err := io.ReadFull(r, p[got:])
		got += m
		if err != nil || got == n {
			return p, got, err
		}
		p = b.grow(p[:got], min(n, 2*cap(p)))
	}
}

// Put gives back a buffer b lent (or any part of it from any offset to
// its end, whose length is what the packet used) once nothing refers to
// it any more: it is kept for the next packets, or its memory is given
// back when it is far larger than the packet needed (see oversized) or
// when b already keeps as many as it may and all are larger. Anything
// else (a small packet's data, nil) is left to the garbage collector.
func (b *Buffers) Put(p []byte) {
	if b == nil || cap(p) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.lent[key(p)]
	if !ok {
		return
	}
	whole := e.b
	for _, f := range b.free {
		if &f.b[0] == &whole[0] {
			return // given back twice: it is free already
		}
	}
	b.out--
	defer b.trimLocked()
	if oversized(cap(whole), len(p)) {
		b.dropLocked(whole)
		return
	}
	f := freeBuffer{whole, b.now()}
	if len(b.free) < b.keep {
		b.free = append(b.free, f)
		return
	}
	small := -1
	for i, g := range b.free {
		if cap(g.b) < cap(whole) && (small < 0 || cap(g.b) < cap(b.free[small].b)) {
			small = i
		}
	}
	if small < 0 {
		b.dropLocked(whole)
		return
	}
	b.dropLocked(b.free[small].b)
	b.free = append(slices.Delete(b.free, small, small+1), f)
}

// Len is the number of free buffers kept.
func (b *Buffers) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.free)
}

// Lent is the number of buffers lent and not given back.
func (b *Buffers) Lent() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out
}

// Bytes returns the memory of the buffers lent and not given back, and of
// the free ones kept.
func (b *Buffers) Bytes() (inUse, free int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var all int64
	for _, e := range b.lent {
		all += int64(cap(e.b))
	}
	for _, f := range b.free {
		free += int64(cap(f.b))
	}
	return all - free, free
}

// Reading is the number of large packets being read.
func (b *Buffers) Reading() int { return len(b.reading) }
