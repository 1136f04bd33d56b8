package ddms

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// u16s builds UTF-16BE bytes of an ASCII string.
func u16s(s string) []byte {
	var b []byte
	for _, c := range []byte(s) {
		b = append(b, 0, c)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func be32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

func TestTypeString(t *testing.T) {
	if HELO.String() != "HELO" || uint32(REAL) != 0x5245414c {
		t.Fatalf("HELO=%v REAL=%#x", HELO, uint32(REAL))
	}
	if s := Type(1).String(); s != "0x00000001" {
		t.Fatalf("non-ASCII type prints %q", s)
	}
}

func TestChunkExactBytes(t *testing.T) {
	got := EncodeChunk(REAE, []byte{1})
	want := []byte{'R', 'E', 'A', 'E', 0, 0, 0, 1, 1}
	if !bytes.Equal(got, want) {
		t.Fatalf("% x", got)
	}
	ch, err := DecodeChunk(got)
	if err != nil || ch.Type != REAE || !bytes.Equal(ch.Data, []byte{1}) {
		t.Fatalf("decoded %+v, %v", ch, err)
	}
}

func TestDecodeChunkRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"short header":     {'R', 'E', 'A'},
		"length too long":  {'R', 'E', 'A', 'L', 0, 0, 0, 5, 1},
		"length too short": {'R', 'E', 'A', 'L', 0, 0, 0, 0, 1},
		"length overflows": {'R', 'E', 'A', 'L', 0xff, 0xff, 0xff, 0xff},
		"empty":            {},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeChunk(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestHelloExactBytesAllLengths(t *testing.T) {
	full := &Hello{Version: 1, PID: 1234, VMIdent: "Dalvik v2.1.0", AppName: "com.example",
		UserID: 10, ABI: "64-bit (arm64)", JVMFlags: "CheckJNI=false", NativeDebuggable: true,
		PackageName: "com.example", Optional: 5}
	base := cat(be32(1), be32(1234), be32(13), be32(11), u16s("Dalvik v2.1.0"), u16s("com.example"))
	opt := [][]byte{
		be32(10),
		cat(be32(14), u16s("64-bit (arm64)")),
		cat(be32(14), u16s("CheckJNI=false")),
		{1},
		cat(be32(11), u16s("com.example")),
	}
	for n := 0; n <= 5; n++ {
		h := *full
		h.Optional = n
		// Zero the fields not sent, as the decoder leaves them.
		if n < 1 {
			h.UserID = 0
		}
		if n < 2 {
			h.ABI = ""
		}
		if n < 3 {
			h.JVMFlags = ""
		}
		if n < 4 {
			h.NativeDebuggable = false
		}
		if n < 5 {
			h.PackageName = ""
		}
		want := cat(append([][]byte{base}, opt[:n]...)...)
		got := EncodeHello(&h)
		if !bytes.Equal(got, want) {
			t.Fatalf("%d optional fields: encoded\n% x\nwant\n% x", n, got, want)
		}
		back, err := DecodeHello(got)
		if err != nil {
			t.Fatalf("%d optional fields: %v", n, err)
		}
		if !reflect.DeepEqual(*back, h) {
			t.Fatalf("%d optional fields: decoded %+v, want %+v", n, *back, h)
		}
	}
	// Bytes after the last known field are ignored.
	back, err := DecodeHello(append(EncodeHello(full), 9, 9, 9))
	if err != nil || !reflect.DeepEqual(back, full) {
		t.Fatalf("with trailing bytes: %+v, %v", back, err)
	}
}

func TestHelloRejects(t *testing.T) {
	good := EncodeHello(&Hello{Version: 1, PID: 1, VMIdent: "v", AppName: "a", UserID: 1, ABI: "x", Optional: 2})
	for name, b := range map[string][]byte{
		"empty":                 nil,
		"truncated header":      good[:10],
		"ident length past end": cat(be32(1), be32(1), be32(0x7fffffff), be32(0)),
		"name truncated":        good[:16+2+1],
		"user id truncated":     good[:16+4+2],
		"ABI length past end":   cat(good[:16+4+4], be32(100)),
		"ABI units truncated":   good[:len(good)-1],
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeHello(b)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), "offset") {
				t.Fatalf("error %q does not say where", err)
			}
		})
	}
	if v, err := DecodeHelloRequest([]byte{0, 0, 0, 1}); err != nil || v != 1 {
		t.Fatalf("HELO request: %d %v", v, err)
	}
	if !bytes.Equal(EncodeHelloRequest(1), []byte{0, 0, 0, 1}) {
		t.Fatal("HELO request bytes")
	}
	if _, err := DecodeHelloRequest([]byte{0, 1}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short HELO request: %v", err)
	}
}

