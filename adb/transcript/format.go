package transcript

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"strconv"
	"sync"
	"time"
)

// File layout, format 1: UTF-8 lines (the file may be gzip-compressed as a
// whole; Read looks at the first two bytes).
//
//	line    := crc SP json LF
//	crc     := 8 lowercase hex digits, CRC-32C of json
//	json    := one Entry
//
// The first record is the header (kind "header"), the last the trailer
// (kind "trailer", with the number of records before it and the SHA-256 of
// every line before it). Records are numbered from 0 (Seq) in file order.

// Format is the transcript format this package writes and reads.
const Format = 1

// Magic names the file kind in the header.
const Magic = "alloctrack-transcript"

// Record kinds.
const (
	KindHeader  = "header"
	KindOpen    = "open"    // a client connected to the proxy
	KindRequest = "request" // a smart-socket request, client to server
	KindStatus  = "status"  // the server's OKAY or FAIL for it
	KindData    = "data"    // bytes after the requests, either way
	KindClose   = "close"   // one side ended the connection
	KindShell   = "shell"   // a shell v2 command's outcome, for people
	KindTrailer = "trailer"
)

// Directions of data.
const (
	ToDevice   = "to-device"   // client to server (and on to the device)
	FromDevice = "from-device" // server (or device) to client
)

// Entry is one line of a transcript.
type Entry struct {
	Seq  int    `json:"seq"`
	Kind string `json:"kind"`
	Conn int    `json:"conn,omitempty"`
	// T is the time since the recording started, in nanoseconds.
	T int64 `json:"t,omitempty"`

	// header
	Magic      string   `json:"magic,omitempty"`
	Format     int      `json:"format,omitempty"`
	Tool       string   `json:"tool,omitempty"`
	Started    string   `json:"started,omitempty"`
	Anonymized bool     `json:"anonymized,omitempty"`
	Kept       []string `json:"kept,omitempty"`

	// request, status
	Request string `json:"request,omitempty"`
	Serial  string `json:"serial,omitempty"`  // the device a device service went to
	Service bool   `json:"service,omitempty"` // the request went to the device
	Status  string `json:"status,omitempty"`  // OKAY or FAIL
	Reason  string `json:"reason,omitempty"`  // FAIL's text; tport's id

	// data, close
	Dir  string `json:"dir,omitempty"`
	Data []byte `json:"data,omitempty"`

	// shell
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	Exit   *int   `json:"exit,omitempty"`

	// trailer
	Records int    `json:"records,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writer numbers records, frames each as a checked line and keeps the
// running hash for the trailer. Safe for concurrent use.
type writer struct {
	mu    sync.Mutex
	w     io.Writer
	h     hash.Hash
	seq   int
	start time.Time
	err   error
}

func newWriter(w io.Writer, start time.Time) *writer {
	return &writer{w: w, h: sha256.New(), start: start}
}

func (w *writer) write(r Entry) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	r.Seq = w.seq
	if r.Kind != KindHeader && r.Kind != KindTrailer {
		r.T = max(time.Since(w.start).Nanoseconds(), 1)
	}
	if r.Kind == KindTrailer {
		r.Records = w.seq
		r.SHA256 = hex.EncodeToString(w.h.Sum(nil))
	}
	line := encodeLine(&r)
	w.h.Write(line)
	w.seq++
	if _, err := w.w.Write(line); err != nil {
		w.err = fmt.Errorf("transcript: writing record %d: %w", r.Seq, err)
	}
	return w.err
}

func encodeLine(r *Entry) []byte {
	j, _ := json.Marshal(r) // a Record always marshals
	line := make([]byte, 0, len(j)+10)
	line = fmt.Appendf(line, "%08x ", crc32Castagnoli(j))
	line = append(line, j...)
	return append(line, '\n')
}

// Errors Read returns, wrapped in a *FileError that says where.
var (
	ErrTruncated     = errors.New("transcript: truncated")
	ErrChecksum      = errors.New("transcript: checksum does not match: edited or damaged")
	ErrFormat        = errors.New("transcript: another format")
	ErrNotTranscript = errors.New("transcript: not an alloctrack transcript")
)

// FileError is a bad transcript: what is wrong (Err) and where (Line,
// 1-based, and Offset, the byte offset of that line in the uncompressed
// text).
type FileError struct {
	Line   int
	Offset int64
	Detail string
	Err    error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("%v: line %d (byte %d): %s", e.Err, e.Line, e.Offset, e.Detail)
}

func (e *FileError) Unwrap() error { return e.Err }

// lineReader yields the checked records of a transcript in order.
type lineReader struct {
	br     *bufio.Reader
	line   int
	offset int64
	h      hash.Hash
	seq    int
}

func newLineReader(r io.Reader) (*lineReader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, &FileError{Line: 1, Err: ErrNotTranscript, Detail: "gzip: " + err.Error()}
		}
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	return &lineReader{br: br, h: sha256.New()}, nil
}

func (lr *lineReader) fail(err error, format string, a ...any) *FileError {
	return &FileError{Line: lr.line, Offset: lr.offset, Err: err, Detail: fmt.Sprintf(format, a...)}
}

// next returns the next record, io.EOF at a clean end of the text.
func (lr *lineReader) next() (*Entry, error) {
	b, err := lr.br.ReadBytes('\n')
	if len(b) == 0 && err == io.EOF {
		return nil, io.EOF
	}
	lr.line++
	defer func() { lr.offset += int64(len(b)) }()
	if err != nil && err != io.EOF {
		return nil, lr.fail(ErrTruncated, "reading: %v", err)
	}
	if err == io.EOF {
		return nil, lr.fail(ErrTruncated, "the last line (%d bytes) has no end", len(b))
	}
	body := bytes.TrimSuffix(b, []byte{'\n'})
	if len(body) < 10 || body[8] != ' ' {
		if lr.line == 1 {
			return nil, lr.fail(ErrNotTranscript, "the first line is no checked record")
		}
		return nil, lr.fail(ErrChecksum, "no checksum before the record")
	}
	want, perr := strconv.ParseUint(string(body[:8]), 16, 32)
	j := body[9:]
	if got := crc32.Checksum(j, castagnoli); perr != nil || uint32(want) != got {
		return nil, lr.fail(ErrChecksum, "line says %q, content sums to %08x", body[:8], got)
	}
	r := new(Entry)
	if err := json.Unmarshal(j, r); err != nil {
		return nil, lr.fail(ErrChecksum, "record: %v", err)
	}
	if r.Seq != lr.seq {
		return nil, lr.fail(ErrChecksum, "record %d where %d belongs: a record was removed or moved", r.Seq, lr.seq)
	}
	if r.Kind == KindTrailer {
		if sum := hex.EncodeToString(lr.h.Sum(nil)); r.Records != lr.seq || r.SHA256 != sum {
			return nil, lr.fail(ErrChecksum, "trailer counts %d records (sha256 %.12s…), the file has %d (%.12s…)", r.Records, r.SHA256, lr.seq, sum)
		}
	}
	lr.h.Write(b)
	lr.seq++
	return r, nil
}

func crc32Castagnoli(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
