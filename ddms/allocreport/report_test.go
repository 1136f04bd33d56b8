package allocreport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func sampleReport(t testing.TB) *Report {
	t.Helper()
	b := NewBuilder()
	b.Add(16, 3311, "[Ljava/lang/Object;", []FrameName{
		{"Ljava/util/Arrays;", "copyOf", "Arrays.java", 3139},
		{"Lcom/example/App;", "run", "App.java", 12},
	})
	b.Add(64, 40000, "Landroid/os/Message;", nil)
	b.Add(0xffffffff, 1, "[I", []FrameName{{"Ljava/lang/Object;", "internalClone", "", -2}, {"I", "I", "Z", -1}})
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestEncodeExactBytes(t *testing.T) {
	b := NewBuilder()
	b.Add(24, 7, "[I", []FrameName{{"La/B;", "m", "B.java", -2}})
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		15, 9, 8, // header lengths
		0, 1, // entry count
		0, 0, 0, 32, // strings offset: 15 + 9 + 8
		0, 2, 0, 1, 0, 1, // 2 classes, 1 method, 1 file
		0, 0, 0, 24, 0, 7, 0, 0, 1, // size 24, thread 7, class 0, depth 1
		0, 1, 0, 0, 0, 0, 0xff, 0xfe, // frame: class 1, method 0, file 0, line -2
		0, 0, 0, 2, 0, '[', 0, 'I',
		0, 0, 0, 5, 0, 'L', 0, 'a', 0, '/', 0, 'B', 0, ';',
		0, 0, 0, 1, 0, 'm',
		0, 0, 0, 6, 0, 'B', 0, '.', 0, 'j', 0, 'a', 0, 'v', 0, 'a',
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", got, want)
	}
	back, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if back.Classes[0] != "int[]" || back.Classes[1] != "a.B" || back.RawClasses[1] != "La/B;" {
		t.Fatalf("tables %q %q", back.Classes, back.RawClasses)
	}
}

func TestRoundTrip(t *testing.T) {
	r := sampleReport(t)
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRecords(back, r) {
		t.Fatalf("round trip differs:\n%+v\n%+v", back, r)
	}
	b2, _ := Encode(back)
	if !bytes.Equal(b, b2) {
		t.Fatal("encode(parse(encode(r))) differs from encode(r)")
	}
	// The real report round-trips byte for byte too.
	real := readReal(t)
	rr, err := Parse(real)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Encode(rr)
	if err != nil || !bytes.Equal(again, real) {
		t.Fatalf("real report does not re-encode to its bytes (%v)", err)
	}
}

func TestDescriptorToDot(t *testing.T) {
	for in, want := range map[string]string{
		"Ljava/lang/String;":     "java.lang.String",
		"[I":                     "int[]",
		"[[Landroid/os/Message;": "android.os.Message[][]",
		"I":                      "int",
		"Z":                      "boolean",
		"B":                      "byte",
		"C":                      "char",
		"S":                      "short",
		"J":                      "long",
		"F":                      "float",
		"D":                      "double",
		"V":                      "V",
		"[":                      "[]",
		"L;":                     "",
		"":                       "",
		"Arrays.java":            "Arrays.java",
		"a/b":                    "a/b", // '/' is only replaced inside L...;
		"<init>":                 "<init>",
		"[[J":                    "long[][]",
		"La$b;":                  "a$b",
	} {
		if got := DescriptorToDot(in); got != want {
			t.Errorf("DescriptorToDot(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAppendDotted checks the parser's word-at-a-time DescriptorToDot
// against the plain one: every byte value at every position of a word,
// beside slashes, and random names built from the bytes that matter.
func TestAppendDotted(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := string(appendDotted([]byte("prefix"), s)), "prefix"+DescriptorToDot(s); got != want {
			t.Fatalf("appendDotted(%q) = %q, want %q", s, got, want)
		}
	}
	for c := range 256 {
		for pos := range 8 {
			b := []byte("L/////////////////;")
			b[1+pos] = byte(c)
			b[9+pos] = byte(c)
			check(string(b))
			b = []byte("Labcdefghijklmnopq;")
			b[1+pos] = byte(c)
			b[9+pos] = byte(c)
			check(string(b))
		}
	}
	alphabet := []byte{'/', '/', '.', 'L', ';', '[', 'a', 'Z', 0x00, 0x2e, 0x30, 0x6f, 0xaf, 0xff, 0xc3, 0xa9}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if len(b) >= 2 && rng.IntN(2) == 0 {
			b[0], b[len(b)-1] = 'L', ';'
		}
		check(string(b))
	}
}

// header builds a 15-byte header.
func header(hl, ehl, fl byte, count uint16, strOff uint32, nc, nm, nf uint16) []byte {
	b := []byte{hl, ehl, fl}
	b = binary.BigEndian.AppendUint16(b, count)
	b = binary.BigEndian.AppendUint32(b, strOff)
	b = binary.BigEndian.AppendUint16(b, nc)
	b = binary.BigEndian.AppendUint16(b, nm)
	return binary.BigEndian.AppendUint16(b, nf)
}

func str(s string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(s)))
	for _, c := range []byte(s) {
		b = append(b, 0, c)
	}
	return b
}

