package perfetto

import (
	"strconv"
	"strings"
)

// Frame is one resolved frame of a call stack.
type Frame struct {
	// Function is the function name, normalized for Java methods (see
	// NormalizeFunction): "com.example.Foo.bar" whether the trace said
	// that or "void com.example.Foo.bar(int)". Empty when the trace gave no
	// name (an unsymbolized native frame, or the unknown frames of the
	// Android 12/13 unwinding bug).
	Function string
	// RawFunction is the name exactly as the trace gave it.
	RawFunction string
	// Mapping is the path of the mapping the frame's code lies in, its
	// components joined with "/" (for example
	// "/apex/com.android.art/lib64/libart.so"); "ERROR" for heapprofd's
	// synthetic unwind-error frame.
	Mapping string
	BuildID string // raw bytes of the mapping's build id
	RelPC   uint64 // program counter relative to the mapping's start
}

// FrameKind classifies a frame for detecting broken stacks.
type FrameKind uint8

const (
	// FrameNamed is a frame with a function name.
	FrameNamed FrameKind = iota
	// FrameUnknown has no function name. The perfetto UI shows it as
	// "unknown". An unknown frame at the root of a stack, where the
	// thread's entry point should be, is the symptom of the Android 12/13
	// ART unwinding bug.
	FrameUnknown
	// FrameError is heapprofd's synthetic frame for an unwinding error:
	// function "ERROR <code>" in mapping "ERROR".
	FrameError
)

// Kind classifies f.
func (f Frame) Kind() FrameKind {
	switch {
	case f.Mapping == "ERROR" || f.Function == "ERROR" || strings.HasPrefix(f.Function, "ERROR "):
		return FrameError
	case f.Function == "":
		return FrameUnknown
	}
	return FrameNamed
}

// key identifies a frame within a stack key: one method is one frame, so a
// named frame is its normalized name alone (the same method can run from
// the interpreter, JIT code or an oat file, at different pcs); a nameless
// frame is its mapping and pc.
func (f Frame) key() string {
	if f.Function != "" {
		return f.Function
	}
	return f.Mapping + "+0x" + strconv.FormatUint(f.RelPC, 16)
}

// Unwind says whether a stack was unwound whole.
type Unwind uint8

const (
	// UnwindOK: no error frame, and the outermost frame has a name.
	UnwindOK Unwind = iota
	// UnwindError: the stack holds heapprofd's "ERROR" frame.
	UnwindError
	// UnwindUnknown: the outermost frame has no name: unwinding stopped short of the thread's entry point, as
	// with the Android 12/13 ART bug, where the perfetto UI shows one
	// "unknown" frame at the top of the flame graph above the libart
	// frames.
	UnwindUnknown
)

func (u Unwind) String() string {
	switch u {
	case UnwindOK:
		return "ok"
	case UnwindError:
		return "error"
	case UnwindUnknown:
		return "unknown"
	}
	return "Unwind(" + strconv.Itoa(int(u)) + ")"
}

// Stack is a resolved call stack. Stacks are interned by the Decoder: two
// samples with the same frames (after normalization) share one *Stack,
// whatever callstack ids and sequences they came under.
type Stack struct {
	// Frames, innermost first: Frames[0] is where the allocation happened
	// (for the ART heap, usually a libart.so allocation entry point), the
	// last frame is the thread's outermost one. This is the order of a Java
	// stack trace and of DDM allocation records; the trace itself stores
	// callstacks outermost first.
	// Frames are shared between the stacks that hold them.
	Frames []*Frame
	// Key identifies the stack within one Decoder: equal keys mean the
	// same frames after normalization. It is compact (four bytes a frame)
	// and opaque; String gives a readable form.
	Key    string
	Unwind Unwind
}

// String lists the stack's frames innermost first, one a line: the
// normalized function name, or for a frame without one, its mapping and pc.
func (s *Stack) String() string {
	var b strings.Builder
	for i, f := range s.Frames {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(f.key())
	}
	return b.String()
}

func classify(frames []*Frame) Unwind {
	for _, f := range frames {
		if f.Kind() == FrameError {
			return UnwindError
		}
	}
	if len(frames) == 0 || frames[len(frames)-1].Kind() == FrameUnknown {
		return UnwindUnknown
	}
	return UnwindOK
}

// dedupedMarker is what ART's ELF symbol writer adds to the name of a
// method whose compiled code is shared with others.
const dedupedMarker = "[DEDUPED]"

// NormalizeFunction turns the names heapprofd gives Java methods into one
// form, so that one method is one frame:
//
//	com.example.Foo.bar                       (dex frames; mini-debug-info symbols)
//	void com.example.Foo.bar(int, java.lang.String)   (full debug-info symbols)
//	com.example.Foo.bar [DEDUPED]             (shared compiled code)
//
// all become "com.example.Foo.bar": the return type, the parameter list and
// the dedup marker are dropped. Native C++ names (they contain "::") and
// names without a parameter list are returned unchanged apart from the
// dedup marker and surrounding spaces.
func NormalizeFunction(name string) string {
	s := strings.TrimSpace(name)
	if strings.Contains(s, dedupedMarker) {
		s = strings.TrimSpace(strings.Replace(s, dedupedMarker, "", 1))
	}
	if strings.Contains(s, "::") || strings.HasPrefix(s, "ERROR") {
		return s
	}
	if i := strings.IndexByte(s, '('); i > 0 && strings.HasSuffix(s, ")") {
		s = strings.TrimSpace(s[:i])
		// What remains is "[return type ]class.method"; Java types hold no
		// spaces, so the method is what follows the last space.
		if j := strings.LastIndexByte(s, ' '); j >= 0 {
			s = s[j+1:]
		}
	}
	return s
}
