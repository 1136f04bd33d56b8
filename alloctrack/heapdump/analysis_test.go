package heapdump

import (
	"bytes"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/ddms/hprof"
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

// TestLeakPathsNameEachStepsOwnReference builds a dump where the leaks'
// paths share objects: a destroyed Activity holds a detached Fragment
// (mFragment), and one array holds two more. Each step must name how
// that path leaves it, and a leak's last step nothing.
func TestLeakPathsNameEachStepsOwnReference(t *testing.T) {
	b := hproftest.NewBuilder("JAVA PROFILE 1.0.3")
	const (
		cObject = 0x100 + iota
		cActivity
		cMain
		cLeaky
		cFragment
		cMyFragment
		cArray
	)
	obj := hprof.Object
	b.Class(cObject, 0, "java.lang.Object", nil, nil)
	b.Class(cActivity, cObject, "android.app.Activity", []hproftest.Field{{Name: "mDestroyed", Type: hprof.Boolean}}, nil)
	b.Class(cMain, cActivity, "com.example.MainActivity", []hproftest.Field{{Name: "mOther", Type: obj}, {Name: "mFragment", Type: obj}}, nil)
	b.Class(cLeaky, cObject, "com.example.Leaky", nil, []hproftest.StaticRef{{Name: "sActivity", Value: 0x1000}})
	b.Class(cFragment, cObject, "androidx.fragment.app.Fragment", []hproftest.Field{{Name: "mFragmentManager", Type: obj}}, nil)
	b.Class(cMyFragment, cFragment, "com.example.MyFragment", nil, nil)
	b.Class(cArray, cObject, "java.lang.Object[]", nil, nil)
	b.Instance(0x1000, cMain, 0, 0x2001, 1) // destroyed; mFragment holds a detached Fragment
	b.Instance(0x2001, cMyFragment, 0)
	b.Instance(0x2002, cMyFragment, 0)
	b.Instance(0x2003, cMyFragment, 0)
	b.ObjectArray(0x3000, cArray, 0x2002, 0x2003)
	b.Root(hprof.RootStickyClass, cLeaky)
	b.Root(hprof.RootUnknown, 0x3000)
	r := bytes.NewReader(b.Bytes())
	g, err := ReadGraph(r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.Analyze(r, 10)
	if err != nil {
		t.Fatal(err)
	}
	const leaky = "class com.example.Leaky (system class) static sActivity -> "
	want := map[uint64]string{
		0x1000: leaky + "com.example.MainActivity",
		0x2001: leaky + "com.example.MainActivity mFragment -> com.example.MyFragment",
		0x2002: "java.lang.Object[] (unknown) [0] -> com.example.MyFragment",
		0x2003: "java.lang.Object[] (unknown) [1] -> com.example.MyFragment",
	}
	if len(a.Leaks) != len(want) {
		t.Fatalf("%d leaks %+v, want %d", len(a.Leaks), a.Leaks, len(want))
	}
	for _, l := range a.Leaks {
		if got := steps(l.Path); got != want[l.ID] {
			t.Errorf("leak 0x%x: path %q, want %q", l.ID, got, want[l.ID])
		}
	}
}