func TestLargerLengthsAreSkipped(t *testing.T) {
	// header_len 17, entry_header_len 11, frame_len 10: two extra bytes each.
	var b []byte
	entries := []byte{0, 0, 0, 8, 0, 5, 0, 0, 1, 0xEE, 0xEE, 0, 0, 0, 0, 0, 0, 0, 3, 0xEE, 0xEE}
	strOff := 17 + len(entries)
	b = append(header(17, 11, 10, 1, uint32(strOff), 1, 1, 1), 0xEE, 0xEE)
	b = append(b, entries...)
	b = append(b, str("[B")...)
	b = append(b, str("m")...)
	b = append(b, str("F.java")...)
	r, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Allocations) != 1 || r.Allocations[0].Size != 8 || r.Allocations[0].Thread != 5 || r.Classes[0] != "byte[]" {
		t.Fatalf("%+v", r)
	}
	f := r.Stack(&r.Allocations[0]).Frames()
	if len(f) != 1 || f[0].Line != 3 || r.Methods[f[0].Method] != "m" {
		t.Fatalf("frames %+v", f)
	}
}

func TestDalvikWrappedCount(t *testing.T) {
	// 65,536 entries of depth 0 with entry_count 0, as Dalvik 4.4 sends a full buffer.
	const n = 65536
	b := header(15, 9, 8, 0, uint32(15+n*9), 1, 0, 0)
	for i := range n {
		b = binary.BigEndian.AppendUint32(b, uint32(i))
		b = append(b, 0, 1, 0, 0, 0)
	}
	b = append(b, str("Ljava/lang/Object;")...)
	r, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Allocations) != n || r.DeclaredCount != 0 || r.Num(0) != n || r.Allocations[n-1].Size != n-1 {
		t.Fatalf("%d allocations, declared %d, first num %d", len(r.Allocations), r.DeclaredCount, r.Num(0))
	}
	if !r.Overflowed() {
		t.Fatal("a full buffer should count as overflowed")
	}
}

// withGap inserts n bytes of fill between the last entry of p and its
// string tables, moving strings_offset.
func withGap(p []byte, n int, fill byte) []byte {
	off := int(binary.BigEndian.Uint32(p[5:]))
	out := append([]byte(nil), p[:off]...)
	out = append(out, bytes.Repeat([]byte{fill}, n)...)
	out = append(out, p[off:]...)
	binary.BigEndian.PutUint32(out[5:], uint32(off+n))
	return out
}

// A REAL payload with padded header, entry and frame lengths and bytes
// between its last entry and strings_offset is read as ddmlib reads it:
// entry_count entries, then the string tables. Before the fix, Parse
// refused it with "entry 2: 16-byte entry header overruns the string
// tables".
func TestGapBeforeStringTables(t *testing.T) {
	plain, err := Encode(sampleReport(t))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse(plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		payload []byte
		gap     int
	}{
		{"padded lengths, 7-byte gap", withGap(widen(t, plain, 20, 16, 12), 7, 0xEE), 7},
		{"padded lengths, gap longer than an entry header", withGap(widen(t, plain, 20, 16, 12), 40, 0), 40},
		{"plain lengths, 1-byte gap", withGap(plain, 1, 0), 1},
		// The last entry is whole but not declared: ddmlib skips it too.
		{"one entry more than declared", func() []byte {
			p := append([]byte(nil), plain...)
			binary.BigEndian.PutUint16(p[3:], uint16(len(want.Allocations)-1))
			return p
		}(), -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Parse(c.payload)
			if err != nil {
				t.Fatalf("regression: a gap before the string tables is refused (ddmlib 25.2.2 reads it): %v", err)
			}
			n := len(want.Allocations)
			if c.gap < 0 {
				n--
			}
			if len(r.Allocations) != n || (c.gap >= 0 && r.GapBytes != c.gap) || (c.gap < 0 && r.GapBytes == 0) {
				t.Fatalf("%d allocations, gap %d bytes; want %d and %d", len(r.Allocations), r.GapBytes, n, c.gap)
			}
			for i := range n {
				a, w := r.Allocations[i], want.Allocations[i]
				if a.Size != w.Size || a.Thread != w.Thread || r.ClassName(&a) != want.ClassName(&w) {
					t.Fatalf("allocation %d: %+v, want %+v", i, a, w)
				}
				ga, gw := r.Stack(&a).Frames(), want.Stack(&w).Frames()
				if len(ga) != len(gw) {
					t.Fatalf("allocation %d: %d frames, want %d", i, len(ga), len(gw))
				}
				for j := range ga {
					if ga[j] != gw[j] {
						t.Fatalf("allocation %d frame %d: %+v, want %+v", i, j, ga[j], gw[j])
					}
				}
			}
		})
	}
}

