package jdwp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/alloctrack/alloctrack/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeVM is the VM end of a net.Pipe. It does the handshake and then hands
// each packet the client writes to the test through a channel; failures are
// reported through errs, never t.Fatal from its goroutine.
type fakeVM struct {
	conn net.Conn
	in   chan Packet
	errs chan error
	done chan struct{}
}

func startVM(t *testing.T, opts ...Options) (*Conn, *fakeVM, []Packet) {
	t.Helper()
	client, vmSide := net.Pipe()
	vm := &fakeVM{conn: vmSide, in: make(chan Packet, 64), errs: make(chan error, 4), done: make(chan struct{})}
	go func() {
		defer close(vm.done)
		defer close(vm.in)
		if err := ServerHandshake(context.Background(), vmSide); err != nil {
			vm.errs <- err
			return
		}
		for {
			p, err := ReadPacket(vmSide, 0)
			if err != nil {
				return
			}
			vm.in <- p
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound)
	defer cancel()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	c, err := Open(ctx, client, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		vmSide.Close()
		<-vm.done
		select {
		case err := <-vm.errs:
			t.Errorf("fake VM: %v", err)
		default:
		}
	})
	return c, vm, nil
}

func (vm *fakeVM) next(t *testing.T) Packet {
	t.Helper()
	select {
	case p, ok := <-vm.in:
		if !ok {
			t.Fatal("fake VM: stream ended")
		}
		return p
	case <-time.After(testwait.Bound):
		t.Fatal("fake VM: no packet")
	}
	return Packet{}
}

func (vm *fakeVM) send(t *testing.T, p Packet) {
	t.Helper()
	if err := WritePacket(vm.conn, &p); err != nil {
		t.Fatalf("fake VM write: %v", err)
	}
}

func TestInterleavedRepliesAndVMPackets(t *testing.T) {
	var mu sync.Mutex
	var vmPackets []Packet
	client, vmSide := net.Pipe()
	defer vmSide.Close()
	go func() {
		ServerHandshake(context.Background(), vmSide)
	}()
	c, err := Open(context.Background(), client, Options{OnCommand: func(p Packet) {
		mu.Lock()
		vmPackets = append(vmPackets, p)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const n = 8
	type result struct {
		i    int
		data []byte
		err  error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound)
			defer cancel()
			d, err := c.Request(ctx, 0xC7, 1, []byte{byte(i)})
			results <- result{i, d, err}
		}()
	}
	// Read all requests, then reply in reverse order with VM packets between.
	var reqs []Packet
	for range n {
		p, err := ReadPacket(vmSide, 0)
		if err != nil {
			t.Fatal(err)
		}
		if p.ID < firstID || p.ID > lastID || p.CommandSet != 0xC7 || p.Command != 1 {
			t.Fatalf("request %+v", p)
		}
		reqs = append(reqs, p)
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		WritePacket(vmSide, &Packet{ID: 0x80000001 + uint32(i), CommandSet: 0xC7, Command: 1, Data: []byte("vm")})
		WritePacket(vmSide, &Packet{ID: reqs[i].ID, Flags: FlagReply, Data: append([]byte("re"), reqs[i].Data...)})
	}
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatalf("request %d: %v", r.i, r.err)
		}
		if !bytes.Equal(r.data, []byte{'r', 'e', byte(r.i)}) {
			t.Fatalf("request %d got reply %q", r.i, r.data)
		}
	}
	mu.Lock()
	got := len(vmPackets)
	mu.Unlock()
	// The last VM packet precedes the last reply, so all n have arrived.
	if got != n {
		t.Fatalf("%d VM packets delivered, want %d", got, n)
	}
	if c.Dropped() != 0 {
		t.Fatalf("dropped %d", c.Dropped())
	}
}

func TestRequestIDsAreUniqueAndInRange(t *testing.T) {
	c, vm, _ := startVM(t)
	seen := map[uint32]bool{}
	for i := range 100 {
		if err := c.Send(0xC7, 1, nil); err != nil {
			t.Fatal(err)
		}
		p := vm.next(t)
		if seen[p.ID] || p.ID < firstID || p.ID > lastID {
			t.Fatalf("packet %d: id %#x reused or out of range", i, p.ID)
		}
		seen[p.ID] = true
	}
}

func TestIDWrapsWithinRange(t *testing.T) {
	c := &Conn{nextID: lastID, waiters: map[uint32]*waiter{firstID: nil}}
	if id := c.allocID(); id != lastID {
		t.Fatalf("id %#x", id)
	}
	// firstID is busy, so the next is firstID+1.
	if id := c.allocID(); id != firstID+1 {
		t.Fatalf("after wrap id %#x, want %#x", id, firstID+1)
	}
}

