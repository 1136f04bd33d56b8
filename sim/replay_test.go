package sim

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/adb"
	"github.com/alloctrack/alloctrack/adb/transcript"
	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/jdwp"
)

var updateTranscripts = flag.Bool("update", false, "TestRecordTranscripts: record testdata/transcripts from the simulator")

// transcriptDir holds the transcripts CI replays (testdata/README.md).
const transcriptDir = "../testdata/transcripts"

// transcriptAPIs are issue 36's API levels.
var transcriptAPIs = []int{19, 23, 28, 30, 31, 33, 35}

const replayPackage = "com.example.shop"

// doctorAnswers is what doctorSequence learned from a device: recorded
// beside each transcript from the live simulator, and asked again of the
// replay.
type doctorAnswers struct {
	Features   []string
	SDK        string
	PIDs       []int
	Hello      ddms.Hello
	TrackingOn bool
	REAL       digest
	// REALRecords is how many allocation records the report parses to.
	REALRecords int
	Perfetto    *perfettoAnswers `json:",omitempty"`
}

type perfettoAnswers struct {
	Start string // perfetto --background's output: the session's pid
	Polls int    // reads of the trace before it held bytes
	Trace digest
	Kill  int // exit status of kill -TERM
	Rm    int
}

type digest struct {
	Bytes  int
	SHA256 string
}

func digestOf(b []byte) digest {
	s := sha256.Sum256(b)
	return digest{Bytes: len(b), SHA256: hex.EncodeToString(s[:])}
}

// doctorSequence asks a device, through the adb server at c, what doctor
// asks: features, getprop, the JDWP list, a DDM handshake and one tracker
// cycle (REAE, REAQ, REAL), and from API 31 a short heapprofd session.
func doctorSequence(t *testing.T, c *adb.Client, serial string, api int) doctorAnswers {
	t.Helper()
	ctx := testwait.Context(t)
	var a doctorAnswers
	var err error
	if a.Features, err = c.Features(ctx, serial); err != nil {
		t.Fatalf("features: %v", err)
	}
	slices.Sort(a.Features) // the adb server keeps them in no set order
	if a.SDK, err = c.Prop(ctx, serial, "ro.build.version.sdk"); err != nil {
		t.Fatalf("getprop: %v", err)
	}
	a.PIDs = firstJDWPList(t, c, serial)
	if len(a.PIDs) == 0 {
		t.Fatal("track-jdwp: no pids")
	}
	ddmCycle(t, c, serial, a.PIDs[0], api, &a)
	if api >= 31 {
		a.Perfetto = heapprofdSession(t, c, serial)
	}
	return a
}

func firstJDWPList(t *testing.T, c *adb.Client, serial string) []int {
	ctx, cancel := context.WithCancel(testwait.Context(t))
	defer cancel()
	var pids []int
	err := c.TrackJDWP(ctx, serial, func(p []int) { pids = p; cancel() })
	if pids == nil {
		t.Fatalf("track-jdwp: %v", err)
	}
	return pids
}

// ddmCycle: the handshake, then up to API 30 (DDM's tracker goes with
// Android 12, docs/ddm-devices.md) one tracker cycle.
func ddmCycle(t *testing.T, c *adb.Client, serial string, pid, api int, a *doctorAnswers) {
	ctx := testwait.Context(t)
	nc, err := c.OpenJDWP(ctx, serial, pid)
	if err != nil {
		t.Fatalf("jdwp:%d: %v", pid, err)
	}
	conn, err := jdwp.Open(ctx, nc, jdwp.Options{})
	if err != nil {
		t.Fatalf("jdwp handshake: %v", err)
	}
	defer conn.Close()
	d := ddms.NewClient(conn)
	h, err := d.Hello(ctx)
	if err != nil {
		t.Fatalf("HELO: %v", err)
	}
	a.Hello = *h
	if api > 30 {
		return
	}
	if err := d.SetAllocTracking(true); err != nil {
		t.Fatalf("REAE: %v", err)
	}
	if a.TrackingOn, err = d.AllocTracking(ctx); err != nil {
		t.Fatalf("REAQ: %v", err)
	}
	payload, err := d.Allocations(ctx)
	if err != nil {
		t.Fatalf("REAL: %v", err)
	}
	a.REAL = digestOf(payload)
	rep, err := allocreport.Parse(payload)
	if err != nil {
		t.Fatalf("REAL: %v", err)
	}
	a.REALRecords = len(rep.Allocations)
	if err := d.SetAllocTracking(false); err != nil {
		t.Fatalf("REAE off: %v", err)
	}
	if _, err := d.AllocTracking(ctx); err != nil {
		t.Fatalf("REAQ after REAE off: %v", err)
	}
}

