package heapdump

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/alloctrack/alloctrack/internal/hproftest"
	"github.com/alloctrack/alloctrack/internal/realtest"
)

// A shrunk dump keeps its objects, Strings' values and one of each Bitmap
// buffer, loses every other array's values, and still reads, analyses,
// converts (with hprof-conv too) and answers the same leaks and strings.
func TestShrink(t *testing.T) {
	dump := hproftest.LeakyDump()
	var out bytes.Buffer
	st, err := Shrink(bytes.NewReader(dump), &out)
	if err != nil {
		t.Fatal(err)
	}
	// Emptied: the Activity's byte[1000]; one of the two equal 400-byte
	// Bitmap buffers left out.
	if st.Emptied != 1 || st.EmptiedBytes != 1000 || st.DuplicateBuffers != 1 || st.DuplicateBufferBytes != 400 {
		t.Errorf("stats %+v", st)
	}
	if want := len(dump) - 1000 - 400 - (1 + 4 + 4 + 4 + 1); out.Len() != want {
		t.Errorf("shrunk to %d bytes, want %d", out.Len(), want)
	}
	r := bytes.NewReader(out.Bytes())
	g, err := ReadGraph(r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.Analyze(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Leaks) != 2 || len(a.DuplicateStrings) != 1 || a.DuplicateStrings[0].Value != "hello" || len(a.DuplicateBitmaps) != 1 || a.DuplicateBitmaps[0].Buffers != 1 {
		t.Errorf("leaks %d, strings %+v, bitmaps %+v", len(a.Leaks), a.DuplicateStrings, a.DuplicateBitmaps)
	}
	// Both Bitmaps now share the kept buffer.
	if ret, _ := g.Retained(0x4100); ret != 400 {
		t.Errorf("the kept buffer retains %d", ret)
	}
	if d, _ := g.Dominator(0x4100); d != 0x5000 {
		t.Errorf("the kept buffer is dominated by 0x%x, want the array holding both Bitmaps", d)
	}
	var std bytes.Buffer
	if err := hprof.ConvertStandard(bytes.NewReader(out.Bytes()), &std, false); err != nil {
		t.Fatal(err)
	}
	conv := realtest.Program(t, "hprof-conv", "hprof-conv", "/usr/lib/android-sdk/platform-tools")
	dir := t.TempDir()
	in, ref := filepath.Join(dir, "s.hprof"), filepath.Join(dir, "s2.hprof")
	os.WriteFile(in, out.Bytes(), 0o644)
	if o, err := exec.Command(conv, in, ref).CombinedOutput(); err != nil {
		t.Fatalf("hprof-conv: %v\n%s", err, o)
	}
	if want, _ := os.ReadFile(ref); !bytes.Equal(std.Bytes(), want) {
		t.Error("hprof-conv converts the shrunk dump differently")
	}
}

// Rewrite without edits writes the dump back byte for byte.
func TestRewriteIdentity(t *testing.T) {
	for _, d := range [][]byte{hproftest.AndroidDump(), hproftest.LeakyDump(), hproftest.ManyObjects(20000)} {
		var out bytes.Buffer
		if err := hprof.Rewrite(bytes.NewReader(d), &out, hprof.Edit{}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), d) {
			t.Errorf("%d bytes rewritten as %d, not the same", len(d), out.Len())
		}
	}
}
