package transcript

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	secretSerial = "emulator-5554"
	secretPkg    = "com.example.secret"
)

// fakeServer is a scripted adb server: host:devices-l, host:transport:S
// then shell,v2,raw:… or jdwp:42; anything else is refused.
func fakeServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serveFake(c)
			}()
		}
	}()
	return l.Addr().String()
}

func hex4(s string) string { return fmt.Sprintf("%04x%s", len(s), s) }

func shellPacket(id byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint32([]byte{id}, uint32(len(s))), s...)
}

// apnm is a JDWP command packet carrying a DDM APNM chunk: the process
// name in UTF-16BE after its length in characters.
func apnm(name string) []byte {
	u := utf16be(name)
	chunk := binary.BigEndian.AppendUint32([]byte("APNM"), uint32(4+len(u)))
	chunk = binary.BigEndian.AppendUint32(chunk, uint32(len(name)))
	chunk = append(chunk, u...)
	p := binary.BigEndian.AppendUint32(nil, uint32(11+len(chunk)))
	p = binary.BigEndian.AppendUint32(p, 0x40000001)
	p = append(p, 0, 0xc7, 1)
	return append(p, chunk...)
}

func serveFake(c net.Conn) {
	transport := false
	for {
		req, _, err := readRequest(c)
		if err != nil {
			return
		}
		switch {
		case req == "host:devices-l":
			io.WriteString(c, "OKAY"+hex4(secretSerial+"          device product:p model:M device:d transport_id:1\n"))
			return
		case req == "host:transport:"+secretSerial && !transport:
			io.WriteString(c, "OKAY")
			transport = true
		case transport && req == "shell,v2,raw:pm path "+secretPkg:
			io.WriteString(c, "OKAY")
			b := shellPacket(1, "package:/data/app/"+secretPkg+"-1/base.apk\n")
			b = append(b, shellPacket(2, "serial "+secretSerial+"\n")...)
			c.Write(append(b, shellPacket(3, "\x00")...))
			return
		case transport && req == "jdwp:42":
			io.WriteString(c, "OKAY")
			var hs [14]byte
			io.ReadFull(c, hs[:])
			c.Write(append(hs[:], apnm(secretPkg)...))
			io.Copy(io.Discard, c) // until the client closes
			return
		default:
			io.WriteString(c, "FAIL"+hex4("unknown service "+req))
			return
		}
	}
}

// session runs the client side through the proxy at addr and returns what
// the client received on each connection.
func session(t *testing.T, addr string) []string {
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(time.Minute))
		return c
	}
	var got []string
	run := func(reqs []string, send string, closeFirst bool) {
		c := dial()
		defer c.Close()
		for _, r := range reqs {
			io.WriteString(c, hex4(r))
		}
		io.WriteString(c, send)
		var b []byte
		if closeFirst {
			b = make([]byte, len("OKAY")*len(reqs)+14+len(apnm(secretPkg)))
			io.ReadFull(c, b)
		} else {
			b, _ = io.ReadAll(c)
		}
		got = append(got, string(b))
	}
	run([]string{"host:devices-l"}, "", false)
	run([]string{"host:transport:" + secretSerial, "shell,v2,raw:pm path " + secretPkg}, "", false)
	run([]string{"host:transport:" + secretSerial, "jdwp:42"}, "JDWP-Handshake", true)
	run([]string{"host:transport:" + secretSerial, "frobnicate"}, "", false)
	return got
}