const replayTraceConfig = `
buffers { size_kb: 4096 fill_policy: DISCARD }
data_sources { config { name: "android.heapprofd" heapprofd_config {
  sampling_interval_bytes: 4096 process_cmdline: "` + replayPackage + `" heaps: "com.android.art"
  shmem_size_bytes: 8388608 block_client: true
  continuous_dump_config { dump_phase_ms: 0 dump_interval_ms: 200 } } } }
write_into_file: true
file_write_period_ms: 100
`

// heapprofdSession starts perfetto in the background with a file name that
// varies from run to run (the serial and a random nonce, as the daemon
// names it), waits for the trace to hold bytes, stops it and removes it.
func heapprofdSession(t *testing.T, c *adb.Client, serial string) *perfettoAnswers {
	ctx := testwait.Context(t)
	nonce := make([]byte, 8)
	rand.Read(nonce)
	path := PerfettoTraceDir + "/alloctrack-" + fileSafeName(serial) + "-" + hex.EncodeToString(nonce) + ".pftrace"
	var p perfettoAnswers
	out, errOut, code, err := c.Exec(ctx, serial, []byte(replayTraceConfig), "perfetto", "--txt", "-c", "-", "-o", path, "--background")
	if err != nil || code != 0 {
		t.Fatalf("perfetto: %d %q %v", code, errOut, err)
	}
	p.Start = strings.TrimSpace(string(out))
	var trace []byte
	testwait.Until(t, 50*time.Millisecond, "the trace holds bytes", func() (bool, string) {
		p.Polls++
		trace, _, code, err = c.Exec(ctx, serial, nil, "cat", path)
		return err == nil && code == 0 && len(trace) > 0, fmt.Sprintf("exit %d, %d bytes, %v", code, len(trace), err)
	})
	p.Trace = digestOf(trace)
	if _, _, p.Kill, err = c.Exec(ctx, serial, nil, "kill", "-TERM", p.Start); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if _, _, p.Rm, err = c.Exec(ctx, serial, nil, "rm", "-f", path); err != nil {
		t.Fatalf("rm: %v", err)
	}
	return &p
}

// simForTranscript is a device of api with one debuggable app, served on
// its own port and attached to srv.
func simForTranscript(t *testing.T, srv *adbtest.Server, api int, rate float64) string {
	d := NewDevice(DeviceConfig{Serial: "sim-rec", API: api, Product: "simprod", Model: "SimModel", Device: "simdev",
		HeapprofdStartDelay: 20 * time.Millisecond})
	w := DefaultWorkload()
	w.Rate = rate
	d.AddVM(NewVM(AppConfig{PID: 4242, Package: replayPackage, Workload: w}, api))
	a := NewAdbd(d)
	addr, err := a.Listen("127.0.0.1:" + strconv.Itoa(adbtest.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		d.Close()
	})
	srv.Connect(t, addr.String())
	return addr.String()
}

