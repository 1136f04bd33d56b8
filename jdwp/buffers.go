package jdwp

import "sync"

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
// a fixed number of free buffers, the largest ones.
type Buffers struct {
	mu      sync.Mutex
	keep    int
	free    [][]byte
	reading chan struct{} // one token per large packet being read
}

// NewBuffers returns a Buffers that keeps at most keep free buffers and
// lets at most readers large packets be read at once (0: no bound).
func NewBuffers(keep, readers int) *Buffers {
	b := &Buffers{keep: keep}
	if readers > 0 {
		b.reading = make(chan struct{}, readers)
	}
	return b
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
	best := -1
	for i, f := range b.free {
		if cap(f) >= n && (best < 0 || cap(f) < cap(b.free[best])) {
			best = i
		}
	}
	if best < 0 {
		b.mu.Unlock()
		// Room to spare, so that the buffer also fits the next packets
		// of about this size (reports vary from window to window).
		return make([]byte, n, (n+n/8+MinPooledPacket-1)/MinPooledPacket*MinPooledPacket)
	}
	f := b.free[best]
	b.free[best] = b.free[len(b.free)-1]
	b.free[len(b.free)-1] = nil
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
	if len(b.free) < b.keep {
		b.free = append(b.free, p)
		return
	}
	small := -1
	for i, f := range b.free {
		if cap(f) < cap(p) && (small < 0 || cap(f) < cap(b.free[small])) {
			small = i
		}
	}
	if small >= 0 {
		b.free[small] = p
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