func record(t *testing.T, opts Options) ([]byte, []string) {
	var buf bytes.Buffer
	addr, stop, err := Record(fakeServer(t), &buf, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := session(t, addr)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	return buf.Bytes(), got
}

// TestRecordRead: the proxy passes every byte unchanged, and the transcript
// holds each connection's requests, answers, device service and bytes, the
// side that closed first, and shell v2's outcome.
func TestRecordRead(t *testing.T) {
	text, got := record(t, Options{Tool: "test 1.0"})
	if !strings.Contains(got[1], "package:/data/app/"+secretPkg) || !strings.HasSuffix(got[2], string(apnm(secretPkg))) ||
		!strings.Contains(got[3], "FAIL") {
		t.Fatalf("the client got %q", got)
	}
	tr, err := Read(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Header.Tool != "test 1.0" || tr.Header.Format != Format || len(tr.Conns) != 4 {
		t.Fatalf("header %+v, %d conns", tr.Header, len(tr.Conns))
	}
	sh, jd, bad := tr.Conns[1], tr.Conns[2], tr.Conns[3]
	if sh.Serial != secretSerial || sh.Service != "shell,v2,raw:pm path "+secretPkg || len(sh.Requests) != 2 ||
		sh.Requests[0].Status != "OKAY" || sh.ClosedBy != FromDevice {
		t.Errorf("shell conn %+v", sh)
	}
	if want := got[1][8:]; string(sh.Bytes(FromDevice)) != want {
		t.Errorf("shell bytes %q, want %q", sh.Bytes(FromDevice), want)
	}
	if jd.Service != "jdwp:42" || string(jd.Bytes(ToDevice)) != "JDWP-Handshake" || jd.ClosedBy != ToDevice {
		t.Errorf("jdwp conn %+v", jd)
	}
	if q := bad.Requests[1]; q.Status != "FAIL" || q.Reason != "unknown service frobnicate" {
		t.Errorf("refused request %+v", q)
	}
	if !bytes.Contains(text, []byte(`"kind":"shell"`)) || !bytes.Contains(text, []byte(`"stderr":"serial `+secretSerial)) {
		t.Errorf("no readable shell record in\n%s", text)
	}
	if !bytes.Contains(text, []byte(`"exit":0`)) {
		t.Errorf("no exit status in the shell record")
	}
}

// TestRecordAnonymize: serials and the chosen packages are gone from the
// file in every form (UTF-8, JNI slashes, UTF-16BE), each replaced by the
// same stand-in everywhere, and every length that frames them still holds.
func TestRecordAnonymize(t *testing.T) {
	text, got := record(t, Options{Anonymize: true, Packages: []string{secretPkg}})
	tr, err := Read(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	all.Write(text)
	for _, c := range tr.Conns {
		for _, ch := range c.Chunks {
			all.Write(ch.Data)
		}
	}
	for _, secret := range []string{secretSerial, secretPkg, "com/example/secret", string(utf16be(secretPkg)), string(utf16be(secretSerial))} {
		if bytes.Contains(all.Bytes(), []byte(secret)) {
			t.Errorf("the transcript still holds %q", secret)
		}
	}
	if !tr.Header.Anonymized {
		t.Error("header does not say anonymized")
	}
	stand := tr.Conns[1].Serial
	pkgStand := strings.TrimPrefix(tr.Conns[1].Service, "shell,v2,raw:pm path ")
	if len(stand) != len(secretSerial) || len(pkgStand) != len(secretPkg) || strings.Count(pkgStand, ".") != 2 {
		t.Fatalf("stand-ins %q %q", stand, pkgStand)
	}
	// Consistent: the device list, the requests, shell output and the
	// UTF-16 APNM name all use the same stand-ins.
	if dl := string(tr.Conns[0].Bytes(FromDevice)); !strings.HasPrefix(dl[4:], stand+" ") {
		t.Errorf("device list %q, serial stand-in %q", dl, stand)
	}
	shell := tr.Conns[1].Bytes(FromDevice)
	if len(shell) != len(got[1])-8 || !bytes.Contains(shell, []byte("/data/app/"+pkgStand+"-1/")) || !bytes.Contains(shell, []byte("serial "+stand)) {
		t.Errorf("shell output %q", shell)
	}
	for b := shell; len(b) > 0; { // the v2 packets still frame their data
		if len(b) < 5 || int(binary.LittleEndian.Uint32(b[1:])) > len(b)-5 {
			t.Fatalf("shell v2 framing broken at %q", b)
		}
		b = b[5+binary.LittleEndian.Uint32(b[1:]):]
	}
	if jd := tr.Conns[2].Bytes(FromDevice); !bytes.Equal(jd[14:], apnm(pkgStand)) {
		t.Errorf("APNM recorded as %q, want %q", jd[14:], apnm(pkgStand))
	}
}

// TestPackageStandIn: same shape, letters, distinct names distinct.
func TestPackageStandIn(t *testing.T) {
	a := newAnonymizer([]string{"com.a.b", "com.a.c", "org.example.app:remote"})
	seen := map[string]bool{}
	for name, s := range a.names {
		if len(s) != len(name) || strings.Count(s, ".") != strings.Count(name, ".") || seen[s] || s == name {
			t.Errorf("%q -> %q", name, s)
		}
		seen[s] = true
	}
}

func goodTranscript(t *testing.T) []byte {
	text, _ := record(t, Options{Tool: "alloctrack test"})
	return text
}

func lines(b []byte) []string { return strings.SplitAfter(string(b), "\n") }

// TestReadRejects: a truncated file, an edited one, one with a record
// removed and one of another format are refused, each saying where.
func TestReadRejects(t *testing.T) {
	good := goodTranscript(t)
	ls := lines(good)
	n := len(ls) - 1 // the last element is "" after the final newline
	reheader := strings.Replace(ls[0][9:], `"format":1`, `"format":7`, 1)
	foreign := fmt.Sprintf("%08x %s", crc32c(strings.TrimSuffix(reheader, "\n")), reheader) + strings.Join(ls[1:], "")
	edited := strings.Join(ls[:5], "") + strings.Replace(ls[5], `"conn":1`, `"conn":2`, 1) + strings.Join(ls[6:], "")
	for _, c := range []struct {
		name string
		text string
		want error
		line int
		msg  string
	}{
		{"cut mid-line", string(good[:len(good)/2]), ErrTruncated, strings.Count(string(good[:len(good)/2]), "\n") + 1, "has no end"},
		{"no trailer", strings.Join(ls[:n-1], ""), ErrTruncated, n - 1, "no trailer"},
		{"empty", "", ErrTruncated, 0, "no header"},
		{"not a transcript", "hello, world\n", ErrNotTranscript, 1, "no checked record"},
		{"edited", edited, ErrChecksum, 6, "content sums to"},
		{"record removed", strings.Join(ls[:3], "") + strings.Join(ls[4:], ""), ErrChecksum, 4, "record 4 where 3 belongs"},
		{"another format", foreign, ErrFormat, 1, "recorded by alloctrack test, format 7; this is format 1"},
	} {
		_, err := Read(strings.NewReader(c.text))
		var fe *FileError
		if !errors.Is(err, c.want) || !errors.As(err, &fe) || fe.Line != c.line || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v (line %v), want %v at line %d saying %q", c.name, err, fe, c.want, c.line, c.msg)
		}
	}
}

func crc32c(s string) uint32 { return crc32Castagnoli([]byte(s)) }

// TestReadGzip: a compressed transcript reads as the plain one.
func TestReadGzip(t *testing.T) {
	good := goodTranscript(t)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(good)
	zw.Close()
	a, err := Read(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Read(&z)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Conns) != len(b.Conns) || strconv.Itoa(len(b.Conns)) != "4" {
		t.Errorf("%d and %d conns", len(a.Conns), len(b.Conns))
	}
}

// TestAnonAcrossReads: a name split between two reads is replaced, and
// what is held back is recorded before the other direction's next bytes.
func TestAnonAcrossReads(t *testing.T) {
	a := newAnonymizer([]string{secretPkg})
	a.addSerial(secretSerial)
	c := a.conn()
	var out []string
	emit := func(dir string, data []byte) { out = append(out, dir[:2]+":"+string(data)) }
	c.push(FromDevice, []byte("pkg "+secretPkg[:5]), emit)
	c.push(FromDevice, []byte(secretPkg[5:]+" on "+secretSerial[:3]), emit)
	c.push(ToDevice, []byte("ok"), emit)
	c.push(FromDevice, []byte("zz"), emit)
	c.flush(FromDevice, emit)
	want := []string{"fr:pkg ", "fr:" + a.names[secretPkg] + " on ", "fr:" + secretSerial[:3], "to:ok", "fr:zz"}
	if !slices.Equal(out, want) {
		t.Errorf("got %q, want %q", out, want)
	}
}
