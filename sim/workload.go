package sim

import (
	"fmt"
	"math/rand/v2"

	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// Workload describes what a simulated app allocates. It is seeded and
// deterministic: the same Workload gives the same sites, and the same
// sequence of allocations.
type Workload struct {
	// Rate is allocations per second while the app runs; 0 means the app
	// allocates only when told to (VM.Allocate).
	Rate float64
	// Sizes of the app's own tables of class, method and file names; the
	// framework's names are added to them.
	Classes, Methods, Files int
	// Sites is the number of distinct allocation sites.
	Sites int
	// Threads is the number of allocating threads.
	Threads int
	// Skew is the Zipf exponent (> 1) over sites: higher is more skewed.
	Skew float64
	// MinDepth and MaxDepth bound the stack depth of a site before the VM
	// cuts it to its own depth.
	MinDepth, MaxDepth int
	// Seed makes the workload reproducible.
	Seed uint64
}

// DefaultWorkload is a moderate app.
func DefaultWorkload() Workload {
	return Workload{Rate: 2000, Classes: 40, Methods: 120, Files: 30, Sites: 200, Threads: 4, Skew: 1.2, MinDepth: 4, MaxDepth: 24, Seed: 1}
}

func (w *Workload) fill() {
	d := DefaultWorkload()
	if w.Classes <= 0 {
		w.Classes = d.Classes
	}
	if w.Methods <= 0 {
		w.Methods = d.Methods
	}
	if w.Files <= 0 {
		w.Files = d.Files
	}
	if w.Sites <= 0 {
		w.Sites = d.Sites
	}
	if w.Threads <= 0 {
		w.Threads = d.Threads
	}
	if w.Skew <= 1 {
		w.Skew = d.Skew
	}
	if w.MinDepth <= 0 {
		w.MinDepth = d.MinDepth
	}
	if w.MaxDepth < w.MinDepth {
		w.MaxDepth = max(w.MinDepth, d.MaxDepth)
	}
	w.MaxDepth = min(w.MaxDepth, 255)
	// Tables are u16-indexed; keep well inside.
	w.Classes = min(w.Classes, 20000)
	w.Methods = min(w.Methods, 20000)
	w.Files = min(w.Files, 20000)
}

// Framework names every app's stacks and allocations draw on. Each class
// the framework allocates comes with the call chains (innermost frame
// first) that allocate it on Android; a site of that class takes one of
// them, or none (the app's own code allocates it). The app's own classes
// are allocated by the app's code.
var (
	frameworkAllocated = []struct {
		desc string
		size uint32
		arr  bool
		via  [][]allocreport.FrameName
	}{
		{"Ljava/lang/String;", 24, false, [][]allocreport.FrameName{
			{{Class: "Ljava/lang/StringBuilder;", Method: "toString", File: "StringBuilder.java", Line: 413}},
			{{Class: "Ljava/lang/Integer;", Method: "toString", File: "Integer.java", Line: 460}},
		}},
		{"[C", 0, true, [][]allocreport.FrameName{
			{{Class: "Ljava/util/Arrays;", Method: "copyOf", File: "Arrays.java", Line: 3530}, {Class: "Ljava/lang/AbstractStringBuilder;", Method: "ensureCapacityInternal", File: "AbstractStringBuilder.java", Line: 125}},
			{{Class: "Ljava/lang/String;", Method: "toCharArray", File: "String.java", Line: -2}},
		}},
		{"[B", 0, true, [][]allocreport.FrameName{
			{{Class: "Landroid/graphics/BitmapFactory;", Method: "decodeStream", File: "BitmapFactory.java", Line: 713}},
			{{Class: "Lokio/Segment;", Method: "<init>", File: "Segment.kt", Line: 59}, {Class: "Lokio/SegmentPool;", Method: "take", File: "SegmentPool.kt", Line: 89}},
			{{Class: "Ljava/io/BufferedInputStream;", Method: "<init>", File: "BufferedInputStream.java", Line: 201}},
			{{Class: "Ljava/util/Arrays;", Method: "copyOf", File: "Arrays.java", Line: 3497}, {Class: "Ljava/io/ByteArrayOutputStream;", Method: "toByteArray", File: "ByteArrayOutputStream.java", Line: 187}},
			{{Class: "Llibcore/io/Streams;", Method: "readFully", File: "Streams.java", Line: 81}},
		}},
		{"[I", 0, true, [][]allocreport.FrameName{
			{{Class: "Ljava/util/Arrays;", Method: "copyOf", File: "Arrays.java", Line: 3557}},
		}},
		{"[Ljava/lang/Object;", 0, true, [][]allocreport.FrameName{
			{{Class: "Ljava/util/Arrays;", Method: "copyOf", File: "Arrays.java", Line: 3139}, {Class: "Ljava/util/ArrayList;", Method: "grow", File: "ArrayList.java", Line: 275}},
			{{Class: "Ljava/lang/Object;", Method: "internalClone", File: "", Line: -2}},
		}},
		{"Ljava/util/ArrayList;", 24, false, nil},
		{"Ljava/util/HashMap$Node;", 32, false, [][]allocreport.FrameName{
			{{Class: "Ljava/util/HashMap;", Method: "newNode", File: "HashMap.java", Line: 1798}, {Class: "Ljava/util/HashMap;", Method: "putVal", File: "HashMap.java", Line: 630}},
		}},
		{"Landroid/os/Message;", 64, false, [][]allocreport.FrameName{
			{{Class: "Landroid/os/Message;", Method: "obtain", File: "Message.java", Line: 139}},
			{{Class: "Landroid/os/Message;", Method: "obtain", File: "Message.java", Line: 139}, {Class: "Landroid/os/Handler;", Method: "obtainMessage", File: "Handler.java", Line: 329}},
		}},
		{"Ljava/lang/StringBuilder;", 16, false, nil},
		{"Ljava/lang/Integer;", 16, false, [][]allocreport.FrameName{
			{{Class: "Ljava/lang/Integer;", Method: "valueOf", File: "Integer.java", Line: 1034}},
		}},
		{"Landroid/graphics/Rect;", 32, false, nil},
		{"[J", 0, true, nil},
	}
	frameworkBottom = []allocreport.FrameName{
		{Class: "Landroid/os/Handler;", Method: "dispatchMessage", File: "Handler.java", Line: 106},
		{Class: "Landroid/os/Looper;", Method: "loop", File: "Looper.java", Line: 223},
		{Class: "Landroid/app/ActivityThread;", Method: "main", File: "ActivityThread.java", Line: 7656},
		{Class: "Ljava/lang/reflect/Method;", Method: "invoke", File: "", Line: -2},
		{Class: "Lcom/android/internal/os/ZygoteInit;", Method: "main", File: "ZygoteInit.java", Line: 947},
	}
)

// site is one allocation site of a workload.
type site struct {
	class  uint16 // index into the workload's class table
	size   uint32 // base size in bytes
	arr    bool   // arrays vary in size
	frames []allocreport.Frame
}

// NamedSite is an allocation site given by name rather than drawn by a
// workload: the allocated class (a descriptor such as "[C") and its
// frames, innermost first. Only VM.AllocateAt allocates there.
type NamedSite struct {
	Class  string
	Frames []allocreport.FrameName
}

// program is a workload made concrete: its string tables and sites. The
// workload draws from the first work sites; named sites follow them.
type program struct {
	w      Workload
	tables allocreport.Report // Raw*/dotted tables only
	sites  []site
	work   int
}

func newProgram(w Workload, pkg string, named ...NamedSite) *program {
	w.fill()
	rng := rand.New(rand.NewPCG(w.Seed, 0x616c6c6f63))
	b := allocreport.NewBuilder()
	// Intern through the builder to get stable indices; its report gives
	// the tables.
	p := &program{w: w}
	pkgPath := "com/example/app"
	if pkg != "" {
		pkgPath = ""
		for _, c := range pkg {
			if c == '.' {
				c = '/'
			}
			pkgPath += string(c)
		}
	}
	appClass := func(i int) string { return fmt.Sprintf("L%s/C%d;", pkgPath, i) }
	appFile := func(i int) string { return fmt.Sprintf("C%d.java", i%w.Files) }
	appMethod := func(i int) string { return fmt.Sprintf("m%d", i) }

	type siteNames struct {
		class  string
		size   uint32
		arr    bool
		frames []allocreport.FrameName
	}
	var names []siteNames
	for range w.Sites {
		var s siteNames
		var via [][]allocreport.FrameName
		if rng.IntN(10) < 7 {
			fa := frameworkAllocated[rng.IntN(len(frameworkAllocated))]
			s.class, s.size, s.arr, via = fa.desc, fa.size, fa.arr, fa.via
		} else {
			s.class, s.size = appClass(rng.IntN(w.Classes)), uint32(16+8*rng.IntN(12))
		}
		depth := w.MinDepth + rng.IntN(w.MaxDepth-w.MinDepth+1)
		if len(via) > 0 && rng.IntN(3) > 0 {
			s.frames = append(s.frames, via[rng.IntN(len(via))]...)
		}
		s.frames = s.frames[:min(len(s.frames), depth)]
		// At least one frame of the app's own code calls what allocates:
		// no two apps share a whole stack.
		for appFrames := max(depth-2, len(s.frames)+1); len(s.frames) < appFrames; {
			ci := rng.IntN(w.Classes)
			s.frames = append(s.frames, allocreport.FrameName{
				Class:  appClass(ci),
				Method: appMethod(rng.IntN(w.Methods)),
				File:   appFile(ci),
				Line:   int16(1 + rng.IntN(900)),
			})
		}
		for i := 0; len(s.frames) < depth; i++ {
			s.frames = append(s.frames, frameworkBottom[(rng.IntN(2)+i)%len(frameworkBottom)])
		}
		names = append(names, s)
		b.Add(0, 0, s.class, s.frames)
	}
	for _, n := range named {
		names = append(names, siteNames{class: n.Class, frames: n.Frames})
		b.Add(0, 0, n.Class, n.Frames)
	}
	p.work = w.Sites
	r, err := b.Report()
	if err != nil {
		panic(err) // tables are bounded by fill; cannot happen
	}
	p.tables = allocreport.Report{
		Classes: r.Classes, Methods: r.Methods, Files: r.Files,
		RawClasses: r.RawClasses, RawMethods: r.RawMethods, RawFiles: r.RawFiles,
	}
	p.sites = make([]site, len(names))
	for i := range r.Allocations {
		a := &r.Allocations[i]
		p.sites[i] = site{class: a.Class, size: names[i].size, arr: names[i].arr, frames: r.Stack(a).Frames()}
	}
	return p
}

// SiteKey names an allocation site the way the simulator's ground truth
// does: the allocated class, then each frame as Report.FrameString prints
// it, separated by newlines. Tests build the same key from a parsed report.
func SiteKey(class string, frames []string) string {
	k := class
	for _, f := range frames {
		k += "\n" + f
	}
	return k
}