// Declared entries that are not whole are still refused, gap or not.
func TestGapDoesNotHideTruncatedEntries(t *testing.T) {
	plain, err := Encode(sampleReport(t))
	if err != nil {
		t.Fatal(err)
	}
	p := append([]byte(nil), plain...)
	binary.BigEndian.PutUint16(p[3:], binary.BigEndian.Uint16(p[3:])+1)
	if _, err := Parse(withGap(p, 3, 0)); err == nil || !strings.Contains(err.Error(), "entry header overruns") {
		t.Fatalf("one entry more declared than sent, 3-byte gap: %v, want an entry header overrun", err)
	}
}

// Wrapped-count recovery and a gap, told apart: 65,536 entries with
// entry_count 0 are kept; 65,535 (not a multiple of 65,536) are a gap.
func TestWrappedCountOrGap(t *testing.T) {
	for _, c := range []struct{ n, want, gap int }{{65536, 65536, 0}, {65535, 0, 65535 * 9}, {3, 0, 27}} {
		b := header(15, 9, 8, 0, uint32(15+c.n*9), 1, 0, 0)
		for i := range c.n {
			b = binary.BigEndian.AppendUint32(b, uint32(i))
			b = append(b, 0, 1, 0, 0, 0)
		}
		b = append(b, str("Ljava/lang/Object;")...)
		r, err := Parse(b)
		if err != nil {
			t.Fatalf("%d entries, entry_count 0: %v", c.n, err)
		}
		if len(r.Allocations) != c.want || r.GapBytes != c.gap {
			t.Fatalf("%d entries, entry_count 0: %d allocations, gap %d; want %d and %d", c.n, len(r.Allocations), r.GapBytes, c.want, c.gap)
		}
	}
}

func TestTrailingBytesAccepted(t *testing.T) {
	b, _ := Encode(sampleReport(t))
	b = append(b, str("thread-name")...)
	r, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.TrailingBytes != 4+22 {
		t.Fatalf("trailing %d", r.TrailingBytes)
	}
}

func TestEmptyReport(t *testing.T) {
	b := header(15, 9, 8, 0, 15, 0, 0, 0)
	r, err := Parse(b)
	if err != nil || len(r.Allocations) != 0 || r.FrameCount() != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	enc, err := Encode(r)
	if err != nil || !bytes.Equal(enc, b) {
		t.Fatalf("empty report encodes to % x (%v)", enc, err)
	}
}

