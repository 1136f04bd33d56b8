package transcript

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options say how Record records.
type Options struct {
	// Tool names what records, e.g. "alloctrack v0.9 doctor"; it goes in
	// the header so that a reader can say who wrote a file it refuses.
	Tool string
	// Anonymize replaces every device serial and each of Packages with a
	// stand-in of the same length, consistently (see anon.go).
	Anonymize bool
	// Packages are the package names to replace when anonymizing.
	Packages []string
}

// maxRequest bounds a smart-socket request (4 hex digits of length).
const maxRequest = 0xffff

// Record listens on 127.0.0.1:0 and forwards every connection made there
// to the adb server at upstream, writing a transcript of each to w. stop
// closes the listener and every connection, waits for them, and writes the
// trailer; only then is w's transcript complete.
func Record(upstream string, w io.Writer, opts Options) (addr string, stop func() error, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("transcript: %w", err)
	}
	p := &proxy{upstream: upstream, l: l, conns: map[net.Conn]struct{}{}}
	p.w = newWriter(w, time.Now())
	if opts.Anonymize {
		p.anon = newAnonymizer(opts.Packages)
	}
	if err := p.w.write(header(opts)); err != nil {
		l.Close()
		return "", nil, err
	}
	p.wg.Add(1)
	go p.accept()
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() { stopErr = p.stop() })
		return stopErr
	}
	return l.Addr().String(), stop, nil
}

func header(opts Options) Entry {
	h := Entry{Kind: KindHeader, Magic: Magic, Format: Format, Tool: opts.Tool,
		Started: time.Now().UTC().Format(time.RFC3339), Anonymized: opts.Anonymize}
	if h.Tool == "" {
		h.Tool = "unknown"
	}
	h.Kept = []string{"device properties and features (model, build, API level)",
		"process ids, process names and class names other than the packages replaced",
		"allocation records, heap profiles and timings"}
	if !opts.Anonymize {
		h.Kept = append(h.Kept, "device serials and package names")
	}
	return h
}

type proxy struct {
	upstream string
	l        net.Listener
	w        *writer
	anon     *anonymizer

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	nextID int
	closed bool
	wg     sync.WaitGroup
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.nextID++
		id := p.nextID
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.serve(id, c)
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
	}
}

func (p *proxy) stop() error {
	p.mu.Lock()
	p.closed = true
	cs := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	p.l.Close()
	for _, c := range cs {
		c.Close()
	}
	p.wg.Wait()
	return p.w.write(Entry{Kind: KindTrailer})
}

// serve forwards one client connection: the smart-socket requests one by
// one (each answered before the next), then the bytes both ways.
func (p *proxy) serve(id int, cc net.Conn) {
	defer cc.Close()
	p.w.write(Entry{Kind: KindOpen, Conn: id})
	sc, err := net.Dial("tcp", p.upstream)
	if err != nil {
		p.w.write(Entry{Kind: KindClose, Conn: id, Dir: FromDevice, Reason: "dial " + p.upstream + ": " + err.Error()})
		return
	}
	p.mu.Lock()
	p.conns[sc] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, sc)
		p.mu.Unlock()
		sc.Close()
	}()
	st := &connState{id: id}
	if !p.requests(st, cc, sc) {
		return
	}
	p.pipe(st, cc, sc)
}

// connState is what one connection has switched to so far.
type connState struct {
	id        int
	serial    string // after host:transport / host:tport
	transport bool
	service   string // the device service opened
	hostSvc   string // the host service asked, when not a transport
}

// requests relays requests until the connection carries a service's bytes.
// false: the connection ended (or failed) during the requests.
func (p *proxy) requests(st *connState, cc, sc net.Conn) bool {
	for {
		req, raw, err := readRequest(cc)
		if err != nil {
			p.w.write(Entry{Kind: KindClose, Conn: st.id, Dir: ToDevice})
			return false
		}
		p.learnRequest(req)
		rec := Entry{Kind: KindRequest, Conn: st.id, Request: p.anonString(req)}
		if st.transport {
			rec.Service, rec.Serial = true, p.anonString(st.serial)
			st.service = req
		}
		p.w.write(rec)
		if _, err := sc.Write(raw); err != nil {
			return false
		}
		status, reason, reply, err := readStatus(sc, req)
		if err != nil {
			p.w.write(Entry{Kind: KindClose, Conn: st.id, Dir: FromDevice})
			return false
		}
		p.w.write(Entry{Kind: KindStatus, Conn: st.id, Status: status, Reason: p.anonString(reason)})
		if _, err := cc.Write(reply); err != nil || status != "OKAY" {
			// After a FAIL the server closes the connection.
			p.w.write(Entry{Kind: KindClose, Conn: st.id, Dir: FromDevice})
			return false
		}
		if serial, ok := transportSerial(req); ok && !st.transport {
			st.transport, st.serial = true, serial
			continue
		}
		if !st.transport {
			st.hostSvc = req
		}
		return true
	}
}

// readRequest reads one request: 4 hex digits of length, then the text.
func readRequest(r io.Reader) (string, []byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", nil, err
	}
	n, err := strconv.ParseUint(string(h[:]), 16, 16)
	if err != nil {
		return "", nil, fmt.Errorf("transcript: request length %q is not hex", h[:])
	}
	raw := make([]byte, 4+n)
	copy(raw, h[:])
	if _, err := io.ReadFull(r, raw[4:]); err != nil {
		return "", nil, err
	}
	return string(raw[4:]), raw, nil
}

// readStatus reads the server's answer to req: OKAY (and, for host:tport,
// the 8-byte transport id), or FAIL and its hex-framed reason. reply is
// every byte read, to pass on.
func readStatus(r io.Reader, req string) (status, reason string, reply []byte, err error) {
	var st [4]byte
	if _, err := io.ReadFull(r, st[:]); err != nil {
		return "", "", nil, err
	}
	reply = st[:]
	switch string(st[:]) {
	case "OKAY":
		if strings.HasPrefix(req, "host:tport:") {
			var id [8]byte
			if _, err := io.ReadFull(r, id[:]); err != nil {
				return "", "", nil, err
			}
			return "OKAY", strconv.FormatUint(binary.LittleEndian.Uint64(id[:]), 10), append(reply, id[:]...), nil
		}
		return "OKAY", "", reply, nil
	case "FAIL":
		text, raw, err := readRequest(r)
		if err != nil {
			return "", "", nil, err
		}
		return "FAIL", text, append(reply, raw...), nil
	}
	return "", "", nil, errors.New("transcript: answer is neither OKAY nor FAIL")
}

// transportSerial says whether req switches the connection to a device,
// and which ("" when the server picks: host:transport-any, -usb, -local).
func transportSerial(req string) (string, bool) {
	for _, p := range []string{"host:transport:", "host:tport:serial:"} {
		if s, ok := strings.CutPrefix(req, p); ok {
			return s, true
		}
	}
	switch req {
	case "host:transport-any", "host:transport-usb", "host:transport-local",
		"host:tport:any", "host:tport:usb", "host:tport:local":
		return "", true
	}
	return "", strings.HasPrefix(req, "host:transport-id:") || strings.HasPrefix(req, "host:tport:transport-id:")
}
