package heapdump

import (
	"bytes"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/hproftest"
)

func TestAnalyzeLeaksAndDuplicates(t *testing.T) {
	r := bytes.NewReader(hproftest.LeakyDump())
	g, err := ReadGraph(r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.Analyze(r, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Leaks) != 2 {
		t.Fatalf("leaks %+v, want the destroyed Activity and the detached Fragment", a.Leaks)
	}
	act, frag := a.Leaks[0], a.Leaks[1]
	if act.Kind != "activity" || act.ID != 0x1000 || act.Class != "com.example.MainActivity" || act.Retained != 4+2+1000 || act.Why != "mDestroyed is true" {
		t.Errorf("activity leak %+v", act)
	}
	if got := steps(act.Path); got != "class com.example.Leaky (system class) static sActivity -> com.example.MainActivity" {
		t.Errorf("activity path %q", got)
	}
	if frag.Kind != "fragment" || frag.ID != 0x2001 || frag.Why != "mFragmentManager is null" {
		t.Errorf("fragment leak %+v", frag)
	}
	if got := steps(frag.Path); got != "java.lang.Object[] (unknown) [0] -> com.example.MyFragment" {
		t.Errorf("fragment path %q", got)
	}
	if len(a.DuplicateStrings) != 2 {
		t.Fatalf("duplicate strings %+v", a.DuplicateStrings)
	}
	hello, shared := a.DuplicateStrings[0], a.DuplicateStrings[1]
	// hello: 3 strings (8 bytes each) in 3 arrays (10 bytes each).
	if hello.Value != "hello" || hello.Copies != 3 || hello.Buffers != 3 || hello.Wasted != 2*10+2*8 {
		t.Errorf("hello %+v", hello)
	}
	if shared.Value != "shared" || shared.Copies != 2 || shared.Buffers != 1 || shared.Wasted != 8 {
		t.Errorf("shared %+v", shared)
	}
	if len(a.DuplicateBitmaps) != 1 || a.DuplicateBitmaps[0].Value != "10x10" || a.DuplicateBitmaps[0].Wasted != 400+12 {
		t.Errorf("duplicate bitmaps %+v", a.DuplicateBitmaps)
	}
}

func steps(p []Step) string {
	var parts []string
	for _, s := range p {
		x := s.Class
		if s.Root != "" {
			x += " (" + s.Root + ")"
		}
		if s.Ref != "" {
			x += " " + s.Ref
		}
		parts = append(parts, x)
	}
	return strings.Join(parts, " -> ")
}
