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
	// Two Strings sharing one array of "shared" are one copy, not
	// duplicates (fact 8).
	if len(a.DuplicateStrings) != 1 {
		t.Fatalf("duplicate strings %+v", a.DuplicateStrings)
	}
	// hello: 3 strings (8 bytes each) in 3 arrays (10 bytes each).
	if hello := a.DuplicateStrings[0]; hello.Value != "hello" || hello.Copies != 3 || hello.Buffers != 3 || hello.Wasted != 2*10+2*8 {
		t.Errorf("hello %+v", hello)
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

// Android 5's Strings are count chars of their char[] from offset: the
// text is that range (a substring is the part it names, not its line),
// two Strings over one range of one array are one copy, and a range that
// does not fit its array, or a value that is no array, is left out.
func TestDuplicateStringRanges(t *testing.T) {
	b := hproftest.NewBuilder("JAVA PROFILE 1.0.3")
	const cObject, cString, cArray = 0x100, 0x101, 0x102
	in := hprof.Int
	b.Class(cObject, 0, "java.lang.Object", nil, nil)
	b.Class(cString, cObject, "java.lang.String", []hproftest.Field{{Name: "value", Type: hprof.Object}, {Name: "count", Type: in}, {Name: "hashCode", Type: in}, {Name: "offset", Type: in}}, nil)
	b.Class(cArray, cObject, "java.lang.Object[]", nil, nil)
	b.HeapInfo('A', "app")
	b.PrimitiveArray(0x1000, hprof.Char, 12, utf16be("k=hello;help"))
	b.PrimitiveArray(0x1001, hprof.Char, 5, utf16be("hello"))
	b.PrimitiveArray(0x1002, hprof.Char, 7, utf16be("x=help;"))
	// value, count, hashCode, offset
	b.Instance(0x2000, cString, 0x1000, 5, 0, 2) // "hello" cut from the line
	b.Instance(0x2001, cString, 0x1000, 5, 0, 2) // the same range again: one copy
	b.Instance(0x2002, cString, 0x1001, 5, 0, 0) // "hello" of its own
	b.Instance(0x2003, cString, 0x1000, 4, 0, 8) // "help"
	b.Instance(0x2004, cString, 0x1002, 4, 0, 2) // "help" again
	b.Instance(0x2005, cString, 0x1002, 9, 0, 2) // past the array's end
	b.Instance(0x2006, cString, 0x1001, 5, 0, 0) // shares 0x2002's array
	b.Instance(0x2007, cString, cArray, 5, 0, 0) // a class for its value
	b.Instance(0x2008, cString, cArray, 5, 0, 0)
	b.ObjectArray(0x3000, cArray, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008)
	b.Root(hprof.RootUnknown, 0x3000)
	r := bytes.NewReader(b.Bytes())
	g, err := ReadGraph(r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.Analyze(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Duplicate{}
	for _, d := range a.DuplicateStrings {
		got[d.Value] = d
	}
	hello, help := got["hello"], got["help"]
	if len(got) != 2 || hello.Copies != 2 || hello.Buffers != 2 || hello.BufferBytes != 10 || help.Copies != 2 || help.BufferBytes != 8 {
		t.Errorf("duplicate strings %+v; want hello and help, 2 copies each", a.DuplicateStrings)
	}
}

func utf16be(s string) []byte {
	var b []byte
	for _, r := range s {
		b = append(b, byte(r>>8), byte(r))
	}
	return b
}
