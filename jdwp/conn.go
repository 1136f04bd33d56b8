package jdwp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Request ids. ddmlib numbers its requests from 0x40000000; VMs number the
// packets they originate from 0x10000000 (Dalvik, ART up to 8.1) or from
// 0x80000001 (ART 9+). Our ids stay in [firstID, lastID], so they never meet
// either.
const (
	firstID = 0x40000000
	lastID  = 0x7fffffff
)

// Options configure a Conn. The zero value is usable.
type Options struct {
	// MaxPacketSize bounds the declared length of an incoming packet.
	// Zero means DefaultMaxPacketSize.
	MaxPacketSize int
	// OnCommand receives every command packet the peer originates. It runs
	// on the reader goroutine: it must not block or call back into the Conn
	// in a way that waits for a reply.
	OnCommand func(Packet)
	// Buffers, if set, lends the data buffers of large replies to
	// requests made with StartOwned, and bounds how many large packets
	// are read at once (see Buffers).
	Buffers *Buffers
}

// Conn is a client JDWP connection. Create it with Open or NewConn.
type Conn struct {
	rwc  io.ReadWriteCloser
	max  int
	onCm func(Packet)
	bufs *Buffers

	wmu sync.Mutex // serialises writes: one packet, one Write
	buf []byte     // write buffer, reused under wmu

	mu      sync.Mutex
	nextID  uint32
	waiters map[uint32]*waiter
	err     error // first fatal error; set once

	dropped atomic.Uint64 // replies nobody waited for
	done    chan struct{} // closed when the reader has exited
	closing chan struct{} // closed when Close starts
	once    sync.Once
}

// waiter is a request waiting for its reply.
type waiter struct {
	ch chan Packet // capacity 1: one send, or a close, per waiter
	// owned: the reply's data is read into a buffer lent by Conn.bufs,
	// which whoever ends up with the packet gives back.
	owned bool
	// abandoned: the request gave up after the reader took it out of
	// the waiters, to read its reply; the reader then gives the data
	// back itself. Guarded by Conn.mu.
	abandoned bool
	// err, set before ch is closed, fails this request alone (its reply
	// was larger than the limit and was skipped).
	err error
	// first is when the reply's header arrived, set before ch is sent on.
	first time.Time
}

type firstByteKey struct{}

// WithFirstByte returns a context that, given to a request's wait, has
// the time its reply's header arrived stored in *at: the peer's time to
// answer, before the reply's data (possibly megabytes) is read.
func WithFirstByte(ctx context.Context, at *time.Time) context.Context {
	return context.WithValue(ctx, firstByteKey{}, at)
}

// Open performs the client handshake on rwc and starts the connection.
// Command packets the VM sends before its echo go to opts.OnCommand. On a
// failed handshake rwc is closed.
func Open(ctx context.Context, rwc io.ReadWriteCloser, opts Options) (*Conn, error) {
	max := opts.MaxPacketSize
	if max <= 0 {
		max = DefaultMaxPacketSize
	}
	if err := ClientHandshakeEarly(ctx, rwc, max, opts.OnCommand); err != nil {
		rwc.Close()
		return nil, err
	}
	return NewConn(rwc, opts), nil
}

// NewConn starts a connection on a stream whose handshake is already done.
func NewConn(rwc io.ReadWriteCloser, opts Options) *Conn {
	max := opts.MaxPacketSize
	if max <= 0 {
		max = DefaultMaxPacketSize
	}
	c := &Conn{
		rwc:     rwc,
		max:     max,
		onCm:    opts.OnCommand,
		bufs:    opts.Buffers,
		nextID:  firstID,
		waiters: make(map[uint32]*waiter),
		done:    make(chan struct{}),
		closing: make(chan struct{}),
	}
	go c.readLoop()
	return c
}

func (c *Conn) readLoop() {
	defer close(c.done)
	for {
		p, n, err := readHeader(c.rwc, c.max)
		var w *waiter
		var tooLarge *PacketTooLargeError
		if err != nil && errors.As(err, &tooLarge) {
			// Skip the packet's data and go on: the stream stays in step,
			// so the session can still turn tracking off. The request it
			// answers fails with the error.
			if _, derr := io.CopyN(io.Discard, c.rwc, int64(n)); derr == nil {
				if p.IsReply() {
					c.mu.Lock()
					if w := c.waiters[p.ID]; w != nil {
						delete(c.waiters, p.ID)
						w.err = tooLarge
						if !w.abandoned {
							close(w.ch)
						}
					}
					c.mu.Unlock()
				}
				c.dropped.Add(1)
				continue
			} else {
				err = fmt.Errorf("%w (skipping it: %w)", tooLarge, derr)
			}
		}
		if err == nil {
			if p.IsReply() {
				// The waiter is taken before the data is read, so that
				// an owned reply is read into a lent buffer.
				c.mu.Lock()
				w = c.waiters[p.ID]
				delete(c.waiters, p.ID)
				c.mu.Unlock()
				if w != nil {
					w.first = time.Now()
				}
			}
			err = readData(c.rwc, &p, n, c.bufs, w != nil && w.owned, c.closing)
		}
		if err != nil {
			select {
			case <-c.closing:
				c.fail(ErrClosed)
			default:
				if errors.Is(err, io.EOF) {
					err = fmt.Errorf("jdwp: peer closed the connection: %w", err)
				} else {
					err = fmt.Errorf("jdwp: reading packet: %w", err)
				}
				c.fail(err)
			}
			if w != nil {
				// Out of the waiters, so fail did not wake it.
				c.mu.Lock()
				if !w.abandoned {
					close(w.ch)
				}
				c.mu.Unlock()
			}
			c.rwc.Close()
			return
		}
		if !p.IsReply() {
			if c.onCm != nil {
				c.onCm(p)
			}
			continue
		}
		if w == nil {
			c.dropped.Add(1)
			continue
		}
		c.mu.Lock()
		if w.abandoned {
			c.mu.Unlock()
			c.dropped.Add(1)
			if w.owned {
				c.bufs.Put(p.Data)
			}
			continue
		}
		w.ch <- p // buffered, capacity 1, one send per waiter
		c.mu.Unlock()
	}
}

