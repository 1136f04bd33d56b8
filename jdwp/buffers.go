package jdwp

import (
	"sync"
	"time"
)

// MinPooledPacket is the smallest packet data a Buffers recycles: below it
// a fresh allocation is cheap.
const MinPooledPacket = 64 << 10

// Buffers recycles the data buffers of large packets, such as the
// allocation report an app sends every window, so that reading one does
// not allocate a new buffer each time, and bounds how many large packets
// its connections read at once: a connection waits for its turn before it
// allocates for a large packet's data, so memory for packets being read
// stays bounded however many peers send at the same time. One Buffers may
// serve many connections; it is safe for concurrent use. It keeps at most
// a fixed number of free buffers, the largest ones, and (see SetIdle) only
// as long as they are used.
type Buffers struct {
	mu      sync.Mutex
	keep    int
	free    []freeBuffer
	reading chan struct{} // one token per large packet being read

	idle  time.Duration // a free buffer unused this long is dropped (0: never)
	now   func() time.Time
	timer *time.Timer // pending trim while buffers are free and idle > 0
}

type freeBuffer struct {
	b     []byte
	since time.Time // when it was given back
}

// NewBuffers returns a Buffers that keeps at most keep free buffers and
// lets at most readers large packets be read at once (0: no bound).
func NewBuffers(keep, readers int) *Buffers {
	b := &Buffers{keep: keep, now: time.Now}
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
		}
	}
	clear(b.free[len(kept):])
	b.free = kept
	if len(b.free) > 0 && b.timer == nil {
		b.timer = time.AfterFunc(b.idle, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.timer = nil
			b.trimLocked()
		})
	}
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

// get returns a buffer of length n: the smallest free one large enough,
// else a new one.
func (b *Buffers) get(n int) []byte {
	if b == nil || n < MinPooledPacket {
		return make([]byte, n)
	}
	b.mu.Lock()
	b.trimLocked()
	best := -1
	for i, f := range b.free {
		if cap(f.b) >= n && (best < 0 || cap(f.b) < cap(b.free[best].b)) {
			best = i
		}
	}
	if best < 0 {
		b.mu.Unlock()
		// Room to spare, so that the buffer also fits the next packets
		// of about this size (reports vary from window to window).
		return make([]byte, n, (n+n/8+MinPooledPacket-1)/MinPooledPacket*MinPooledPacket)
	}
	f := b.free[best].b
	b.free[best] = b.free[len(b.free)-1]
	b.free[len(b.free)-1] = freeBuffer{}
	b.free = b.free[:len(b.free)-1]
	b.mu.Unlock()
	return f[:n]
}

// Put gives back packet data (or any part of it starting anywhere) once
// nothing refers to it any more. Small buffers are left to the garbage
// collector; when full, the smallest buffer is dropped.
func (b *Buffers) Put(p []byte) {
	if b == nil || cap(p) < MinPooledPacket {
		return
	}
	p = p[:0]
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.trimLocked()
	f := freeBuffer{p, b.now()}
	if len(b.free) < b.keep {
		b.free = append(b.free, f)
		return
	}
	small := -1
	for i, g := range b.free {
		if cap(g.b) < cap(p) && (small < 0 || cap(g.b) < cap(b.free[small].b)) {
			small = i
		}
	}
	if small >= 0 {
		b.free[small] = f
	}
}

// Len is the number of free buffers kept.
func (b *Buffers) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.free)
}

// Reading is the number of large packets being read.
func (b *Buffers) Reading() int { return len(b.reading) }
