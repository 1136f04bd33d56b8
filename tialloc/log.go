package tialloc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// MaxLine is the longest line Parse reads: a stack trace of 50,000 frames
// with keys of seven digits fits many times over.
const MaxLine = 16 << 20

// Layout is the frame layout of a log (see the package comment).
type Layout uint8

const (
	// LayoutNone: the log defines no frame.
	LayoutNone Layout = iota
	// LayoutMethods: frames "name(sig)", no class (the agent's README).
	LayoutMethods
	// LayoutClasses: frames "Lpkg/Cls;::name(sig)" (every released agent).
	LayoutClasses
)

func (l Layout) String() string {
	switch l {
	case LayoutMethods:
		return "methods without class (the agent's README)"
	case LayoutClasses:
		return "class-qualified methods (released agents, Android 11+)"
	}
	return "no frames"
}

// Alloc is an allocation as the agent describes it: its thread, class and
// size.
type Alloc struct {
	Thread string
	// Class is the allocated class's type signature as the VM gives it
	// ("[I", "Ljava/lang/String;"), or "" when the agent could not name it
	// ("TYPE UNKNOWN").
	Class string
	// File is the class's source file, "" when the VM did not know it.
	File string
	Size uint64
}

// Frame is a method on a stack.
type Frame struct {
	// Class is the declaring class's signature ("Lpkg/Cls;"), "" in
	// LayoutMethods logs and for a method the agent could not name.
	Class     string
	Method    string // "" for a method the agent could not name
	Signature string // "(I)V"
}

// Stack is one distinct stack trace of a log, with its samples.
type Stack struct {
	Alloc int // index into Log.Allocs
	// Frames index Log.Frames, the allocating frame first (the agent
	// writes them the other way round).
	Frames  []int32
	Samples uint64
}

// Log is a parsed agent log.
type Log struct {
	Layout Layout
	Allocs []Alloc
	Frames []Frame
	Stacks []Stack
	// Samples is the number of sample lines, the sum of Stacks' Samples.
	Samples uint64
	// Bytes is the sum of the samples' sizes; Parse refuses a log whose
	// sum does not fit in a jlong (see MaxBytes).
	Bytes uint64
	// Lines is the number of lines read.
	Lines int
	// CutLine is set when the file did not end with a newline: the agent
	// ends every line it writes, so its last line was cut short (the app
	// died while writing) and was left out.
	CutLine bool
}

// SyntaxError is a malformed line.
type SyntaxError struct {
	File string
	Line int
	What string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.What) }

// MaxBytes is the largest allocation size, and the largest sum of a log's
// sampled sizes, Parse accepts: the agent's sizes are jlongs.
const MaxBytes = math.MaxInt64

// key kinds
const (
	kindAlloc = iota + 1
	kindFrame
	kindStack
)

type ref struct {
	kind uint8
	idx  int32
}

type parser struct {
	name  string
	line  int
	keys  map[uint32]ref
	log   *Log
	class bool // a class-qualified frame was seen
	plain bool // a frame without class was seen
}

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{File: p.name, Line: p.line, What: fmt.Sprintf(format, args...)}
}

// Parse reads an agent log from r; name is what errors call it.
func Parse(r io.Reader, name string) (*Log, error) {
	p := &parser{name: name, keys: map[uint32]ref{}, log: &Log{}}
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(b) > MaxLine+1 {
				p.line++
				return nil, p.errorf("line longer than %d bytes", MaxLine)
			}
			long = append(long, b...)
			continue
		}
		if long != nil {
			b = append(long, b...)
			long = nil
			if len(bytes.TrimSuffix(b, []byte{'\n'})) > MaxLine {
				p.line++
				return nil, p.errorf("line longer than %d bytes", MaxLine)
			}
		}
		if err == io.EOF {
			if len(b) > 0 {
				p.log.CutLine = true
			}
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		p.line++
		b = bytes.TrimSuffix(b[:len(b)-1], []byte{'\r'})
		if err := p.parseLine(b); err != nil {
			return nil, err
		}
	}
	p.log.Lines = p.line
	switch {
	case p.class:
		p.log.Layout = LayoutClasses
	case p.plain:
		p.log.Layout = LayoutMethods
	}
	return p.log, nil
}

func (p *parser) parseLine(b []byte) error {
	if len(b) == 0 {
		return p.errorf("empty line")
	}
	switch b[0] {
	case '+', '=':
		comma := bytes.IndexByte(b, ',')
		if comma < 0 {
			return p.errorf("definition %.40q has no comma after its key", b)
		}
		k, err := p.key(b[1:comma])
		if err != nil {
			return err
		}
		if _, dup := p.keys[k]; dup {
			return p.errorf("key %d defined again", k)
		}
		if b[0] == '+' {
			return p.define(k, string(b[comma+1:]))
		}
		return p.stack(k, b[comma+1:])
	case '#':
		if bytes.Contains(b, []byte("VMObjectAlloc(")) {
			return p.errorf("a log of the first development version of the agent (October 2019, \"#N(VMObjectAlloc(...))\"), which no Android release carries: not supported")
		}
	}
	k, err := p.key(b)
	if err != nil {
		return p.errorf("not a definition (+ or =) nor a sample (a stack key): %.60q", b)
	}
	r, ok := p.keys[k]
	switch {
	case !ok:
		return p.errorf("sample of key %d, which is not defined", k)
	case r.kind != kindStack:
		return p.errorf("sample of key %d, which is not a stack trace", k)
	}
	st := &p.log.Stacks[r.idx]
	size := p.log.Allocs[st.Alloc].Size
	if p.log.Bytes > MaxBytes-size {
		return p.errorf("the sampled sizes sum past a jlong (%d + %d > %d): not a log the agent writes", p.log.Bytes, size, uint64(MaxBytes))
	}
	p.log.Bytes += size
	st.Samples++
	p.log.Samples++
	return nil
}

