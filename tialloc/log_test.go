package tialloc

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/tialloctest"
)

func parse(t *testing.T, s string) *Log {
	t.Helper()
	l, err := Parse(strings.NewReader(s), "test.log")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// frameText formats a parsed frame back into the agent's text.
func frameText(f Frame) string {
	switch {
	case f.Method == "":
		return "ERROR"
	case f.Class != "":
		return f.Class + "::" + f.Method + f.Signature
	}
	return f.Method + f.Signature
}

// TestGeneratedLogs parses random logs written as the README describes,
// in both frame layouts, and checks every sample's thread, class, size and
// stack against what was written.
func TestGeneratedLogs(t *testing.T) {
	for _, classes := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
		var frames []string
		for i := range 40 {
			m := "m" + string(rune('a'+i%26)) + "(I)V"
			if i%5 == 0 {
				m = "run()Ljava/lang/Object;"
			}
			if classes {
				m = "Lcom/example/C" + string(rune('A'+i%7)) + ";::" + m
			}
			frames = append(frames, m)
		}
		w := tialloctest.NewWriter()
		want := map[string]uint64{}
		total := uint64(0)
		for range 3000 {
			s := tialloctest.Sample{Thread: []string{"main", "worker, 2", "pool-1-thread-3]"}[rng.IntN(3)],
				Class: []string{"[I", "Ljava/lang/String;", "", "[[Lcom/example/Foo;"}[rng.IntN(4)], Size: uint64(rng.IntN(5000))}
			for range rng.IntN(12) {
				s.Frames = append(s.Frames, frames[rng.IntN(8)+rng.IntN(4)*8])
			}
			w.Add(s)
			want[tialloctest.Alloc(s)+"|"+strings.Join(s.Frames, ";")]++
			total++
		}
		l := parse(t, w.String())
		if l.Samples != total || l.CutLine {
			t.Fatalf("samples %d (cut %v), want %d", l.Samples, l.CutLine, total)
		}
		wantLayout := LayoutMethods
		if classes {
			wantLayout = LayoutClasses
		}
		if l.Layout != wantLayout {
			t.Errorf("layout %v, want %v", l.Layout, wantLayout)
		}
		got := map[string]uint64{}
		for _, st := range l.Stacks {
			a := l.Allocs[st.Alloc]
			var fs []string
			for _, f := range st.Frames {
				fs = append(fs, frameText(l.Frames[f]))
			}
			slices.Reverse(fs) // back to the file's order, outermost first
			got[tialloctest.Alloc(tialloctest.Sample{Thread: a.Thread, Class: a.Class, File: a.File, Size: a.Size})+"|"+strings.Join(fs, ";")] += st.Samples
		}
		if len(got) != len(want) {
			t.Fatalf("%d distinct samples, want %d", len(got), len(want))
		}
		for k, n := range want {
			if got[k] != n {
				t.Errorf("%s: %d samples, want %d", k, got[k], n)
			}
		}
	}
}

func TestReleasedLayout(t *testing.T) {
	log := "+0,jthread[main], jclass[Ljava/lang/String; file: String.java], size[32, hex: 0x20]\n" +
		"+1,LMain;::main([Ljava/lang/String;)V\n" +
		"+2,Ljava/lang/reflect/Array;::newInstance(Ljava/lang/Class;I)Ljava/lang/Object;\n" +
		"+3,ERROR\n" +
		"=4,0;1;3;2\n4\n4\n" +
		"=5,0\n5\n"
	l := parse(t, log)
	if l.Layout != LayoutClasses || l.Samples != 3 || len(l.Stacks) != 2 {
		t.Fatalf("layout %v, samples %d, stacks %d", l.Layout, l.Samples, len(l.Stacks))
	}
	a := l.Allocs[0]
	if a != (Alloc{Thread: "main", Class: "Ljava/lang/String;", File: "String.java", Size: 32}) {
		t.Errorf("alloc %+v", a)
	}
	st := l.Stacks[0]
	top := l.Frames[st.Frames[0]]
	if st.Samples != 2 || len(st.Frames) != 3 || top.Class != "Ljava/lang/reflect/Array;" || top.Method != "newInstance" || top.Signature != "(Ljava/lang/Class;I)Ljava/lang/Object;" {
		t.Errorf("stack %+v, top frame %+v", st, top)
	}
	if f := l.Frames[st.Frames[1]]; f != (Frame{}) {
		t.Errorf("ERROR frame parsed as %+v", f)
	}
	if got := l.FrameCount(); got != 3 {
		t.Errorf("FrameCount %d", got)
	}
	if len(l.Stacks[1].Frames) != 0 || l.Stacks[1].Samples != 1 {
		t.Errorf("stack without frames: %+v", l.Stacks[1])
	}
}

func TestCutLastLine(t *testing.T) {
	l := parse(t, "+0,jthread[main], jclass[[I file: <UNKNOWN_FILE>], size[24, hex: 0x18]\n=1,0\n1\n1")
	if !l.CutLine || l.Samples != 1 {
		t.Errorf("cut %v, samples %d: want the unterminated last line left out", l.CutLine, l.Samples)
	}
}

