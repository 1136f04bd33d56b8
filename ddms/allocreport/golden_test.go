package allocreport

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// realReport is a report recorded on a device; see testdata/README.md at the
// repository root for its provenance and the facts checked against ddmlib.
var realReport = filepath.Join("..", "..", "testdata", "real", "geektime-chapter03-1544113611.real")

func readReal(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(realReport)
	if err != nil {
		// The file is committed with the project.
		t.Fatalf("reading the real report: %v", err)
	}
	return b
}

// siteKey names an allocation site: the allocated class and every frame.
func siteKey(r *Report, a *Allocation) string {
	var sb strings.Builder
	sb.WriteString(r.ClassName(a))
	for _, f := range r.Stack(a).All() {
		fmt.Fprintf(&sb, "|%s.%s(%s:%d)", r.Classes[f.Class], r.Methods[f.Method], r.Files[f.File], f.Line)
	}
	return sb.String()
}

func TestParseRealReport(t *testing.T) {
	b := readReal(t)
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != "7e7135d8c00da87c9b3fc64cef3bd0b5ae01066ac88b4ece5c314a48f7f03509" || len(b) != 563781 {
		t.Fatalf("real report changed: %d bytes, sha256 %s", len(b), got)
	}
	r, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.HeaderLen != 15 || r.EntryHeaderLen != 9 || r.FrameLen != 8 {
		t.Errorf("header lengths %d/%d/%d, want 15/9/8", r.HeaderLen, r.EntryHeaderLen, r.FrameLen)
	}
	if len(r.Allocations) != 5000 || r.DeclaredCount != 5000 {
		t.Errorf("%d allocations (declared %d), want 5000", len(r.Allocations), r.DeclaredCount)
	}
	if len(r.Classes) != 87 || len(r.Methods) != 116 || len(r.Files) != 50 {
		t.Errorf("tables %d/%d/%d, want 87/116/50", len(r.Classes), len(r.Methods), len(r.Files))
	}
	if r.StringsOffset != 552679 || r.TrailingBytes != 0 {
		t.Errorf("strings offset %d, trailing %d; want 552679, 0", r.StringsOffset, r.TrailingBytes)
	}
	if r.Num(0) != 5000 || r.Num(len(r.Allocations)-1) != 1 {
		t.Errorf("allocation numbers first %d last %d, want 5000 and 1", r.Num(0), r.Num(len(r.Allocations)-1))
	}
	threads := map[uint16]int{}
	depths := map[uint8]int{}
	native := 0
	classCount := map[string]int{}
	classBytes := map[string]uint64{}
	sites := map[string]bool{}
	for i := range r.Allocations {
		a := &r.Allocations[i]
		threads[a.Thread]++
		depths[a.Depth]++
		classCount[r.ClassName(a)]++
		classBytes[r.ClassName(a)] += uint64(a.Size)
		for _, f := range r.Stack(a).All() {
			if f.Line == -2 {
				native++
			}
		}
		sites[siteKey(r, a)] = true
	}
	if len(threads) != 2 || threads[3311] != 4968 || threads[3316] != 32 {
		t.Errorf("threads %v, want 3311:4968 3316:32", threads)
	}
	if len(depths) != 4 || depths[12] != 4000 || depths[16] != 958 || depths[0] != 32 || depths[13] != 10 {
		t.Errorf("depths %v", depths)
	}
	if native != 4171 {
		t.Errorf("%d native frames, want 4171", native)
	}
	if got := r.TotalBytes(); got != 287096 {
		t.Errorf("total bytes %d, want 287096", got)
	}
	if classCount["android.os.Message"] != 4000 || classBytes["android.os.Message"] != 256000 {
		t.Errorf("android.os.Message: %d allocations, %d bytes", classCount["android.os.Message"], classBytes["android.os.Message"])
	}
	for c, n := range classCount {
		if n > 4000 {
			t.Errorf("%s allocated %d times, more than android.os.Message", c, n)
		}
	}
	if len(sites) != 228 {
		t.Errorf("%d distinct sites, want 228", len(sites))
	}
	has := func(tab []string, s string) bool {
		for _, x := range tab {
			if x == s {
				return true
			}
		}
		return false
	}
	for _, want := range []string{"java.lang.String", "int[]", "android.view.Choreographer"} {
		if !has(r.Classes, want) {
			t.Errorf("class table lacks %q", want)
		}
	}
	for _, tab := range [][]string{r.Classes, r.Methods, r.Files} {
		for _, s := range tab {
			if strings.HasPrefix(s, "L") && strings.HasSuffix(s, ";") || strings.HasPrefix(s, "[") {
				t.Errorf("name %q is not in dotted form", s)
			}
		}
	}
	if !has(r.RawClasses, "Ljava/lang/String;") {
		t.Errorf("raw class table lacks Ljava/lang/String;")
	}
}
