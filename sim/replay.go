package sim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/alloctrack/alloctrack/adb/transcript"
)

// Replay is a device that serves a transcript (adb/transcript) back through
// the real adb server: serve it with Adbd and attach it with `adb connect`.
// Its CNXN banner holds the model and features the transcript recorded;
// each device service opened gets the next recorded service of that name,
// whose device bytes go back in order, each once the client has sent as
// many bytes as it had when the device sent it. Timing: as fast as the
// client goes, not the recorded gaps (docs/doctor.md, "Recording and
// replaying").
//
// Names match exactly, or after what varies between runs: the device's
// serial (the recorded one and SetSerial's) and runs of 8 or more hex
// digits (random file names). A varying part learned this way is put back,
// recorded for live, in every later device byte where the two have the
// same length. A service the transcript does not hold gets an
// *UnknownServiceError, written on the stream and kept for Errors. What
// depends on when the client asks (pieces of a file read at any offset,
// polls asked more often than recorded) is answered by the rules in
// replay_files.go.
type Replay struct {
	banner    string
	api       int
	recSerial string

	mu       sync.Mutex
	services []*replayService
	files    map[string]*replayFile // by recorded path (replay_files.go)
	subst    [][2]string            // {recorded, live}, in the order learned
	errs     []error
	landmark int // the latest landmark replayed (replay_files.go), or -1
	streams  map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

type replayService struct {
	conn *transcript.Conn
	ok   bool // the recorded open succeeded
	used bool
}

// UnknownServiceError is a service the transcript does not hold (or holds
// fewer times than it was asked).
type UnknownServiceError struct {
	Service string
	Next    []string // the transcript's first services not yet replayed
}

func (e *UnknownServiceError) Error() string {
	return fmt.Sprintf("sim: replay: service %q is not in the transcript (not yet replayed there: %q)", e.Service, e.Next)
}

// NewReplay makes a device of t.
func NewReplay(t *transcript.Transcript) *Replay {
	r := &Replay{streams: map[net.Conn]struct{}{}, landmark: -1}
	var features string
	var model [3]string
	for _, c := range t.Conns {
		switch {
		case c.Service != "":
			r.services = append(r.services, &replayService{conn: c, ok: c.Requests[len(c.Requests)-1].Status == "OKAY"})
			if r.recSerial == "" {
				r.recSerial = c.Serial
			}
			if r.api == 0 {
				r.api = sdkOf(c)
			}
		case len(c.Requests) == 1 && strings.HasSuffix(c.Requests[0].Text, ":features"):
			features = hex4Text(c.Bytes(transcript.FromDevice))
		case len(c.Requests) == 1 && c.Requests[0].Text == "host:devices-l":
			model = productOf(hex4Text(c.Bytes(transcript.FromDevice)))
		}
	}
	r.files = learnFiles(t.Conns)
	r.banner = fmt.Sprintf("device::ro.product.name=%s;ro.product.model=%s;ro.product.device=%s", model[0], model[1], model[2])
	if features != "" {
		r.banner += ";features=" + features
	}
	return r
}

// Adbd returns an Adbd that serves the replay.
func (r *Replay) Adbd() *Adbd { return newAdbd(r) }

// SetSerial tells the replay the serial the adb server knows it by (after
// `adb connect HOST:PORT`, that address), so that names holding the
// recorded serial match.
func (r *Replay) SetSerial(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recSerial != "" && s != r.recSerial {
		r.learn(r.recSerial, s)
		r.learn(fileSafeName(r.recSerial), fileSafeName(s))
	}
}

// learn notes that rec in the recording is live now (r.mu held).
func (r *Replay) learn(rec, live string) {
	for _, p := range r.subst {
		if p[0] == rec && p[1] == live {
			return
		}
	}
	r.subst = append(r.subst, [2]string{rec, live})
}

// Errors returns every request the replay could not answer, in order.
func (r *Replay) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// Banner is the CNXN banner: the recorded model and features.
func (r *Replay) Banner() string { return r.banner }

func (r *Replay) maxPayload() uint32 {
	if r.api == 0 {
		return AdbMaxPayload
	}
	return AdbdMaxPayload(r.api)
}

// Disconnect ends every stream being replayed.
func (r *Replay) Disconnect() {
	r.mu.Lock()
	cs := make([]net.Conn, 0, len(r.streams))
	for c := range r.streams {
		cs = append(cs, c)
	}
	r.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Close ends every stream and waits for their goroutines.
func (r *Replay) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.Disconnect()
	r.wg.Wait()
}

// OpenService answers a device service with its recorded bytes.
func (r *Replay) OpenService(name string) (net.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("%w: replay closed", ErrRefused)
	}
	s := r.match(name)
	var piece []byte
	var perr error
	isPiece := false
	if s == nil {
		piece, perr, isPiece = r.readPiece(r.back(name))
	}
	if s != nil && !s.ok {
		return nil, fmt.Errorf("%w: %q: refused in the transcript", ErrRefused, name)
	}
	client, dev := net.Pipe()
	r.streams[dev] = struct{}{}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		switch {
		case isPiece && perr == nil:
			writeShellV2(dev, piece)
		case isPiece:
			r.fail(dev, name, perr)
		case s == nil:
			r.refuse(dev, name)
		default:
			r.play(dev, s.conn)
		}
		dev.Close()
		r.mu.Lock()
		delete(r.streams, dev)
		r.mu.Unlock()
	}()
	return client, nil
}

