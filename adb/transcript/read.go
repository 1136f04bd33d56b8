package transcript

import (
	"fmt"
	"io"
	"time"
)

// Transcript is a read transcript: its header and its connections in the
// order they were opened.
type Transcript struct {
	Header Entry
	Conns  []*Conn
}

// Conn is one connection a client made to the adb server.
type Conn struct {
	ID       int
	Opened   time.Duration
	Requests []Request
	// Serial and Service are the device service the connection opened
	// (after host:transport), empty for a host service.
	Serial, Service string
	// Chunks are the bytes after the last request, each way, in the order
	// the proxy saw them.
	Chunks []Chunk
	// ClosedBy is the side that ended the connection first: ToDevice (the
	// client) or FromDevice (the server or device), "" if unknown.
	ClosedBy string
}

// Request is one smart-socket request and the server's answer.
type Request struct {
	Text    string
	Service bool // a device service, sent after host:transport
	Status  string
	Reason  string
}

// Chunk is bytes one way at one time.
type Chunk struct {
	T    time.Duration
	Dir  string
	Data []byte
}

// Bytes is every byte that went one way after the requests.
func (c *Conn) Bytes(dir string) []byte {
	var b []byte
	for _, ch := range c.Chunks {
		if ch.Dir == dir {
			b = append(b, ch.Data...)
		}
	}
	return b
}

// Read reads a transcript written by Record (plain or gzip-compressed). A
// truncated file, an edited one and one of another format are refused
// with a *FileError wrapping ErrTruncated, ErrChecksum or ErrFormat.
func Read(r io.Reader) (*Transcript, error) {
	lr, err := newLineReader(r)
	if err != nil {
		return nil, err
	}
	h, err := lr.next()
	if err == io.EOF {
		return nil, lr.fail(ErrTruncated, "empty file, no header")
	}
	if err != nil {
		return nil, err
	}
	if err := checkHeader(lr, h); err != nil {
		return nil, err
	}
	t := &Transcript{Header: *h}
	byID := map[int]*Conn{}
	for {
		rec, err := lr.next()
		if err == io.EOF {
			return nil, lr.fail(ErrTruncated, "no trailer after record %d: the recording stopped early or the file was cut", lr.seq-1)
		}
		if err != nil {
			return nil, err
		}
		if rec.Kind == KindTrailer {
			return t, nil
		}
		if err := t.add(byID, rec); err != nil {
			return nil, lr.fail(ErrChecksum, "%v", err)
		}
	}
}

func checkHeader(lr *lineReader, h *Entry) error {
	if h.Kind != KindHeader || h.Magic != Magic {
		return lr.fail(ErrNotTranscript, "first record is %q, not a %s header", h.Kind, Magic)
	}
	if h.Format != Format {
		return lr.fail(ErrFormat, "recorded by %s, format %d; this is format %d", h.Tool, h.Format, Format)
	}
	return nil
}

func (t *Transcript) add(byID map[int]*Conn, r *Entry) error {
	if r.Kind == KindOpen {
		if byID[r.Conn] != nil {
			return fmt.Errorf("connection %d opened twice", r.Conn)
		}
		c := &Conn{ID: r.Conn, Opened: time.Duration(r.T)}
		byID[r.Conn] = c
		t.Conns = append(t.Conns, c)
		return nil
	}
	c := byID[r.Conn]
	if c == nil {
		return fmt.Errorf("record %d (%s) names connection %d, never opened", r.Seq, r.Kind, r.Conn)
	}
	switch r.Kind {
	case KindRequest:
		c.Requests = append(c.Requests, Request{Text: r.Request, Service: r.Service})
		if r.Service {
			c.Serial, c.Service = r.Serial, r.Request
		}
	case KindStatus:
		if len(c.Requests) == 0 {
			return fmt.Errorf("record %d: a status with no request", r.Seq)
		}
		q := &c.Requests[len(c.Requests)-1]
		q.Status, q.Reason = r.Status, r.Reason
	case KindData:
		c.Chunks = append(c.Chunks, Chunk{T: time.Duration(r.T), Dir: r.Dir, Data: r.Data})
	case KindClose:
		if c.ClosedBy == "" {
			c.ClosedBy = r.Dir
		}
	}
	return nil
}
