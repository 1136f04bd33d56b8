package allocreport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// This file checks Parse against Google's ddmlib 25.2.2 AllocationsParser,
// the parser Android Studio and DDMS used. ddmlib is not part of this
// repository: the Debian package libandroid-ddms-java installs its jar, and
// tools/ddmlibref/DdmlibRef.java (our own harness) calls it at run time.

// ddmlibJarDefault is where libandroid-ddms-java puts ddmlib; the
// environment variable DDMLIB_JAR overrides it.
const ddmlibJarDefault = "/usr/share/java/com.android.tools.ddms.ddmlib.jar"

var ddmlibRefSource = filepath.Join("..", "..", "tools", "ddmlibref", "DdmlibRef.java")

// ddmlibRef compiles the harness into a temporary directory and returns the
// java binary and the class path to run it with. When java, javac or the jar
// is missing it fails the test under CI (CI non-empty) and skips it
// otherwise.
func ddmlibRef(t *testing.T) (java, classpath string) {
	t.Helper()
	jar := os.Getenv("DDMLIB_JAR")
	if jar == "" {
		jar = ddmlibJarDefault
	}
	var missing []string
	java, errJava := exec.LookPath("java")
	if errJava != nil {
		missing = append(missing, "java (a JDK, e.g. Debian openjdk-17-jdk-headless)")
	}
	javac, errJavac := exec.LookPath("javac")
	if errJavac != nil {
		missing = append(missing, "javac (a JDK, e.g. Debian openjdk-17-jdk-headless)")
	}
	if _, err := os.Stat(jar); err != nil {
		missing = append(missing, fmt.Sprintf("ddmlib jar %s (Debian package libandroid-ddms-java, or set DDMLIB_JAR)", jar))
	}
	if len(missing) > 0 {
		msg := "comparison with Google's ddmlib needs " + strings.Join(missing, ", ") +
			"; install them (apt-get install libandroid-ddms-java openjdk-17-jdk-headless)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " [CI is set, so this is a failure]")
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	cmd := exec.Command(javac, "-nowarn", "-d", dir, "-cp", jar, ddmlibRefSource)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return java, dir + string(os.PathListSeparator) + jar
}

// ddmlibDump runs the harness's dump mode on payload and returns its output.
func ddmlibDump(t *testing.T, java, classpath string, payload []byte) []byte {
	t.Helper()
	file := filepath.Join(t.TempDir(), "report.real")
	if err := os.WriteFile(file, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(java, "-Xss4m", "-cp", classpath, "DdmlibRef", "dump", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ddmlib failed on the payload: %v\n%s", err, stderr.Bytes())
	}
	return out
}

// goDump is the Go counterpart of ddmlibDump: Parse, then AppendJSON for
// every allocation, one per line.
func goDump(t *testing.T, payload []byte) []byte {
	t.Helper()
	r, err := Parse(payload)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	var out []byte
	for i := range r.Allocations {
		out = r.AppendJSON(out, i)
		out = append(out, '\n')
	}
	return out
}

// firstDifference describes where got (Go) and want (ddmlib) first differ,
// or returns "" when they are equal.
func firstDifference(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	g := strings.SplitAfter(string(got), "\n")
	w := strings.SplitAfter(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl == wl {
			continue
		}
		col := 0
		for col < len(gl) && col < len(wl) && gl[col] == wl[col] {
			col++
		}
		clip := func(s string) string {
			const ctx = 200
			lo := max(col-ctx, 0)
			hi := min(col+ctx, len(s))
			pre, post := "", ""
			if lo > 0 {
				pre = "…"
			}
			if hi < len(s) {
				post = "…"
			}
			return fmt.Sprintf("%s%q%s", pre, s[lo:hi], post)
		}
		return fmt.Sprintf("line %d (of Go %d, ddmlib %d), first difference at byte %d:\n  Go:     %s\n  ddmlib: %s",
			i+1, strings.Count(string(got), "\n"), strings.Count(string(want), "\n"), col, clip(gl), clip(wl))
	}
	return "outputs differ" // not reached
}

// edgeReport exercises descriptors, the primitive-code conversion ddmlib
// applies to every table, unusual lines, sizes and thread ids, and empty
// stacks.
func edgeReport(t *testing.T) []byte {
	b := NewBuilder()
	fr := func(c, m, f string, line int16) FrameName { return FrameName{Class: c, Method: m, File: f, Line: line} }
	b.Add(16, 3311, "[I", []FrameName{
		fr("Ljava/lang/String;", "I", "Z", 12),                // method "I" -> int, file "Z" -> boolean
		fr("Landroid/os/Handler;", "dispatchMessage", "", -1), // no file, no line
		fr("Ljava/lang/Object;", "wait", "Object.java", -2),   // native
	})
	b.Add(0, 0, "[[Landroid/os/Message;", nil) // depth 0
	b.Add(0xFFFFFFFF, 40000, "Ljava/lang/String;", []FrameName{fr("[[Landroid/os/Message;", "J", "", 0)})
	b.Add(0x80000000, 32768, "[Ljava/lang/String;", []FrameName{fr("B", "C", "S", 32767)})
	b.Add(0x7FFFFFFF, 32767, "Z", []FrameName{fr("F", "D", "[J", -32768)})
	b.Add(1, 65535, "[[[D", []FrameName{fr("Lcom/example/Outer$Inner;", "<init>", "Outer.java", 1)})
	// Not descriptors: kept as sent (ddmlib changes only L…; and single letters).
	b.Add(24, 1, "java/lang/String", []FrameName{fr("L;", "Lx", "x;", 7), fr("[", "[L;", "[[", 8), fr("", "", "", 9), fr("V", "II", "[Z", 10)})
	b.Add(32, 2, "Lpkg/With/Slashes;", []FrameName{fr("Lno/semicolon", "L/a/b/;", "La;b;", 11)})
	return encodeBuilder(t, b)
}

// deepReport has a 255-frame stack (the u8 maximum) among shallower ones.
func deepReport(t *testing.T) []byte {
	b := NewBuilder()
	deep := make([]FrameName, 255)
	for i := range deep {
		deep[i] = FrameName{
			Class:  fmt.Sprintf("Lcom/example/Deep%d;", i%37),
			Method: fmt.Sprintf("recurse%d", i%101),
			File:   fmt.Sprintf("Deep%d.java", i%37),
			Line:   int16(i*131 - 10000),
		}
	}
	b.Add(48, 7, "Ljava/lang/StackOverflowError;", deep)
	b.Add(16, 7, "[B", deep[:1])
	b.Add(16, 7, "[C", deep[:254])
	b.Add(16, 7, "[S", nil)
	return encodeBuilder(t, b)
}

// textReport has non-ASCII names, characters JSON must escape, and
// characters it must not.
func textReport(t *testing.T) []byte {
	b := NewBuilder()
	b.Add(8, 1, "Lcom/ünï/Cödé;", []FrameName{
		{Class: "LÜnïcödé;", Method: "Ünïcödé", File: "Ünïcödé.java", Line: 1},
		{Class: "L名前/クラス;", Method: "メソッド", File: "名前.kt", Line: 2},
		{Class: "Lemoji/😀;", Method: "𝔘𝔫𝔦", File: "😀.java", Line: 3}, // surrogate pairs on the wire
		{Class: `Lq/"quoted"\back;`, Method: "tab\there", File: "a\"b\\c\td", Line: 4},
		{Class: "Lctl/\x01\x1f;", Method: "del\x7f", File: "nl\nr\r", Line: 5},
		{Class: "Lsep/\u2028\u2029;", Method: "<html>&amp;", File: "\u00a0\ufeff\uffff", Line: 6},
		{Class: "/", Method: "'single'", File: "\x00", Line: 7},
	})
	b.Add(8, 2, "[Lcom/ünï/Cödé;", nil)
	b.Add(8, 3, "L\"\\;", nil)
	return encodeBuilder(t, b)
}

func encodeBuilder(t *testing.T, b *Builder) []byte {
	t.Helper()
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// duplicateTablesReport has repeated names in its tables, as Dalvik sends,
// and a file table index that is not the class's.
func duplicateTablesReport(t *testing.T) []byte {
	r := &Report{
		RawClasses: []string{"Ljava/lang/String;", "Ljava/lang/String;", "[I", "[I"},
		RawMethods: []string{"toString", "toString", "I"},
		RawFiles:   []string{"String.java", "", "String.java", ""},
	}
	r.Append(24, 9, 1, []Frame{{Class: 0, Method: 1, File: 2, Line: 100}, {Class: 1, Method: 2, File: 3, Line: -2}})
	r.Append(40, 9, 3, []Frame{{Class: 3, Method: 0, File: 0, Line: -1}})
	r.Append(16, 10, 0, nil)
	p, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// widen re-lays out a 15/9/8 payload with larger header, entry-header and
// frame lengths, filling the extra bytes with 0xEE, as a future VM might
// send. The string tables and anything after them are copied unchanged.
func widen(t *testing.T, p []byte, headerLen, entryHeaderLen, frameLen int) []byte {
	t.Helper()
	if p[0] != HeaderLen || p[1] != EntryHeaderLen || p[2] != FrameLen {
		t.Fatalf("widen: payload is %d/%d/%d, want 15/9/8", p[0], p[1], p[2])
	}
	pad := func(b []byte, n int) []byte { return append(b, bytes.Repeat([]byte{0xEE}, n)...) }
	strOff := int(binary.BigEndian.Uint32(p[5:]))
	out := append([]byte(nil), p[:HeaderLen]...)
	out[0], out[1], out[2] = byte(headerLen), byte(entryHeaderLen), byte(frameLen)
	out = pad(out, headerLen-HeaderLen)
	for pos := HeaderLen; pos < strOff; {
		depth := int(p[pos+8])
		out = append(out, p[pos:pos+EntryHeaderLen]...)
		out = pad(out, entryHeaderLen-EntryHeaderLen)
		pos += EntryHeaderLen
		for range depth {
			out = append(out, p[pos:pos+FrameLen]...)
			out = pad(out, frameLen-FrameLen)
			pos += FrameLen
		}
	}
	binary.BigEndian.PutUint32(out[5:], uint32(len(out)))
	return append(out, p[strOff:]...)
}

func TestMatchesDdmlib(t *testing.T) {
	java, classpath := ddmlibRef(t)

	edge := edgeReport(t)
	cases := []struct {
		name    string
		payload func(t *testing.T) []byte
	}{
		{"real-geektime", func(t *testing.T) []byte { return readReal(t) }},
		{"edge", func(t *testing.T) []byte { return edge }},
		{"depth-255", deepReport},
		{"text", textReport},
		{"duplicate-tables", duplicateTablesReport},
		{"empty", func(t *testing.T) []byte { return encodeBuilder(t, NewBuilder()) }},
		{"wide-17-11-10", func(t *testing.T) []byte {
			p := widen(t, edge, 17, 11, 10)
			r, err := Parse(edge)
			if err != nil {
				t.Fatal(err)
			}
			if wantLen := len(edge) + 2 + 2*len(r.Allocations) + 2*r.FrameCount(); p[0] != 17 || p[1] != 11 || p[2] != 10 || len(p) != wantLen {
				t.Fatalf("widened payload: %d/%d/%d, %d bytes; want 17/11/10, %d bytes", p[0], p[1], p[2], len(p), wantLen)
			}
			return p
		}},
		{"wide-real", func(t *testing.T) []byte { return widen(t, readReal(t), 40, 20, 12) }},
		// Padded lengths and bytes between the last entry and
		// strings_offset: ddmlib reads entry_count entries, then jumps.
		{"gap-padded-real", func(t *testing.T) []byte {
			p := withGap(widen(t, readReal(t), 20, 16, 12), 37, 0xEE)
			if r, err := Parse(p); err != nil || r.GapBytes != 37 {
				t.Fatalf("Parse: %v (%+v)", err, r)
			}
			return p
		}},
		{"gap-padded-edge", func(t *testing.T) []byte { return withGap(widen(t, edge, 17, 16, 10), 5, 0) }},
		// A whole entry left out of entry_count is a gap too.
		{"gap-undeclared-entry", func(t *testing.T) []byte {
			p := append([]byte(nil), edge...)
			binary.BigEndian.PutUint16(p[3:], binary.BigEndian.Uint16(p[3:])-1)
			if r, err := Parse(p); err != nil || r.GapBytes == 0 {
				t.Fatalf("Parse: %v (%+v)", err, r)
			}
			return p
		}},
		{"trailing-bytes", func(t *testing.T) []byte {
			p := append(append([]byte(nil), edge...), 0, 0, 0, 2, 0xDE, 0xAD, 0xBE, 0xEF, 1)
			if r, err := Parse(p); err != nil || r.TrailingBytes != 9 {
				t.Fatalf("Parse: %v (%+v)", err, r)
			}
			return p
		}},
		{"max", func(t *testing.T) []byte {
			if testing.Short() {
				t.Skip("the maximum-size report's dump is about 100 MB; skipped in -short mode")
			}
			return maxReport(t)
		}},
		{"max-large-tables", func(t *testing.T) []byte {
			if testing.Short() {
				t.Skip("the maximum-size report's dump is about 100 MB; skipped in -short mode")
			}
			return maxReportLargeTables(t)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			payload := c.payload(t)
			want := ddmlibDump(t, java, classpath, payload)
			got := goDump(t, payload)
			if d := firstDifference(got, want); d != "" {
				t.Fatalf("Go's Parse+AppendJSON differs from ddmlib's AllocationsParser: %s", d)
			}
			t.Logf("%d bytes, %d allocations, identical", len(payload), bytes.Count(got, []byte("\n")))
		})
	}
}

// TestDdmlibHarnessDetectsDifferences makes sure the comparison above can
// fail: a payload with one byte changed must not match the original's dump.
func TestDdmlibHarnessDetectsDifferences(t *testing.T) {
	java, classpath := ddmlibRef(t)
	p := edgeReport(t)
	q := append([]byte(nil), p...)
	q[HeaderLen+4]++ // thread id of the first entry
	if d := firstDifference(goDump(t, p), ddmlibDump(t, java, classpath, q)); !strings.Contains(d, "line 1 ") {
		t.Fatalf("changed thread id not detected; difference: %q", d)
	}
}

func BenchmarkParseMax(b *testing.B) {
	p := maxReport(b)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseMaxLargeTables(b *testing.B) {
	p := maxReportLargeTables(b)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseReal(b *testing.B) {
	p := readReal(b)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(p); err != nil {
			b.Fatal(err)
		}
	}
}