func TestReplyErrorCode(t *testing.T) {
	c, vm, _ := startVM(t)
	go func() {
		p, ok := <-vm.in
		if ok {
			WritePacket(vm.conn, &Packet{ID: p.ID, Flags: FlagReply, ErrorCode: 99})
		}
	}()
	_, err := c.Request(context.Background(), 1, 1, nil)
	var re *ReplyError
	if !errors.As(err, &re) || re.Code != 99 {
		t.Fatalf("err = %v, want ReplyError 99", err)
	}
}

func TestContextCancelRemovesWaiterAndLateReplyIsDropped(t *testing.T) {
	c, vm, _ := startVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Request(ctx, 0xC7, 1, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	p := vm.next(t)
	c.mu.Lock()
	waiting := len(c.waiters)
	c.mu.Unlock()
	if waiting != 0 {
		t.Fatalf("%d waiters left after cancel", waiting)
	}
	vm.send(t, Packet{ID: p.ID, Flags: FlagReply})
	// A following request still works, and the late reply was counted.
	go func() {
		q := <-vm.in
		WritePacket(vm.conn, &Packet{ID: q.ID, Flags: FlagReply, Data: []byte{1}})
	}()
	if _, err := c.Request(context.Background(), 0xC7, 1, nil); err != nil {
		t.Fatal(err)
	}
	if c.Dropped() != 1 {
		t.Fatalf("dropped = %d, want 1", c.Dropped())
	}
}

func TestCloseFailsWaitersAndIsIdempotent(t *testing.T) {
	c, vm, _ := startVM(t)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := c.Request(context.Background(), 0xC7, 1, nil)
			errs <- err
		}()
	}
	for range 3 {
		vm.next(t)
	}
	c.Close()
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if _, err := c.Request(context.Background(), 1, 1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("request after close: %v", err)
	}
	if err := c.Send(1, 1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

func TestPeerCloseKeepsFirstError(t *testing.T) {
	c, vm, _ := startVM(t)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Request(context.Background(), 0xC7, 1, nil)
		errc <- err
	}()
	vm.next(t)
	// Half a packet, then close: the reader sees an unexpected EOF.
	vm.conn.Write([]byte{0, 0, 0, 20, 0, 0})
	vm.conn.Close()
	err := <-errc
	if err == nil || errors.Is(err, ErrClosed) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want unexpected EOF", err)
	}
	<-c.Done()
	if !errors.Is(c.Err(), io.ErrUnexpectedEOF) {
		t.Fatalf("Err() = %v", c.Err())
	}
}