func TestErrors(t *testing.T) {
	const alloc = "+0,jthread[main], jclass[[I file: <UNKNOWN_FILE>], size[24, hex: 0x18]\n"
	for _, c := range []struct{ log, want string }{
		{alloc + "=1,0;7\n", "test.log:2: stack trace 1 refers to key 7, which is not defined"},
		{alloc + "=1,0\n2\n", "test.log:3: sample of key 2, which is not defined"},
		{alloc + "0\n", "test.log:2: sample of key 0, which is not a stack trace"},
		{alloc + "+1,run()V\n=2,1;0\n", "test.log:3: stack trace 2 begins with key 1, which is not an allocation"},
		{alloc + "+1,run()V\n=2,0;1;0\n", "test.log:3: stack trace 2: key 0 is not a frame"},
		{alloc + "+0,run()V\n", "test.log:2: key 0 defined again"},
		{alloc + "+1,run\n", "is not \"name(signature)\""},
		{"+0,jthread[main], jclass[[I], size[24, hex: 0x18]\n", "is not \"SIGNATURE file: FILE\""},
		{"+0,jthread[main], jclass[[I file: x], size[24, hex: 0x19]\n", "decimal and hex differ"},
		{"+0,jthread[main], size[24, hex: 0x18]\n", "without jclass"},
		{"+0,jthread[main], jclass[[I file: x]\n", "without size"},
		{alloc + "\n", "test.log:2: empty line"},
		{alloc + "=1,0;;\n", "test.log:2: bad key"},
		{alloc + "+99999999999,run()V\n", "bad key"},
		{alloc + "+4294967296,run()V\n", "key 4294967296 out of range"},
		{alloc + "+1 run()V\n", "has no comma"},
		{alloc + "hello\n", "test.log:2: not a definition (+ or =) nor a sample"},
		{"#1(VMObjectAlloc(#0(jthread[main], jclass[[I file: <UNKNOWN_FILE>], size[24, hex: 0x18]))\n", "first development version"},
		// Sizes are jlongs: above one, or negative, is no size the agent writes.
		{"+0,jthread[main], jclass[[I file: x], size[9223372036854775808, hex: 0x8000000000000000]\n", "test.log:1: allocation size 9223372036854775808 is outside a jlong"},
		{"+0,jthread[main], jclass[[I file: x], size[18446744073709551616, hex: 0x10000000000000000]\n", "test.log:1: allocation size 18446744073709551616 is outside a jlong"},
		{"+0,jthread[main], jclass[[I file: x], size[-1, hex: 0xffffffffffffffff]\n", "test.log:1: allocation size -1 is outside a jlong"},
		// Two samples of 2^62 bytes sum to 2^63: past a jlong (and 2^63
		// twice would wrap to 0 in a uint64).
		{"+0,jthread[main], jclass[[I file: x], size[4611686018427387904, hex: 0x4000000000000000]\n=1,0\n1\n1\n", "test.log:4: the sampled sizes sum past a jlong"},
	} {
		_, err := Parse(strings.NewReader(c.log), "test.log")
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want a SyntaxError with %q", c.log, err, c.want)
		}
	}
}

// TestLargestSizes reads the largest size a jlong holds, and a sum that
// just fits: exact, not wrapped.
func TestLargestSizes(t *testing.T) {
	l := parse(t, "+0,jthread[main], jclass[[I file: x], size[9223372036854775807, hex: 0x7fffffffffffffff]\n=1,0\n1\n")
	if l.Allocs[0].Size != MaxBytes || l.Bytes != MaxBytes {
		t.Errorf("size %d, bytes %d, want %d", l.Allocs[0].Size, l.Bytes, uint64(MaxBytes))
	}
}

func TestLongLine(t *testing.T) {
	log := "+0," + strings.Repeat("x", MaxLine+10) + "\n"
	_, err := Parse(strings.NewReader(log), "big.log")
	if err == nil || !strings.Contains(err.Error(), "big.log:1: line longer than") {
		t.Errorf("error %v", err)
	}
}

func FuzzParse(f *testing.F) {
	w := tialloctest.NewWriter()
	w.Add(tialloctest.Sample{Thread: "main", Class: "[I", Size: 24, Frames: []string{"LMain;::main([Ljava/lang/String;)V", "run()V"}})
	w.Add(tialloctest.Sample{Thread: "main", Class: "[I", Size: 24, Frames: []string{"LMain;::main([Ljava/lang/String;)V", "run()V"}})
	f.Add([]byte(w.String()))
	f.Add([]byte("+0,jthread[a], jclass[TYPE UNKNOWN], size[1, hex: 0x1]\n=1,0\n1\n1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Parse(strings.NewReader(string(b)), "fuzz")
		if err != nil {
			if _, ok := errors.AsType[*SyntaxError](err); !ok {
				t.Fatalf("error %v is not a SyntaxError", err)
			}
			return
		}
		var n, bytes uint64
		for _, st := range l.Stacks {
			n += st.Samples
			if st.Alloc < 0 || st.Alloc >= len(l.Allocs) {
				t.Fatalf("stack alloc %d of %d", st.Alloc, len(l.Allocs))
			}
			bytes += st.Samples * l.Allocs[st.Alloc].Size
			for _, fr := range st.Frames {
				if fr < 0 || int(fr) >= len(l.Frames) {
					t.Fatalf("frame %d of %d", fr, len(l.Frames))
				}
			}
		}
		if n != l.Samples {
			t.Fatalf("stacks hold %d samples, log %d", n, l.Samples)
		}
		if bytes != l.Bytes || l.Bytes > MaxBytes {
			t.Fatalf("stacks hold %d bytes, log %d", bytes, l.Bytes)
		}
	})
}
