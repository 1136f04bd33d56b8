// The model's units: what is counted (Count, Estimate), a stack frame by
// names (Frame), and how an allocation site is named (SiteInfo, its hash
// and its id). Every backend and every consumer speaks these.

package alloctrack

import (
	"cmp"
	"encoding/hex"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Count is a number of allocations and their bytes.
type Count struct {
	Allocations uint64
	Bytes       uint64
}

// Allocate counts one allocation of size bytes.
func (c *Count) Allocate(size uint32) {
	c.Allocations++
	c.Bytes += uint64(size)
}

// Plus returns c and o summed.
func (c Count) Plus(o Count) Count { return addCounts(c, o) }

// Plus returns e and o summed.
func (e Estimate) Plus(o Estimate) Estimate {
	e.add(o)
	return e
}

func addCounts(a, b Count) Count {
	return Count{Allocations: a.Allocations + b.Allocations, Bytes: a.Bytes + b.Bytes}
}

func subCounts(a, b Count) Count {
	var d Count
	if a.Allocations > b.Allocations {
		d.Allocations = a.Allocations - b.Allocations
	}
	if a.Bytes > b.Bytes {
		d.Bytes = a.Bytes - b.Bytes
	}
	return d
}

// compareCount orders larger counts first.
func compareCount(a, b Count, byBytes bool) int {
	if byBytes {
		if d := cmp.Compare(b.Bytes, a.Bytes); d != 0 {
			return d
		}
		return cmp.Compare(b.Allocations, a.Allocations)
	}
	if d := cmp.Compare(b.Allocations, a.Allocations); d != 0 {
		return d
	}
	return cmp.Compare(b.Bytes, a.Bytes)
}

// cmpCount orders heavier counts first.
func cmpCount(a, b Count) int { return compareCount(a, b, false) }

// Estimate is an estimated number of allocations and their bytes: sampled
// values scaled up for the sampling interval. It is not an exact count.
type Estimate struct {
	Allocations float64
	Bytes       float64
}

func (e *Estimate) add(o Estimate) {
	e.Allocations += o.Allocations
	e.Bytes += o.Bytes
}

func subEstimate(a, b Estimate) Estimate {
	return Estimate{Allocations: max(a.Allocations-b.Allocations, 0), Bytes: max(a.Bytes-b.Bytes, 0)}
}

// roundCount is an estimate as a count, rounded.
func roundCount(e Estimate) Count {
	return Count{Allocations: uint64(math.Round(e.Allocations)), Bytes: uint64(math.Round(e.Bytes))}
}

// Frame is a stack frame by names (dotted), independent of any report's
// tables.
type Frame struct {
	Class, Method, File string
	Line                int
}

// Function is the frame's function name: Class.method.
// A frame without class (an agent log in the README's layout) gives
// the method alone.
func (f Frame) Function() string {
	if f.Class == "" {
		return f.Method
	}
	return f.Class + "." + f.Method
}

// String formats f as Java prints a stack frame:
// "pkg.Class.method(File.java:12)", with "Native Method" and "Unknown
// Source" as Java prints them.
func (f Frame) String() string {
	var b strings.Builder
	b.Grow(len(f.Class) + len(f.Method) + len(f.File) + 16)
	b.WriteString(f.Class)
	b.WriteByte('.')
	b.WriteString(f.Method)
	b.WriteByte('(')
	switch {
	case f.Line == -2:
		b.WriteString("Native Method")
	case f.File == "":
		b.WriteString("Unknown Source")
	default:
		b.WriteString(f.File)
		if f.Line >= 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(f.Line))
		}
	}
	b.WriteByte(')')
	return b.String()
}

// Other is the class and site label that collects everything not admitted
// to a series of its own.
const Other = "other"

// SiteInfo describes an admitted allocation site.
type SiteInfo struct {
	ID    string // short stable hash of class and frames
	Class string // allocated class
	Frame string // first app frame (see AppFrame), or the top frame
	Stack string // every frame, top first, "; "-separated, capped
	// Frames are the site's frames by names, top first.
	Frames []Frame
	// Heapprofd marks a heapprofd site (Android 12+): its Java frames only,
	// Class "", File "" and Line -1 in every frame. Its SiteCount has a
	// zero Count; Sampled and Estimated hold its numbers.
	Heapprofd bool
	// Lineless marks a site whose frames have no file or line (an agent
	// log's): FrameStrings gives each frame's Class.method alone.
	Lineless bool
}

// FrameStrings returns the site's frames as labels and reports show them:
// as Java prints them, or, for a heapprofd site (no file or line), the
// method's dotted name alone.
func (i SiteInfo) FrameStrings() []string {
	out := make([]string, len(i.Frames))
	for j, f := range i.Frames {
		if i.Heapprofd || i.Lineless {
			out[j] = f.Function()
		} else {
			out[j] = f.String()
		}
	}
	return out
}

// SiteID formats a site hash as its label: 12 hex digits.
func SiteID(h uint64) string {
	var b [8]byte
	for i := range b {
		b[i] = byte(h >> (56 - 8*i))
	}
	return hex.EncodeToString(b[:6])
}

// SiteHashNames returns the site hash of an allocation of class at frames
// (top first), all names dotted as in Report.Classes, Methods and Files:
// the hash Counters gives the same site in any report.
func SiteHashNames(class string, frames []Frame) uint64 {
	h := SiteHashStart(xxhash.Sum64String(class))
	for _, f := range frames {
		h = SiteHashFrame(h, xxhash.Sum64String(f.Class), xxhash.Sum64String(f.Method), xxhash.Sum64String(f.File), int16(f.Line))
	}
	return h
}

// SiteHashStart begins the site hash of an allocated class, given the
// xxhash of its dotted name; SiteHashFrame adds each frame, top first. A
// backend that hashes many sites of one set of names (a report's tables)
// hashes each name once and chains these.
func SiteHashStart(class uint64) uint64 { return mix(0x616c6c6f63, class) }

// SiteHashFrame extends site hash h by one frame, given the xxhashes of its
// dotted class, method and file names, and its line.
func SiteHashFrame(h, class, method, file uint64, line int16) uint64 {
	return mix(h, frameHash(class, method, file, line))
}

func mix(h, v uint64) uint64 {
	h ^= v
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>29
}

// frameHash combines the name hashes of one frame; each frame then costs
// one step of the site's hash chain.
func frameHash(class, method, file uint64, line int16) uint64 {
	return class ^ bits.RotateLeft64(method, 21) ^ bits.RotateLeft64(file, 42) ^ (uint64(uint16(line))+1)*0x9e3779b97f4a7c15
}

// frameworkPrefixes are the packages AppFrame skips.
var frameworkPrefixes = []string{
	"java.", "javax.", "android.", "androidx.", "dalvik.", "libcore.", "sun.", "com.android.internal.",
}

// IsFrameworkClass tells whether a dotted class name is in a framework
// package.
func IsFrameworkClass(class string) bool {
	for _, p := range frameworkPrefixes {
		if strings.HasPrefix(class, p) {
			return true
		}
	}
	return false
}

// CapLabel cuts s to at most max bytes, ending in "..." when cut, never
// inside a UTF-8 sequence.
func CapLabel(s string, max int) string {
	if len(s) <= max {
		return s
	}
	ellipsis := "..."
	if max < len(ellipsis) {
		ellipsis = ""
	}
	cut := max - len(ellipsis)
	for cut > 0 && cut < len(s) && s[cut]&0xc0 == 0x80 {
		cut-- // never inside a UTF-8 sequence
	}
	return s[:cut] + ellipsis
}
