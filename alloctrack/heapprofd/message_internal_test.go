package heapprofd

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// TestFirstLineCopiesNoMore: quoting a command's output in a message
// copies a bounded prefix of it, never the whole (a trace read's output
// may be megabytes), and still finds the first line with text.
func TestFirstLineCopiesNoMore(t *testing.T) {
	big := append([]byte("\n  \nerror: no such file\n"), bytes.Repeat([]byte("x"), 16<<20)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := firstLine(nil, big)
	runtime.ReadMemStats(&after)
	if got != "error: no such file" {
		t.Errorf("firstLine = %q", got)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Errorf("firstLine of a 16 MiB output allocated %d bytes", d)
	}
	long := firstLine(bytes.Repeat([]byte("y"), 16<<20), nil)
	if want := strings.Repeat("y", 200) + "…"; long != want {
		t.Errorf("a long line is quoted as %d bytes, want the first 200 and …", len(long))
	}
	if got := firstLine([]byte(" \n\t\n"), []byte("\nout\n")); got != "out" {
		t.Errorf("firstLine of blank stderr = %q, want stdout's", got)
	}
	if got := firstLine(nil, nil); got != "(no message)" {
		t.Errorf("firstLine of nothing = %q", got)
	}
}