// TestRecordTranscripts records, with -update, the transcripts and
// answers in testdata/transcripts from the simulator:
//
//	go test ./sim -run TestRecordTranscripts -args -update
func TestRecordTranscripts(t *testing.T) {
	if !*updateTranscripts {
		t.Skip("records only with -update")
	}
	for _, api := range transcriptAPIs {
		t.Run(fmt.Sprint(api), func(t *testing.T) {
			srv := adbtest.StartServer(t)
			serial := simForTranscript(t, srv, api, 2000)
			var buf bytes.Buffer
			proxy, stop, err := transcript.Record(srv.Addr(), &buf, transcript.Options{Tool: "alloctrack sim TestRecordTranscripts"})
			if err != nil {
				t.Fatal(err)
			}
			answers := doctorSequence(t, adb.NewClient(proxy), serial, api)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			writeTranscript(t, api, buf.Bytes(), answers)
		})
	}
}

func writeTranscript(t *testing.T, api int, text []byte, answers doctorAnswers) {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	zw.Write(text)
	zw.Close()
	base := filepath.Join(transcriptDir, fmt.Sprintf("sim-api%d", api))
	js, _ := json.MarshalIndent(answers, "", "  ")
	if err := os.WriteFile(base+".transcript.gz", z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".answers.json", append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s.transcript.gz: %d bytes (%d uncompressed)", base, z.Len(), len(text))
}

// serveReplay reads a transcript file and serves it as a device attached
// to srv; it returns the replay and the serial the server knows it by.
func serveReplay(t *testing.T, srv *adbtest.Server, file string) (*Replay, string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := transcript.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	rp := NewReplay(tr)
	a := rp.Adbd()
	addr, err := a.Listen("127.0.0.1:" + strconv.Itoa(adbtest.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		rp.Close()
	})
	rp.SetSerial(addr.String())
	srv.Connect(t, addr.String())
	return rp, addr.String()
}

// TestReplaySimTranscripts replays each simulator transcript through the
// real adb server and asks it the same sequence: the answers are the live
// simulator's, and nothing asked is missing from the transcript.
func TestReplaySimTranscripts(t *testing.T) {
	for _, api := range transcriptAPIs {
		t.Run(fmt.Sprint(api), func(t *testing.T) {
			base := filepath.Join(transcriptDir, fmt.Sprintf("sim-api%d", api))
			var want doctorAnswers
			js, err := os.ReadFile(base + ".answers.json")
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(js, &want); err != nil {
				t.Fatal(err)
			}
			srv := adbtest.StartServer(t)
			rp, serial := serveReplay(t, srv, base+".transcript.gz")
			got := doctorSequence(t, adb.NewClient(srv.Addr()), serial, api)
			if !reflect.DeepEqual(got, want) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(want)
				t.Errorf("replay answered\n%s\nthe live simulator\n%s", gj, wj)
			}
			if errs := rp.Errors(); len(errs) > 0 {
				t.Errorf("requests the transcript did not hold: %v", errs)
			}
		})
	}
}

// TestReplayUnknownService: a service the transcript does not hold gets an
// error naming it, on the stream (shell v2: stderr and exit 255) and in
// Errors.
func TestReplayUnknownService(t *testing.T) {
	srv := adbtest.StartServer(t)
	rp, serial := serveReplay(t, srv, filepath.Join(transcriptDir, "sim-api30.transcript.gz"))
	c := adb.NewClient(srv.Addr())
	_, errOut, code, err := c.Exec(testwait.Context(t), serial, nil, "echo", "not-recorded")
	if err != nil {
		t.Fatal(err)
	}
	if code != 255 || !strings.Contains(string(errOut), `"shell,v2,raw:echo not-recorded" is not in the transcript`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	var ue *UnknownServiceError
	if errs := rp.Errors(); len(errs) != 1 || !errors.As(errs[0], &ue) || ue.Service != "shell,v2,raw:echo not-recorded" {
		t.Errorf("Errors() = %v", errs)
	}
}

// TestReplayTranscripts replays every transcript in testdata/transcripts,
// whatever recorded it (a real phone's too): each device service the
// recording opened is opened again through the real adb server, sent the
// recorded client bytes, and must answer the recorded device bytes (or be
// refused, if it was).
func TestReplayTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(transcriptDir, "*.transcript*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in %s (%v)", transcriptDir, err)
	}
	srv := adbtest.StartServer(t)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			rp, serial := serveReplay(t, srv, file)
			for _, c := range rp.transcriptConns() {
				replayConn(t, srv, serial, c)
			}
			if errs := rp.Errors(); len(errs) > 0 {
				t.Errorf("requests the transcript did not hold: %v", errs)
			}
		})
	}
}