func TestParseRejects(t *testing.T) {
	good, err := Encode(sampleReport(t))
	if err != nil {
		t.Fatal(err)
	}
	r := sampleReport(t)
	strOff := HeaderLen + len(r.Allocations)*EntryHeaderLen + r.FrameCount()*FrameLen
	mod := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	put16 := func(off int, v uint16) []byte {
		return mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[off:], v); return b })
	}
	put32 := func(off int, v uint32) []byte {
		return mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[off:], v); return b })
	}
	firstFrame := HeaderLen + EntryHeaderLen
	cases := []struct {
		name   string
		b      []byte
		offset int
		what   string
	}{
		{"empty", nil, 0, "shorter than the 15-byte header"},
		{"short header", good[:14], 0, "shorter than the 15-byte header"},
		{"header_len too small", mod(func(b []byte) []byte { b[0] = 14; return b }), 0, "header_len 14"},
		{"header_len past end", header(200, 9, 8, 0, 15, 0, 0, 0), 0, "past the end"},
		{"entry_header_len too small", mod(func(b []byte) []byte { b[1] = 8; return b }), 1, "entry_header_len 8"},
		{"frame_len too small", mod(func(b []byte) []byte { b[2] = 7; return b }), 2, "frame_len 7"},
		{"strings offset past end", put32(5, uint32(len(good)+1)), 5, "strings_offset"},
		{"strings offset inside header", put32(5, 3), 5, "strings_offset"},
		{"strings offset huge", put32(5, 0xffffffff), 5, "strings_offset"},
		{"class count beyond payload", put16(9, 0xffff), strOff, "class name table: 65535 strings"},
		{"string length past end", put32(strOff, 0x7fffffff), strOff, "run past the end"},
		{"truncated in string table", good[:len(good)-1], -1, "run past the end"},
		{"truncated in string length", good[:len(good)-3-2*len("")], -1, ""},
		{"file count one too many", put16(13, uint16(len(r.Files)+1)), -1, "file name"},
		{"entry class index out of range", put16(HeaderLen+6, 99), HeaderLen + 6, "class index 99 out of range"},
		{"frame class index out of range", put16(firstFrame, 99), firstFrame, "class index 99"},
		{"frame method index out of range", put16(firstFrame+2, 99), firstFrame + 2, "method index 99"},
		{"frame file index out of range", put16(firstFrame+4, 99), firstFrame + 4, "file index 99"},
		{"count larger than entries", put16(3, 4), -1, "entries are truncated"},
		{"depth overruns strings", mod(func(b []byte) []byte { b[HeaderLen+8] = 200; return b }), HeaderLen + EntryHeaderLen, "overrun the string tables"},
		{"entry header cut by string tables", append(append(header(15, 9, 8, 1, 20, 1, 0, 0), 0, 0, 0, 1, 0), str("I")...), HeaderLen, "9-byte entry header overruns"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Parse(c.b)
			if err == nil {
				t.Fatalf("accepted: %d allocations", len(r.Allocations))
			}
			if r != nil {
				t.Fatal("returned a report with an error")
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err %T %v, want *ParseError", err, err)
			}
			if c.offset >= 0 && pe.Offset != c.offset {
				t.Errorf("offset %d, want %d (%v)", pe.Offset, c.offset, err)
			}
			if !strings.Contains(err.Error(), c.what) || !strings.Contains(err.Error(), "offset") {
				t.Errorf("error %q lacks %q", err, c.what)
			}
		})
	}
}

func TestParseNeverAllocatesBeyondPayload(t *testing.T) {
	// A 15-byte header that claims 65,535 entries and 65,535 strings of
	// each kind must be refused without allocating for them.
	b := header(15, 9, 8, 0xffff, 15, 0xffff, 0xffff, 0xffff)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := Parse(b); err == nil {
		t.Fatal("accepted")
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 16<<10 {
		t.Fatalf("%d bytes allocated to refuse a 15-byte payload", d)
	}
}

func TestParseAllocatesAboutThePayload(t *testing.T) {
	b := maxReport(t)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := Parse(b)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Allocations) != MaxEntries {
		t.Fatalf("%d allocations", len(r.Allocations))
	}
	got := after.TotalAlloc - before.TotalAlloc
	if float64(got) > 1.25*float64(len(b)) {
		t.Fatalf("parse allocated %d bytes for a %d-byte payload", got, len(b))
	}
	t.Logf("parse of %d bytes allocated %d bytes (%.2f×)", len(b), got, float64(got)/float64(len(b)))
}

func FuzzParse(f *testing.F) {
	real := readReal(f)
	f.Add(real[:4096])
	small, _ := Encode(sampleReport(f))
	f.Add(small)
	f.Add(header(15, 9, 8, 0, 15, 0, 0, 0))
	f.Add(append(header(17, 11, 10, 0, 17, 0, 0, 0), 0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || r != nil {
				t.Fatalf("bad error shape: %T %v", err, err)
			}
			return
		}
		// Every index must resolve, and the report must re-encode and
		// parse to the same records.
		for i := range r.Allocations {
			a := &r.Allocations[i]
			_ = r.ClassName(a)
			for _, fr := range r.Stack(a).All() {
				_ = r.FrameString(fr)
			}
			_ = r.AppendJSON(nil, i)
		}
		enc, err := Encode(r)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		back, err := Parse(enc)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if !sameRecords(back, r) {
			t.Fatal("re-parse differs")
		}
	})
}

// sameRecords compares two reports' tables and records, frame by frame.
func sameRecords(a, b *Report) bool {
	if !reflect.DeepEqual(a.Classes, b.Classes) || !reflect.DeepEqual(a.Methods, b.Methods) ||
		!reflect.DeepEqual(a.Files, b.Files) || !reflect.DeepEqual(a.RawClasses, b.RawClasses) ||
		len(a.Allocations) != len(b.Allocations) || a.FrameCount() != b.FrameCount() {
		return false
	}
	for i := range a.Allocations {
		x, y := &a.Allocations[i], &b.Allocations[i]
		if x.Size != y.Size || x.Thread != y.Thread || x.Class != y.Class || x.Depth != y.Depth ||
			!reflect.DeepEqual(a.Stack(x).Frames(), b.Stack(y).Frames()) {
			return false
		}
	}
	return true
}