// TestTooLargeReplyIsSkipped: a reply over the limit is read past, not
// kept: its request fails with *PacketTooLargeError and the connection
// goes on (so a session can still turn tracking off). A stream that ends
// inside the skipped data ends the connection with that error.
func TestTooLargeReplyIsSkipped(t *testing.T) {
	client, vmSide := net.Pipe()
	defer vmSide.Close()
	go func() {
		if err := ServerHandshake(context.Background(), vmSide); err != nil {
			return
		}
		for i := 0; ; i++ {
			p, err := ReadPacket(vmSide, 0)
			if err != nil {
				return
			}
			data := []byte("ok")
			if i == 0 {
				data = make([]byte, 245) // 256 bytes with the header
			}
			vmSide.Write(AppendPacket(nil, &Packet{ID: p.ID, Flags: FlagReply, Data: data}))
		}
	}()
	c, err := Open(context.Background(), client, Options{MaxPacketSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Request(ctx5(t), 1, 1, nil)
	var tl *PacketTooLargeError
	if !errors.As(err, &tl) || tl.Length != 256 || tl.Max != 100 {
		t.Fatalf("first request: %v, want PacketTooLargeError{256, 100}", err)
	}
	if b, err := c.Request(ctx5(t), 1, 1, nil); err != nil || string(b) != "ok" {
		t.Fatalf("second request: %q %v", b, err)
	}

	client2, vm2 := net.Pipe()
	defer vm2.Close()
	go ServerHandshake(context.Background(), vm2)
	c2, err := Open(context.Background(), client2, Options{MaxPacketSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	go func() {
		vm2.Write([]byte{0, 0, 1, 0, 0, 0, 0, 1, 0x80, 0, 0, 1, 2, 3})
		vm2.Close()
	}()
	<-c2.Done()
	if !errors.As(c2.Err(), &tl) || tl.Length != 256 {
		t.Fatalf("cut inside the skipped data: Err() = %v", c2.Err())
	}
}

// recorder counts Write calls.
type recorder struct {
	io.ReadWriter
	writes [][]byte
}

func (r *recorder) Write(b []byte) (int, error) {
	r.writes = append(r.writes, append([]byte(nil), b...))
	return r.ReadWriter.Write(b)
}

func TestHandshake(t *testing.T) {
	t.Run("one write, echo accepted", func(t *testing.T) {
		var in bytes.Buffer
		in.WriteString(Handshake)
		rec := &recorder{ReadWriter: &struct {
			io.Reader
			io.Writer
		}{&in, io.Discard}}
		if err := ClientHandshake(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		if len(rec.writes) != 1 || string(rec.writes[0]) != Handshake {
			t.Fatalf("writes %q, want one write of the handshake", rec.writes)
		}
	})
	t.Run("bad echo", func(t *testing.T) {
		rw := &struct {
			io.Reader
			io.Writer
		}{bytes.NewReader([]byte("JDWP-Handshak!")), io.Discard}
		if err := ClientHandshake(context.Background(), rw); !errors.Is(err, ErrBadHandshake) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("peer closes before echo", func(t *testing.T) {
		rw := &struct {
			io.Reader
			io.Writer
		}{bytes.NewReader([]byte("JDWP")), io.Discard}
		if err := ClientHandshake(context.Background(), rw); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no echo: context deadline", func(t *testing.T) {
		client, vmSide := net.Pipe()
		defer vmSide.Close()
		go io.Copy(io.Discard, vmSide)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := Open(ctx, client, Options{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}
	})
	t.Run("server rejects bad handshake", func(t *testing.T) {
		rw := &struct {
			io.Reader
			io.Writer
		}{bytes.NewReader([]byte("GET / HTTP/1.1")), io.Discard}
		if err := ServerHandshake(context.Background(), rw); !errors.Is(err, ErrBadHandshake) {
			t.Fatalf("err = %v", err)
		}
	})
}

// lentEventually waits until bufs has n buffers out.
func lentEventually(t *testing.T, bufs *Buffers, n int) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound)
	for bufs.Lent() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d buffers lent, want %d", bufs.Lent(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A large reply to StartOwned is read into a buffer lent by Buffers and
// belongs to the caller, error code or not; a large reply to Start, or a
// large packet the VM sends on its own, is not lent.
func TestStartOwnedLendsLargeReplies(t *testing.T) {
	bufs := NewBuffers(2, 1)
	var cmds []Packet
	c, vm, _ := startVM(t, Options{Buffers: bufs, OnCommand: func(p Packet) { cmds = append(cmds, p) }})
	big := bytes.Repeat([]byte{7}, MinPooledPacket+1)
	for _, code := range []uint16{0, 13} {
		wait, err := c.StartOwned(0xC7, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := vm.next(t)
		vm.send(t, Packet{ID: 0x10000001, CommandSet: 0xC7, Command: 1, Data: big}) // the VM's own
		vm.send(t, Packet{ID: p.ID, Flags: FlagReply, ErrorCode: code, Data: big})
		data, err := wait(context.Background())
		if (err != nil) != (code != 0) || !bytes.Equal(data, big) {
			t.Fatalf("error code %d: err %v, %d bytes", code, err, len(data))
		}
		if bufs.Lent() != 1 {
			t.Fatalf("error code %d: %d buffers lent, want 1 (the reply's)", code, bufs.Lent())
		}
		bufs.Put(data)
	}
	wait, err := c.Start(0xC7, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := vm.next(t)
	vm.send(t, Packet{ID: p.ID, Flags: FlagReply, Data: big})
	if data, err := wait(context.Background()); err != nil || len(data) != len(big) {
		t.Fatalf("Start: err %v, %d bytes", err, len(data))
	}
	if bufs.Lent() != 0 || len(cmds) != 2 {
		t.Fatalf("%d buffers lent, want 0; %d VM packets, want 2", bufs.Lent(), len(cmds))
	}
}

// An owned reply whose request gave up is given back by the Conn, whether
// it came after the wait ended or while it was being read; so is one cut
// off by the end of the stream.
func TestOwnedRepliesNobodyTakesAreGivenBack(t *testing.T) {
	bufs := NewBuffers(2, 1)
	c, vm, _ := startVM(t, Options{Buffers: bufs})
	big := bytes.Repeat([]byte{7}, 2*MinPooledPacket)
	reply := func(id uint32) []byte {
		return AppendPacket(nil, &Packet{ID: id, Flags: FlagReply, Data: big})
	}

	// Late: the wait ended before the reply's header came.
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := c.StartOwned(0xC7, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := vm.next(t)
	cancel()
	if _, err := wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want canceled", err)
	}
	vm.send(t, Packet{ID: p.ID, Flags: FlagReply, Data: big})

	// Mid-read: the reader has taken the request when the wait ends.
	ctx, cancel = context.WithCancel(context.Background())
	wait, err = c.StartOwned(0xC7, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	p = vm.next(t)
	b := reply(p.ID)
	if _, err := vm.conn.Write(b[:HeaderLen+100]); err != nil {
		t.Fatal(err)
	}
	lentEventually(t, bufs, 1)
	cancel()
	if _, err := wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want canceled", err)
	}
	if _, err := vm.conn.Write(b[HeaderLen+100:]); err != nil {
		t.Fatal(err)
	}
	lentEventually(t, bufs, 0)

	// Delivered, but the wait ended before taking it (abandon, as the
	// wait calls it, without the race between the two select cases).
	if _, err = c.StartOwned(0xC7, 1, nil); err != nil {
		t.Fatal(err)
	}
	p = vm.next(t)
	c.mu.Lock()
	w := c.waiters[p.ID]
	c.mu.Unlock()
	vm.send(t, Packet{ID: p.ID, Flags: FlagReply, Data: big})
	deadline := time.Now().Add(testwait.Bound)
	for len(w.ch) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reply was not delivered")
		}
		time.Sleep(time.Millisecond)
	}
	if bufs.Lent() != 1 {
		t.Fatalf("%d buffers lent, want 1", bufs.Lent())
	}
	c.abandon(p.ID, w)
	if bufs.Lent() != 0 || len(w.ch) != 0 {
		t.Fatalf("%d buffers lent, %d replies left: the delivered reply was not given back", bufs.Lent(), len(w.ch))
	}
	if c.Dropped() != 3 {
		t.Fatalf("dropped = %d, want 3", c.Dropped())
	}

	// Cut off: the stream ends inside the reply.
	wait, err = c.StartOwned(0xC7, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	p = vm.next(t)
	b = reply(p.ID)
	if _, err := vm.conn.Write(b[:HeaderLen+100]); err != nil {
		t.Fatal(err)
	}
	lentEventually(t, bufs, 1)
	vm.conn.Close()
	if data, err := wait(context.Background()); err == nil || data != nil {
		t.Fatalf("a cut-off reply: err %v, %d bytes", err, len(data))
	}
	if bufs.Lent() != 0 || bufs.Reading() != 0 {
		t.Fatalf("%d buffers lent, %d reads under way after the stream ended", bufs.Lent(), bufs.Reading())
	}
}

// TestHandshakeEarlyPackets: an ART 5-11 VM may send a DDM packet (an
// APNM) before its handshake echo; the packet is delivered and the
// connection opens. A reply, a short length or too many packets before
// the echo are still a bad handshake.
func TestHandshakeEarlyPackets(t *testing.T) {
	apnm := AppendPacket(nil, &Packet{ID: 0x40000001, CommandSet: 0xc7, Command: 1, Data: []byte("APNM\x00\x00\x00\x04abcd")})
	var got []Packet
	rw := &struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(append(append(slices.Clone(apnm), apnm...), Handshake...)), io.Discard}
	if err := ClientHandshakeEarly(context.Background(), rw, 1<<20, func(p Packet) { got = append(got, p) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].CommandSet != 0xc7 || got[0].Command != 1 || string(got[0].Data) != "APNM\x00\x00\x00\x04abcd" || got[1].ID != 0x40000001 {
		t.Fatalf("early packets %+v", got)
	}
	reply := AppendPacket(nil, &Packet{ID: 1, Flags: FlagReply, Data: []byte("0123456789")})
	var many []byte
	for range MaxEarlyPackets + 1 {
		many = append(many, apnm...)
	}
	for name, in := range map[string][]byte{
		"a reply before the echo":  append(reply, Handshake...),
		"a short length":           append([]byte{0, 0, 0, 3, 0, 0, 0, 1, 0, 0xc7, 1, 0, 0, 0}, Handshake...),
		"too many packets":         append(many, Handshake...),
		"a packet over the limit":  append([]byte{0x7f, 0, 0, 0, 0, 0, 0, 1, 0, 0xc7, 1, 0, 0, 0}, Handshake...),
		"a packet cut before echo": apnm[:20],
	} {
		rw := &struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), io.Discard}
		if err := ClientHandshakeEarly(context.Background(), rw, 1<<20, nil); err == nil {
			t.Errorf("%s: handshake succeeded", name)
		}
	}
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound)
	t.Cleanup(cancel)
	return ctx
}