func TestFeatures(t *testing.T) {
	want := cat(be32(2), be32(4), u16s("hprof-heap-dump"[:4]), be32(3), u16s("abc"))
	got := EncodeFeatures([]string{"hpro", "abc"})
	if !bytes.Equal(got, want) {
		t.Fatalf("% x", got)
	}
	f, err := DecodeFeatures(got)
	if err != nil || !reflect.DeepEqual(f, []string{"hpro", "abc"}) {
		t.Fatalf("%q %v", f, err)
	}
	if f, err := DecodeFeatures(be32(0)); err != nil || len(f) != 0 {
		t.Fatalf("empty: %q %v", f, err)
	}
	for name, b := range map[string][]byte{
		"no count":           {0, 0},
		"count beyond bytes": be32(1 << 30),
		"string past end":    cat(be32(1), be32(9), u16s("ab")),
	} {
		if _, err := DecodeFeatures(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestAppNameAllLengths(t *testing.T) {
	cases := []struct {
		a    AppName
		want []byte
	}{
		{AppName{Name: "app"}, cat(be32(3), u16s("app"))},
		{AppName{Name: "app", UserID: 7, Optional: 1}, cat(be32(3), u16s("app"), be32(7))},
		{AppName{Name: "app", UserID: 7, PackageName: "pkg", Optional: 2}, cat(be32(3), u16s("app"), be32(7), be32(3), u16s("pkg"))},
	}
	for _, c := range cases {
		got := EncodeAppName(&c.a)
		if !bytes.Equal(got, c.want) {
			t.Fatalf("%+v: % x", c.a, got)
		}
		back, err := DecodeAppName(got)
		if err != nil || !reflect.DeepEqual(*back, c.a) {
			t.Fatalf("%+v: decoded %+v %v", c.a, back, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":            nil,
		"name past end":    cat(be32(4), u16s("app")),
		"user id cut":      cat(be32(3), u16s("app"), []byte{0, 7}),
		"package past end": cat(be32(3), u16s("app"), be32(7), be32(9)),
	} {
		if _, err := DecodeAppName(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestSmallPayloads(t *testing.T) {
	if !bytes.Equal(EncodeWait(WaitForDebugger), []byte{0}) {
		t.Fatal("WAIT bytes")
	}
	if r, err := DecodeWait([]byte{0}); err != nil || r != 0 {
		t.Fatal(r, err)
	}
	if _, err := DecodeWait(nil); !errors.Is(err, ErrMalformed) {
		t.Fatal(err)
	}
	if !bytes.Equal(EncodeBool(true), []byte{1}) || !bytes.Equal(EncodeBool(false), []byte{0}) {
		t.Fatal("bool bytes")
	}
	for _, c := range []struct {
		b    []byte
		want bool
	}{{[]byte{0}, false}, {[]byte{1}, true}, {[]byte{2}, true}} {
		if v, err := DecodeBool("REAQ reply", c.b); err != nil || v != c.want {
			t.Fatal(c, v, err)
		}
	}
	if _, err := DecodeBool("REAQ reply", nil); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "REAQ reply") {
		t.Fatal(err)
	}
}

func TestHeapInfo(t *testing.T) {
	h := []HeapInfo{{ID: 1, TimestampMillis: 0x0102030405060708, Reason: 2, MaxSize: 3, Size: 4, BytesAllocated: 5, ObjectsAllocated: 6}}
	want := cat(be32(1), be32(1), []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte{2}, be32(3), be32(4), be32(5), be32(6))
	got := EncodeHeapInfo(h)
	if !bytes.Equal(got, want) {
		t.Fatalf("% x", got)
	}
	back, err := DecodeHeapInfo(got)
	if err != nil || !reflect.DeepEqual(back, h) {
		t.Fatal(back, err)
	}
	for name, b := range map[string][]byte{
		"no count":    nil,
		"huge count":  be32(0xffffffff),
		"short heap":  want[:len(want)-1],
		"extra bytes": append(append([]byte{}, want...), 0),
	} {
		if _, err := DecodeHeapInfo(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestFail(t *testing.T) {
	e := &FailError{Code: 3, Message: "no"}
	want := cat(be32(3), be32(2), u16s("no"))
	if got := EncodeFail(e); !bytes.Equal(got, want) {
		t.Fatalf("% x", got)
	}
	back, err := DecodeFail(want)
	if err != nil || *back != *e {
		t.Fatal(back, err)
	}
	if _, err := DecodeFail(cat(be32(3), be32(5), u16s("no"))); !errors.Is(err, ErrMalformed) {
		t.Fatal(err)
	}
}

func TestUTF16(t *testing.T) {
	for _, s := range []string{"", "abc", "Ünïcödé", "emoji 😀 here", "日本"} {
		b := AppendUTF16(nil, s)
		if len(b) != 2*UTF16Len(s) {
			t.Fatalf("%q: %d bytes for %d units", s, len(b), UTF16Len(s))
		}
		if got := DecodeUTF16(b); got != s {
			t.Fatalf("round trip %q -> %q", s, got)
		}
	}
	if got := DecodeUTF16([]byte{0xd8, 0x00, 0, 'a'}); got != "\uFFFDa" {
		t.Fatalf("unpaired surrogate: %q", got)
	}
}

// fakeTransport answers each Start with a scripted reply and records what
// was sent.
type fakeTransport struct {
	sent    [][]byte
	replies map[Type][]byte // reply data (a whole chunk, or nothing)
	err     error
}

func (f *fakeTransport) Start(cmdSet, cmd uint8, data []byte) (func(context.Context) ([]byte, error), error) {
	if cmdSet != CommandSet || cmd != Command {
		return nil, errors.New("not a DDM packet")
	}
	f.sent = append(f.sent, data)
	ch, err := DecodeChunk(data)
	if err != nil {
		return nil, err
	}
	reply, ok := f.replies[ch.Type]
	return func(ctx context.Context) ([]byte, error) {
		if f.err != nil {
			return nil, f.err
		}
		if !ok {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return reply, nil
	}, nil
}

func (f *fakeTransport) Send(cmdSet, cmd uint8, data []byte) error {
	f.sent = append(f.sent, data)
	return f.err
}

var _ Transport = (*fakeTransport)(nil)

func TestClient(t *testing.T) {
	hello := &Hello{Version: 1, PID: 42, VMIdent: "Dalvik v2.1.0", AppName: "a", Optional: 0}
	ft := &fakeTransport{replies: map[Type][]byte{
		HELO: EncodeChunk(HELO, EncodeHello(hello)),
		FEAT: EncodeChunk(FEAT, EncodeFeatures([]string{"x"})),
		REAQ: EncodeChunk(REAQ, []byte{1}),
		REAL: EncodeChunk(FAIL, EncodeFail(&FailError{Code: 1, Message: "busy"})),
		HPIF: EncodeChunk(REAQ, []byte{1}), // wrong type
		WAIT: nil,                          // empty reply
	}}
	c := NewClient(ft)
	ctx := context.Background()
	h, err := c.Hello(ctx)
	if err != nil || h.PID != 42 {
		t.Fatal(h, err)
	}
	if !bytes.Equal(ft.sent[0], EncodeChunk(HELO, []byte{0, 0, 0, 1})) {
		t.Fatalf("HELO request % x", ft.sent[0])
	}
	if f, err := c.Features(ctx); err != nil || f[0] != "x" {
		t.Fatal(f, err)
	}
	if on, err := c.AllocTracking(ctx); err != nil || !on {
		t.Fatal(on, err)
	}
	if err := c.SetAllocTracking(false); err != nil || !bytes.Equal(ft.sent[len(ft.sent)-1], EncodeChunk(REAE, []byte{0})) {
		t.Fatal(err)
	}
	_, err = c.Allocations(ctx)
	var fe *FailError
	if !errors.As(err, &fe) || fe.Message != "busy" {
		t.Fatalf("REAL: %v, want FailError", err)
	}
	if _, err := c.Request(ctx, HPIF, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("wrong reply type: %v", err)
	}
	if _, err := c.Request(ctx, WAIT, nil); !errors.Is(err, ErrEmptyReply) {
		t.Fatalf("empty reply: %v", err)
	}
	tctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Request(tctx, APNM, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("no reply: %v", err)
	}
}

func FuzzDecodeChunk(f *testing.F) {
	f.Add(EncodeChunk(HELO, EncodeHello(&Hello{Version: 1, PID: 1, VMIdent: "v", AppName: "a", Optional: 5})))
	f.Add(EncodeChunk(REAE, []byte{1}))
	f.Add([]byte{'R', 'E', 'A', 'L', 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		ch, err := DecodeChunk(b)
		if err != nil {
			return
		}
		if !bytes.Equal(EncodeChunk(ch.Type, ch.Data), b) {
			t.Fatal("chunk does not re-encode to its bytes")
		}
	})
}

func FuzzDecodePayloads(f *testing.F) {
	f.Add(EncodeHello(&Hello{Version: 1, PID: 1, VMIdent: "Dalvik v2.1.0", AppName: "a", UserID: 1, ABI: "x", JVMFlags: "y", NativeDebuggable: true, PackageName: "p", Optional: 5}))
	f.Add(EncodeFeatures([]string{"a", "bb"}))
	f.Add(EncodeAppName(&AppName{Name: "n", UserID: 1, PackageName: "p", Optional: 2}))
	f.Add(EncodeHeapInfo([]HeapInfo{{ID: 1}}))
	f.Add(EncodeFail(&FailError{Code: 1, Message: "m"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := DecodeHello(b); err == nil {
			if _, err := DecodeHello(EncodeHello(h)); err != nil {
				t.Fatalf("HELO re-encode: %v", err)
			}
		}
		if fs, err := DecodeFeatures(b); err == nil {
			if back, err := DecodeFeatures(EncodeFeatures(fs)); err != nil || len(back) != len(fs) {
				t.Fatalf("FEAT re-encode: %v", err)
			}
		}
		if a, err := DecodeAppName(b); err == nil {
			if _, err := DecodeAppName(EncodeAppName(a)); err != nil {
				t.Fatalf("APNM re-encode: %v", err)
			}
		}
		if hs, err := DecodeHeapInfo(b); err == nil {
			if !bytes.Equal(EncodeHeapInfo(hs), b) {
				t.Fatal("HPIF does not re-encode to its bytes")
			}
		}
		if e, err := DecodeFail(b); err == nil {
			if _, err := DecodeFail(EncodeFail(e)); err != nil {
				t.Fatalf("FAIL re-encode: %v", err)
			}
		}
		DecodeWait(b)
		DecodeBool("REAQ", b)
		DecodeHelloRequest(b)
	})
}

func TestHeapDumpFilePayload(t *testing.T) {
	for _, p := range []string{"/sdcard/dump.hprof", "/data/data/com.example/ü.hprof", ""} {
		got, err := DecodeHeapDumpFile(EncodeHeapDumpFile(p))
		if err != nil || got != p {
			t.Errorf("%q: %q, %v", p, got, err)
		}
	}
	for _, b := range [][]byte{nil, {0, 0, 0, 5, 0, 'a'}, append(EncodeHeapDumpFile("/x"), 0)} {
		if _, err := DecodeHeapDumpFile(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%x: %v, want ErrMalformed", b, err)
		}
	}
}
