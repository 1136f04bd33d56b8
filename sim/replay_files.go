package sim

import (
	"encoding/binary"
	"fmt"
	"net"
	"regexp"
	"strconv"

	"github.com/alloctrack/alloctrack/adb/transcript"
)

// What a replay answers that no recorded service of that exact name holds,
// because it depends on when the client asks (docs/doctor.md, "doctor on
// its own replay"). These are the only rules of that kind:
//
//   - A piece of a file, `sh -c 'tail -c +N FILE | head -c L'` (how
//     alloctrack/heapprofd's session reads a growing trace file): its
//     offsets follow the timing of the reads. The replay rebuilds each
//     file from every recorded piece of it (and `cat FILE`) and answers a
//     piece at any offset with the bytes it covers, up to the largest size
//     the recording saw the file at; a range the recording never saw gets
//     an error naming it.
//   - A poll, asked more or fewer times than recorded (`cat
//     /proc/PID/cmdline`, `cat /proc/uptime`, `tail -c 1 FILE`, `ps -A
//     ...`): its answer depends on what came before (perfetto alive until
//     `kill`), so it gets the recorded answers of that name between the
//     latest landmark replayed (any other service) and the next, in turn,
//     then the last of them again (poll).
//
// Both match after the serial and hex names are put back (match).
var (
	pieceCmd = regexp.MustCompile(`^shell,v2,raw:sh -c 'tail -c \+([0-9]+) (\S+) \| head -c ([0-9]+)'$`)
	catCmd   = regexp.MustCompile(`^shell,v2,raw:cat (\S+)$`)
	pollCmd  = regexp.MustCompile(`^shell,v2,raw:(cat /proc/[0-9]+/cmdline|cat /proc/uptime|tail -c 1 \S+|ps -A\b.*)$`)
)

// replayFile is what the recording saw of one file: bytes at offsets
// where known[i], and the largest size a read found it at (-1: none).
type replayFile struct {
	data  []byte
	known []bool
	size  int64
}

// MissingRangeError is a read of a file at bytes the recording never saw.
type MissingRangeError struct {
	Path     string // as recorded
	From, To int64  // the first missing byte, and one past the range asked
}

func (e *MissingRangeError) Error() string {
	return fmt.Sprintf("sim: replay: %s: the transcript never saw bytes %d to %d of it", e.Path, e.From, e.To)
}

// learnFiles rebuilds every file the transcript read in full or in pieces.
func learnFiles(conns []*transcript.Conn) map[string]*replayFile {
	files := map[string]*replayFile{}
	for _, c := range conns {
		var path string
		var off, limit int64 = 0, -1
		if m := pieceCmd.FindStringSubmatch(c.Service); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			limit, _ = strconv.ParseInt(m[3], 10, 64)
			path, off = m[2], max(n-1, 0)
		} else if m := catCmd.FindStringSubmatch(c.Service); m != nil {
			path = m[1]
		} else {
			continue
		}
		out, errOut, code := shellV2Result(c.Bytes(transcript.FromDevice))
		if code != 0 || len(errOut) > 0 {
			continue
		}
		f := files[path]
		if f == nil {
			f = &replayFile{size: -1}
			files[path] = f
		}
		f.put(off, out)
		if limit < 0 || int64(len(out)) < limit {
			f.size = max(f.size, off+int64(len(out))) // the file ended there
		}
	}
	return files
}

func (f *replayFile) put(off int64, b []byte) {
	if end := off + int64(len(b)); end > int64(len(f.data)) {
		f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
		f.known = append(f.known, make([]bool, end-int64(len(f.known)))...)
	}
	copy(f.data[off:], b)
	for i := range b {
		f.known[off+int64(i)] = true
	}
}

// slice is the file's bytes from off, at most limit of them.
func (f *replayFile) slice(path string, off, limit int64) ([]byte, error) {
	hi := off + limit
	if f.size >= 0 && hi > f.size {
		hi = max(f.size, off)
	}
	for i := off; i < hi; i++ {
		if i >= int64(len(f.known)) || !f.known[i] {
			return nil, &MissingRangeError{Path: path, From: i, To: hi}
		}
	}
	return f.data[off:hi], nil
}

// readPiece answers a piece of a recorded file named by back (the service
// name with recorded values put back), if it is one (r.mu held).
func (r *Replay) readPiece(back string) (out []byte, err error, ok bool) {
	m := pieceCmd.FindStringSubmatch(back)
	if m == nil {
		return nil, nil, false
	}
	f := r.files[m[2]]
	if f == nil {
		return nil, nil, false
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	limit, _ := strconv.ParseInt(m[3], 10, 64)
	out, err = f.slice(m[2], max(n-1, 0), limit)
	return out, err, true
}

// passed notes that the recorded service i was replayed (r.mu held): a
// landmark is any but a piece of a file or a poll.
func (r *Replay) passed(i int) {
	if c := r.services[i].conn.Service; !pieceCmd.MatchString(c) && !pollCmd.MatchString(c) {
		r.landmark = max(r.landmark, i)
	}
}

// poll answers a poll named back (r.mu held) from the recorded ones
// between the latest landmark replayed and the next: each in turn, then
// the last of them again; with none there, the latest before.
func (r *Replay) poll(back string) *replayService {
	var last *replayService
	for _, s := range r.services[r.landmark+1:] {
		if c := s.conn.Service; !pieceCmd.MatchString(c) && !pollCmd.MatchString(c) {
			break // the next landmark
		}
		if s.conn.Service != back {
			continue
		}
		if !s.used {
			s.used = true
			return s
		}
		last = s
	}
	for i := r.landmark; last == nil && i >= 0; i-- {
		if r.services[i].conn.Service == back {
			last = r.services[i]
		}
	}
	return last
}

// writeShellV2 writes out as stdout packets and exit status 0.
func writeShellV2(c net.Conn, out []byte) {
	var b []byte
	for len(out) > 0 {
		n := min(len(out), 64<<10)
		b = binary.LittleEndian.AppendUint32(append(b, 1), uint32(n))
		b = append(b, out[:n]...)
		out = out[n:]
	}
	c.Write(append(b, 3, 1, 0, 0, 0, 0))
}

// shellV2Result is the stdout, stderr and exit status in shell protocol
// v2 packets (exit -1 if none).
func shellV2Result(b []byte) (out, errOut []byte, code int) {
	code = -1
	for len(b) >= 5 {
		n := int(binary.LittleEndian.Uint32(b[1:5]))
		if n > len(b)-5 {
			break
		}
		switch b[0] {
		case 1:
			out = append(out, b[5:5+n]...)
		case 2:
			errOut = append(errOut, b[5:5+n]...)
		case 3:
			if n == 1 {
				code = int(b[5])
			}
		}
		b = b[5+n:]
	}
	return out, errOut, code
}

// Unreplayed lists the recorded services, other than pieces of a file and
// polls (whose number depends on timing), that no client has asked for.
func (r *Replay) Unreplayed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.services {
		if c := s.conn.Service; !s.used && !pieceCmd.MatchString(c) && !pollCmd.MatchString(c) {
			out = append(out, c)
		}
	}
	return out
}