// fail records the first fatal error and wakes every waiter.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	ws := c.waiters
	c.waiters = nil
	c.mu.Unlock()
	for _, w := range ws {
		close(w.ch)
	}
}

// Err returns the error that ended the connection, or nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Done is closed once the connection has ended and its reader has exited.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Dropped counts replies that arrived with no request waiting for them:
// late replies to requests that gave up, or replies to packets sent with Send.
func (c *Conn) Dropped() uint64 { return c.dropped.Load() }

// Close closes the stream, fails every waiting request with ErrClosed and
// returns after the reader goroutine has exited. It is safe to call more
// than once and from several goroutines.
func (c *Conn) Close() error {
	c.once.Do(func() {
		close(c.closing)
		c.rwc.Close()
	})
	<-c.done
	return nil
}

// Start writes a command packet and returns a function that waits for its
// reply. The wait honours its context; a request that gives up removes its
// waiter, and its reply, should it come later, is dropped and counted.
// A reply with a non-zero error code is returned as *ReplyError.
func (c *Conn) Start(cmdSet, cmd uint8, data []byte) (wait func(context.Context) ([]byte, error), err error) {
	return c.start(cmdSet, cmd, data, false)
}

// StartOwned is Start for a request whose reply may be large, such as an
// allocation report: the reply's data is read into a buffer lent by the
// Conn's Buffers (if any, and if large), and belongs to the caller, who
// must give it back with Buffers.Put once done with it, whenever wait
// returns data, with or without an error. A reply that comes after the
// wait gave up is given back by the Conn.
func (c *Conn) StartOwned(cmdSet, cmd uint8, data []byte) (wait func(context.Context) ([]byte, error), err error) {
	return c.start(cmdSet, cmd, data, true)
}

func (c *Conn) start(cmdSet, cmd uint8, data []byte, owned bool) (wait func(context.Context) ([]byte, error), err error) {
	w := &waiter{ch: make(chan Packet, 1), owned: owned && c.bufs != nil}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	id := c.allocID()
	c.waiters[id] = w
	c.mu.Unlock()

	if err := c.write(&Packet{ID: id, CommandSet: cmdSet, Command: cmd, Data: data}); err != nil {
		c.abandon(id, w)
		return nil, err
	}
	return func(ctx context.Context) ([]byte, error) {
		select {
		case p, ok := <-w.ch:
			if !ok {
				if w.err != nil {
					return nil, w.err
				}
				return nil, c.Err()
			}
			if at, _ := ctx.Value(firstByteKey{}).(*time.Time); at != nil {
				*at = w.first
			}
			if p.ErrorCode != 0 {
				return p.Data, &ReplyError{Code: p.ErrorCode}
			}
			return p.Data, nil
		case <-ctx.Done():
			c.abandon(id, w)
			return nil, fmt.Errorf("jdwp: waiting for reply to %#x: %w", id, ctx.Err())
		}
	}, nil
}

// abandon gives up waiting for the reply to request id: it removes the
// waiter, or, if the reader has taken it to read the reply, leaves the
// reply to the reader; a reply delivered already is given back.
func (c *Conn) abandon(id uint32, w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiters != nil && c.waiters[id] == w {
		delete(c.waiters, id)
		return
	}
	w.abandoned = true
	select {
	case p, ok := <-w.ch:
		if ok {
			c.dropped.Add(1)
			if w.owned {
				c.bufs.Put(p.Data)
			}
		}
	default:
	}
}

// Request writes a command packet and waits for its reply.
func (c *Conn) Request(ctx context.Context, cmdSet, cmd uint8, data []byte) ([]byte, error) {
	wait, err := c.Start(cmdSet, cmd, data)
	if err != nil {
		return nil, err
	}
	return wait(ctx)
}

// Send writes a command packet and does not wait for a reply. If one comes,
// it is dropped and counted.
func (c *Conn) Send(cmdSet, cmd uint8, data []byte) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	id := c.allocID()
	c.mu.Unlock()
	return c.write(&Packet{ID: id, CommandSet: cmdSet, Command: cmd, Data: data})
}

// allocID returns the next request id; c.mu must be held.
func (c *Conn) allocID() uint32 {
	for {
		id := c.nextID
		if c.nextID == lastID {
			c.nextID = firstID
		} else {
			c.nextID++
		}
		if _, busy := c.waiters[id]; !busy {
			return id
		}
	}
}

// write sends one packet with one Write call. A failed write leaves the
// stream in an unknown state, so it ends the connection.
func (c *Conn) write(p *Packet) error {
	c.wmu.Lock()
	c.buf = AppendPacket(c.buf[:0], p)
	_, err := c.rwc.Write(c.buf)
	if cap(c.buf) > 64<<10 {
		c.buf = nil // do not pin a large buffer
	}
	c.wmu.Unlock()
	if err != nil {
		select {
		case <-c.closing:
			err = ErrClosed
		default:
			err = fmt.Errorf("jdwp: writing packet %#x: %w", p.ID, err)
		}
		c.fail(err)
		c.rwc.Close()
		return c.Err()
	}
	return nil
}
