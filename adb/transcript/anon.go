package transcript

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf16"
)

// anonymizer replaces device serials and chosen package names with
// stand-ins of the same length, the same name always with the same
// stand-in. Keeping the length means nothing that frames a name needs
// re-framing: smart-socket hex lengths, shell v2 and JDWP packet lengths,
// DDM chunk lengths, the UTF-16 length before an APNM or HELO name, the
// string tables of REAL and perfetto's protobuf lengths all stay true.
//
// Each name is replaced in the forms the device protocols carry it: as
// written (UTF-8), with dots as slashes (JNI class names, "Lcom/x/Y;"),
// with every character other than [A-Za-z0-9._-] as '_' (how alloctrack
// puts a serial in a file name), and each of those in UTF-16BE (DDM
// strings). A name inside compressed bytes is not seen.
type anonymizer struct {
	mu                sync.Mutex
	names             map[string]string // original -> stand-in
	used              map[string]bool   // stand-ins given
	pairs             [][2][]byte       // every form, longest first
	longest           int
	serials, packages int
}

func newAnonymizer(packages []string) *anonymizer {
	a := &anonymizer{names: map[string]string{}, used: map[string]bool{}}
	for _, p := range packages {
		a.add(p, false)
	}
	return a
}

func (a *anonymizer) addSerial(s string) { a.add(s, true) }

func (a *anonymizer) add(name string, serial bool) {
	if len(name) < 3 {
		return // too short to replace without hitting other text
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.names[name]; ok {
		return
	}
	var stand string
	for {
		if serial {
			a.serials++
			stand = serialStandIn(len(name), a.serials)
		} else {
			a.packages++
			stand = packageStandIn(name, a.packages)
		}
		if !a.used[stand] && stand != name {
			break
		}
	}
	a.names[name] = stand
	a.used[stand] = true
	for _, f := range forms(name, stand) {
		a.pairs = append(a.pairs, f, [2][]byte{utf16be(string(f[0])), utf16be(string(f[1]))})
	}
	slices.SortStableFunc(a.pairs, func(x, y [2][]byte) int { return len(y[0]) - len(x[0]) })
	a.longest = len(a.pairs[0][0])
}

// forms are the (original, stand-in) pairs of one name.
func forms(name, stand string) [][2][]byte {
	out := [][2][]byte{{[]byte(name), []byte(stand)}}
	if s := strings.ReplaceAll(name, ".", "/"); s != name {
		out = append(out, [2][]byte{[]byte(s), []byte(strings.ReplaceAll(stand, ".", "/"))})
	}
	if s := fileSafe(name); s != name {
		out = append(out, [2][]byte{[]byte(s), []byte(fileSafe(stand))})
	}
	return out
}

func fileSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

func utf16be(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		b[2*i], b[2*i+1] = byte(c>>8), byte(c)
	}
	return b
}

// serialStandIn is "serial" and the number, zero-padded to n characters
// (shorter serials get just the number, padded).
func serialStandIn(n, k int) string {
	num := fmt.Sprint(k)
	prefix := "serial"
	if len(prefix)+len(num) > n {
		prefix = ""
	}
	return prefix + strings.Repeat("0", max(n-len(prefix)-len(num), 0)) + num
}

// packageStandIn keeps the dots (and anything after a ':' of a process
// name) and fills each part with letters drawn from k: a Java package name
// of the same shape.
func packageStandIn(name string, k int) string {
	b := []byte(name)
	seg, pos := 0, 0
	for i, c := range b {
		switch {
		case c == ':':
			return string(b)
		case c == '.':
			seg, pos = seg+1, 0
		default:
			b[i] = byte('a' + (k*7+seg*5+pos*3+k*k*pos)%26)
			pos++
		}
	}
	return string(b)
}

func (a *anonymizer) replace(b []byte) []byte {
	if a == nil {
		return b
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := bytes.Clone(b)
	for _, p := range a.pairs {
		replaceInPlace(out, p[0], p[1])
	}
	return out
}

func replaceInPlace(b, old, new []byte) {
	for i := 0; ; {
		j := bytes.Index(b[i:], old)
		if j < 0 {
			return
		}
		copy(b[i+j:], new)
		i += j + len(new)
	}
}

// connAnon replaces names in both directions of one connection. A read
// whose end could be the start of a name is held back until the rest comes;
// before anything of one direction is recorded, what the other holds back
// is recorded first, so that the file keeps the order in which the proxy
// saw the bytes (a replay depends on it). A name split between two reads
// with the other side speaking in between is therefore not replaced; the
// protocols alloctrack speaks send whole messages, so it does not happen.
type connAnon struct {
	a     *anonymizer
	mu    sync.Mutex
	carry map[string][]byte // by direction
}

func (a *anonymizer) conn() *connAnon {
	if a == nil {
		return nil
	}
	return &connAnon{a: a, carry: map[string][]byte{}}
}

// push records b, read in direction dir, through emit: anonymized, after
// the other direction's held-back bytes, holding back its own end if need
// be. Without anonymizing, emit gets b.
func (c *connAnon) push(dir string, b []byte, emit func(dir string, data []byte)) {
	if c == nil {
		emit(dir, b)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for other, held := range c.carry {
		if other != dir && len(held) > 0 {
			emit(other, c.a.replace(held))
			c.carry[other] = nil
		}
	}
	buf := c.a.replace(append(c.carry[dir], b...))
	keep := c.a.partial(buf)
	c.carry[dir] = bytes.Clone(buf[len(buf)-keep:])
	if len(buf) > keep {
		emit(dir, buf[:len(buf)-keep])
	}
}

// flush records what direction dir holds back, at its end.
func (c *connAnon) flush(dir string, emit func(dir string, data []byte)) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if held := c.carry[dir]; len(held) > 0 {
		emit(dir, c.a.replace(held))
	}
	c.carry[dir] = nil
}

// partial is the length of the longest end of b that is the start of a
// name (in any form), shorter than the name.
func (a *anonymizer) partial(b []byte) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := min(a.longest-1, len(b)); k > 0; k-- {
		tail := b[len(b)-k:]
		for _, p := range a.pairs {
			if len(p[0]) > k && bytes.HasPrefix(p[0], tail) {
				return k
			}
		}
	}
	return 0
}