// varying matches what changes from run to run in a service name: random
// hex file names, nonces, timestamps.
var varying = regexp.MustCompile(`[0-9a-f]{8,}`)

// match finds the first unused recorded service for name (r.mu held) and
// marks it used, learning what varied.
func (r *Replay) match(name string) *replayService {
	back := r.back(name)
	if pollCmd.MatchString(back) {
		return r.poll(back)
	}
	for i, s := range r.services {
		if !s.used && (s.conn.Service == name || s.conn.Service == back) {
			s.used = true
			r.passed(i)
			return s
		}
	}
	if pieceCmd.MatchString(back) {
		return nil // its offsets are no hex name (readPiece)
	}
	want := varying.ReplaceAllString(back, "*")
	for i, s := range r.services {
		if s.used || varying.ReplaceAllString(s.conn.Service, "*") != want {
			continue
		}
		s.used = true
		r.passed(i)
		live, rec := varying.FindAllString(back, -1), varying.FindAllString(s.conn.Service, -1)
		for i := range min(len(live), len(rec)) {
			if live[i] != rec[i] {
				r.learn(rec[i], live[i])
			}
		}
		return s
	}
	return nil
}

// back is name with the recorded values put back for live ones (r.mu held).
func (r *Replay) back(name string) string {
	for _, p := range r.subst {
		name = strings.ReplaceAll(name, p[1], p[0])
	}
	return name
}

// refuse writes the error naming the service on its stream, and keeps it.
func (r *Replay) refuse(c net.Conn, name string) {
	r.mu.Lock()
	err := &UnknownServiceError{Service: name}
	for _, s := range r.services {
		if !s.used && len(err.Next) < 3 {
			err.Next = append(err.Next, s.conn.Service)
		}
	}
	r.mu.Unlock()
	r.fail(c, name, err)
}

// fail keeps err and writes it on the service's stream: as stderr and exit
// status 255 for shell protocol v2, as text otherwise.
func (r *Replay) fail(c net.Conn, name string, err error) {
	r.addErr(err)
	text := []byte(err.Error() + "\n")
	if strings.HasPrefix(name, "shell,v2") {
		b := binary.LittleEndian.AppendUint32([]byte{2}, uint32(len(text)))
		b = append(b, text...)
		c.Write(append(b, 3, 1, 0, 0, 0, 255))
		return
	}
	c.Write(text)
}

// play sends the recorded device bytes, each chunk once the client has sent
// as many bytes as the recording shows before it; then ends the stream, or
// waits for the client to, as the recording did. A client that sends other
// bytes than the recorded ones ends the stream with a *DivergedError.
func (r *Replay) play(c net.Conn, rc *transcript.Conn) {
	got := make(chan int, 1) // bytes from the client so far; closed at its end
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.readClient(c, rc, got)
	}()
	defer func() {
		c.Close()
		<-done
	}()
	sent, need := 0, 0
	for _, ch := range rc.Chunks {
		if ch.Dir == transcript.ToDevice {
			need += len(ch.Data)
			continue
		}
		for sent < need {
			n, ok := <-got
			if !ok {
				return // the client ended (or diverged) before the recorded one did
			}
			sent = n
		}
		if _, err := c.Write(r.substitute(ch.Data)); err != nil {
			return
		}
	}
	if rc.ClosedBy == transcript.ToDevice {
		for range got { // the client closed first in the recording
		}
	}
}