func (p *parser) key(b []byte) (uint32, error) {
	if len(b) == 0 || len(b) > 10 {
		return 0, p.errorf("bad key %.20q", b)
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, p.errorf("bad key %.20q", b)
		}
		n = n*10 + uint64(c-'0')
	}
	if n > 1<<32-1 {
		return 0, p.errorf("key %d out of range", n)
	}
	return uint32(n), nil
}

// define handles "+key,value": an allocation or a frame.
func (p *parser) define(k uint32, v string) error {
	if strings.HasPrefix(v, "jthread[") {
		a, err := p.alloc(v)
		if err != nil {
			return err
		}
		p.keys[k] = ref{kindAlloc, int32(len(p.log.Allocs))}
		p.log.Allocs = append(p.log.Allocs, a)
		return nil
	}
	f, err := p.frame(v)
	if err != nil {
		return err
	}
	p.keys[k] = ref{kindFrame, int32(len(p.log.Frames))}
	p.log.Frames = append(p.log.Frames, f)
	return nil
}

// alloc parses "jthread[NAME], jclass[SIG file: FILE], size[N, hex: 0xH]",
// from the right, since a thread name may hold anything.
func (p *parser) alloc(v string) (Alloc, error) {
	var a Alloc
	i := strings.LastIndex(v, ", size[")
	if i < 0 || !strings.HasSuffix(v, "]") {
		return a, p.errorf("allocation without size[...]: %.80q", v)
	}
	sz := v[i+len(", size[") : len(v)-1]
	dec, hex, ok := strings.Cut(sz, ", hex: 0x")
	n, err := strconv.ParseUint(strings.TrimPrefix(dec, "-"), 10, 64)
	switch {
	case !ok || (err != nil && !errors.Is(err, strconv.ErrRange)):
		return a, p.errorf("allocation size %q is not \"N, hex: 0xH\"", sz)
	case strings.HasPrefix(dec, "-") || err != nil || n > MaxBytes:
		return a, p.errorf("allocation size %s is outside a jlong (0 to %d)", dec, uint64(MaxBytes))
	}
	if h, err := strconv.ParseUint(hex, 16, 64); err != nil || h != n {
		return a, p.errorf("allocation size %q: decimal and hex differ", sz)
	}
	a.Size = n
	head := v[:i]
	j := strings.LastIndex(head, "], jclass[")
	if j < 0 || !strings.HasSuffix(head, "]") {
		return a, p.errorf("allocation without jclass[...]: %.80q", v)
	}
	a.Thread = head[len("jthread["):j]
	cls := head[j+len("], jclass[") : len(head)-1]
	if cls != "TYPE UNKNOWN" {
		sig, file, ok := strings.Cut(cls, " file: ")
		if !ok || sig == "" {
			return a, p.errorf("allocation class %q is not \"SIGNATURE file: FILE\"", cls)
		}
		a.Class = sig
		if file != "<UNKNOWN_FILE>" {
			a.File = file
		}
	}
	return a, nil
}

// frame parses "Lpkg/Cls;::name(sig)", "name(sig)", "ERROR" or
// "METHODERROR".
func (p *parser) frame(v string) (Frame, error) {
	var f Frame
	if v == "ERROR" || v == "METHODERROR" {
		return f, nil
	}
	m := v
	if i := strings.Index(v, ";::"); i > 0 && v[0] == 'L' {
		f.Class, m = v[:i+1], v[i+3:]
		p.class = true
	} else {
		p.plain = true
	}
	paren := strings.IndexByte(m, '(')
	if paren <= 0 || !strings.Contains(m[paren:], ")") {
		return f, p.errorf("frame %.80q is not \"name(signature)\" nor \"Lclass;::name(signature)\"", v)
	}
	f.Method, f.Signature = m[:paren], m[paren:]
	return f, nil
}

// stack handles "=key,alloc;frame;frame…".
func (p *parser) stack(k uint32, v []byte) error {
	st := Stack{Alloc: -1}
	n := bytes.Count(v, []byte{';'})
	st.Frames = make([]int32, n)
	for i := 0; ; i++ {
		item, rest, more := bytes.Cut(v, []byte{';'})
		key, err := p.key(item)
		if err != nil {
			return err
		}
		r, ok := p.keys[key]
		want := uint8(kindFrame)
		if i == 0 {
			want = kindAlloc
		}
		switch {
		case !ok:
			return p.errorf("stack trace %d refers to key %d, which is not defined", k, key)
		case r.kind != want && i == 0:
			return p.errorf("stack trace %d begins with key %d, which is not an allocation", k, key)
		case r.kind != want:
			return p.errorf("stack trace %d: key %d is not a frame", k, key)
		}
		if i == 0 {
			st.Alloc = int(r.idx)
		} else {
			st.Frames[n-i] = r.idx // outermost first in the file: reverse
		}
		if !more {
			break
		}
		v = rest
	}
	p.keys[k] = ref{kindStack, int32(len(p.log.Stacks))}
	p.log.Stacks = append(p.log.Stacks, st)
	return nil
}

// FrameCount returns the number of frames of the deepest stack.
func (l *Log) FrameCount() int {
	n := 0
	for i := range l.Stacks {
		n = max(n, len(l.Stacks[i].Frames))
	}
	return n
}