func replayConn(t *testing.T, srv *adbtest.Server, serial string, rc *transcript.Conn) {
	t.Helper()
	c := srv.Dial(t)
	defer c.Close()
	c.SetDeadline(time.Now().Add(testwait.Bound))
	if err := adbtest.Request(c, "host:transport:"+serial); err != nil {
		t.Fatal(err)
	}
	err := adbtest.Request(c, rc.Service)
	if ok := rc.Requests[len(rc.Requests)-1].Status == "OKAY"; ok != (err == nil) {
		t.Fatalf("%s: %v, recorded %s", rc.Service, err, rc.Requests[len(rc.Requests)-1].Status)
	}
	if err != nil {
		return
	}
	c.Write(rc.Bytes(transcript.ToDevice))
	want := rc.Bytes(transcript.FromDevice)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: got %d bytes (%v), want the recorded %d", rc.Service, len(got), err, len(want))
	}
}

// transcriptConns are the device services of the transcript, in order.
func (r *Replay) transcriptConns() []*transcript.Conn {
	out := make([]*transcript.Conn, len(r.services))
	for i, s := range r.services {
		out[i] = s.conn
	}
	return out
}

// TestReplayPayloadByAPI: the replay's adbd moves data in messages no
// larger than the recorded device's version sends (AdbdMaxPayload), the
// API level read from the recorded getprop.
func TestReplayPayloadByAPI(t *testing.T) {
	for api, want := range map[int]uint32{19: 4096, 23: 4096, 30: AdbMaxPayload} {
		f, err := os.Open(filepath.Join(transcriptDir, fmt.Sprintf("sim-api%d.transcript.gz", api)))
		if err != nil {
			t.Fatal(err)
		}
		tr, err := transcript.Read(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := NewReplay(tr).maxPayload(); got != want {
			t.Errorf("API %d: max payload %d, want %d", api, got, want)
		}
	}
}

// TestReplayDiverged: a client that sends other bytes than the recorded
// ones on a replayed service gets the stream closed, and Errors names the
// service and the byte.
func TestReplayDiverged(t *testing.T) {
	srv := adbtest.StartServer(t)
	rp, serial := serveReplay(t, srv, filepath.Join(transcriptDir, "sim-api30.transcript.gz"))
	c := srv.Dial(t)
	c.SetDeadline(time.Now().Add(testwait.Bound))
	if err := adbtest.Request(c, "host:transport:"+serial); err != nil {
		t.Fatal(err)
	}
	if err := adbtest.Request(c, "jdwp:4242"); err != nil {
		t.Fatal(err)
	}
	feat := jdwp.AppendPacket(nil, &jdwp.Packet{ID: 1, CommandSet: ddms.CommandSet, Command: ddms.Command,
		Data: ddms.EncodeChunk(ddms.FEAT, nil)})
	c.Write(append([]byte(jdwp.Handshake), feat...))
	b, _ := io.ReadAll(c) // the handshake echo, then the end
	if len(b) > len(jdwp.Handshake) {
		t.Errorf("the replay answered %d bytes to a request it does not hold", len(b))
	}
	var de *DivergedError
	if errs := rp.Errors(); len(errs) != 1 || !errors.As(errs[0], &de) || de.Service != "jdwp:4242" || de.Offset < len(jdwp.Handshake) || de.Offset >= len(jdwp.Handshake)+11+4 {
		t.Errorf("Errors() = %v", errs)
	}
}

// TestReplayAnonymized: a transcript recorded with Anonymize replays, and
// the JDWP, DDM and shell framing around the replaced names still holds:
// the same questions get the same answers, but for the package's name,
// replaced by a stand-in of its length, and a REAL of the same size and
// records; no form of the serial or the package is left in the file.
func TestReplayAnonymized(t *testing.T) {
	srv := adbtest.StartServer(t)
	// Fast enough that the moment between REAE and REAL always holds
	// records, however quickly a machine answers (at 2,000 a second a
	// fast one saw none).
	serial := simForTranscript(t, srv, 30, 1_000_000)
	var buf bytes.Buffer
	proxy, stop, err := transcript.Record(srv.Addr(), &buf, transcript.Options{Tool: "test", Anonymize: true, Packages: []string{replayPackage}})
	if err != nil {
		t.Fatal(err)
	}
	live := doctorSequence(t, adb.NewClient(proxy), serial, 30)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	tr, err := transcript.Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	all := buf.String()
	for _, c := range tr.Conns {
		all += string(c.Bytes(transcript.ToDevice)) + string(c.Bytes(transcript.FromDevice))
	}
	for _, secret := range []string{serial, fileSafeName(serial), replayPackage, "com/example/shop", utf16BE(replayPackage)} {
		if strings.Contains(all, secret) {
			t.Errorf("the transcript holds %q", secret)
		}
	}
	f := filepath.Join(t.TempDir(), "anon.transcript")
	os.WriteFile(f, buf.Bytes(), 0o644)
	srv2 := adbtest.StartServer(t)
	rp, rserial := serveReplay(t, srv2, f)
	got := doctorSequence(t, adb.NewClient(srv2.Addr()), rserial, 30)
	if errs := rp.Errors(); len(errs) > 0 {
		t.Fatalf("replay errors: %v", errs)
	}
	if n := got.Hello.AppName; n == replayPackage || len(n) != len(replayPackage) || got.Hello.PackageName != n {
		t.Errorf("replayed names %q %q", n, got.Hello.PackageName)
	}
	if got.REAL.Bytes != live.REAL.Bytes || got.REALRecords != live.REALRecords || got.REALRecords == 0 {
		t.Errorf("REAL %+v %d records, live %+v %d", got.REAL, got.REALRecords, live.REAL, live.REALRecords)
	}
	got.Hello.AppName, got.Hello.PackageName, got.REAL = live.Hello.AppName, live.Hello.PackageName, live.REAL
	if !reflect.DeepEqual(got, live) {
		t.Errorf("replay answered %+v, live %+v", got, live)
	}
}

func utf16BE(s string) string {
	var b []byte
	for _, c := range s {
		b = append(b, 0, byte(c))
	}
	return string(b)
}

// TestReplaySerialOfAnotherLength: a phone's serial recorded in a file name
// and in what the client sent matches the replay's own serial of another
// length; the nonce in the name is matched as varying.
func TestReplaySerialOfAnotherLength(t *testing.T) {
	const phone = "R58M123ABCDEFGHIJ" // longer than 127.0.0.1:PORT
	framed := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	rc := &transcript.Conn{Serial: phone, Service: "shell,v2,raw:perfetto -o /t/alloctrack-" + phone + "-0123456789abcdef.pftrace",
		Requests: []transcript.Request{{Text: "host:transport:" + phone, Status: "OKAY"}, {Status: "OKAY", Service: true}},
		Chunks:   []transcript.Chunk{{Dir: transcript.ToDevice, Data: framed(phone)}, {Dir: transcript.FromDevice, Data: []byte("4203\n")}},
		ClosedBy: transcript.FromDevice}
	rp := NewReplay(&transcript.Transcript{Conns: []*transcript.Conn{rc}})
	defer rp.Close()
	rp.SetSerial("127.0.0.1:40000")
	c, err := rp.OpenService("shell,v2,raw:perfetto -o /t/alloctrack-127.0.0.1_40000-fedcba9876543210.pftrace")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go c.Write(framed("127.0.0.1:40000"))
	c.SetDeadline(time.Now().Add(testwait.Bound))
	b, _ := io.ReadAll(c)
	if string(b) != "4203\n" || len(rp.Errors()) > 0 {
		t.Errorf("got %q, errors %v", b, rp.Errors())
	}
}