// DivergedError is a client that sent, on a replayed service, bytes the
// transcript does not hold.
type DivergedError struct {
	Service string
	Offset  int    // where the client's bytes first differ
	Got     []byte // up to 16 of the client's bytes from there
	Want    []byte // the recorded ones
}

func (e *DivergedError) Error() string {
	return fmt.Sprintf("sim: replay: %s: the client sent % x at byte %d, the transcript has % x", e.Service, e.Got, e.Offset, e.Want)
}

// readClient reads everything the client sends, checking it against the
// recording and putting the running count on got (the latest only); got
// closes at the end of the stream or at the first difference.
func (r *Replay) readClient(c net.Conn, rc *transcript.Conn, got chan int) {
	defer close(got)
	want := rc.Bytes(transcript.ToDevice)
	buf := make([]byte, 32<<10)
	total := 0
	loose := false // a name of another length came: framing around it differs
	for {
		n, err := c.Read(buf)
		if n > 0 {
			live := r.unsubstitute(buf[:n])
			loose = loose || len(live) != n
			rest := want[min(total, len(want)):]
			if i := firstDiff(live, rest); i >= 0 && !loose {
				r.addErr(&DivergedError{Service: rc.Service, Offset: total + i,
					Got: bytes.Clone(live[i:min(len(live), i+16)]), Want: bytes.Clone(rest[min(i, len(rest)):min(len(rest), i+16)])})
				c.Close()
				return
			}
			total += len(live) // in the recording's bytes
			select {
			case <-got:
			default:
			}
			got <- total
		}
		if err != nil {
			return
		}
	}
}

// firstDiff is the first index where live differs from want, or -1.
// Bytes past want's end are no difference: the recording may not hold what
// a client sent after the device had ended (shell v2's close of stdin).
func firstDiff(live, want []byte) int {
	for i, b := range live {
		if i >= len(want) {
			return -1
		}
		if want[i] != b {
			return i
		}
	}
	return -1
}

func (r *Replay) addErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// unsubstitute puts recorded values back for live ones.
func (r *Replay) unsubstitute(b []byte) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := b
	for _, p := range r.subst {
		if rec, live := []byte(p[0]), []byte(p[1]); bytes.Contains(out, live) {
			out = bytes.ReplaceAll(out, live, rec)
		}
	}
	return out
}

// substitute puts live values in for recorded ones of the same length.
func (r *Replay) substitute(b []byte) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := b
	for _, p := range r.subst {
		if rec, live := []byte(p[0]), []byte(p[1]); len(rec) == len(live) && bytes.Contains(out, rec) {
			out = bytes.ReplaceAll(out, rec, live)
		}
	}
	return out
}

func fileSafeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// hex4Text is the text of the first message framed as 4 hex digits of
// length, or "".
func hex4Text(b []byte) string {
	if len(b) < 4 {
		return ""
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil || int(n) > len(b)-4 {
		return ""
	}
	return string(b[4 : 4+n])
}

// productOf reads product:, model: and device: of the first device in a
// host:devices-l list.
func productOf(list string) [3]string {
	var out [3]string
	line, _, _ := strings.Cut(list, "\n")
	for _, f := range strings.Fields(line) {
		for i, key := range []string{"product:", "model:", "device:"} {
			if v, ok := strings.CutPrefix(f, key); ok {
				out[i] = v
			}
		}
	}
	return out
}

var sdkProp = regexp.MustCompile(`\[ro\.build\.version\.sdk\]: \[([0-9]+)\]`)

// sdkOf finds the API level in a recorded getprop (the whole listing, or
// the one property), or 0.
func sdkOf(c *transcript.Conn) int {
	if !strings.Contains(c.Service, "getprop") {
		return 0
	}
	out := c.Bytes(transcript.FromDevice)
	if strings.HasPrefix(c.Service, "shell,v2") {
		out = shellV2Stdout(out)
	}
	if m := sdkProp.FindSubmatch(out); m != nil {
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	if strings.HasSuffix(c.Service, "getprop ro.build.version.sdk") {
		n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		return n
	}
	return 0
}

// shellV2Stdout is the stdout of shell protocol v2 packets (id, u32
// little-endian length, data; id 1 is stdout).
func shellV2Stdout(b []byte) []byte {
	var out []byte
	for len(b) >= 5 {
		n := int(binary.LittleEndian.Uint32(b[1:5]))
		if n > len(b)-5 {
			break
		}
		if b[0] == 1 {
			out = append(out, b[5:5+n]...)
		}
		b = b[5+n:]
	}
	return out
}
