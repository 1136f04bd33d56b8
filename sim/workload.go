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

// Framework names every app's stacks and allocations draw on.
var (
	frameworkAllocated = []struct {
		desc string
		size uint32
		arr  bool
	}{
		{"Ljava/lang/String;", 24, false}, {"[C", 0, true}, {"[B", 0, true}, {"[I", 0, true},
		{"[Ljava/lang/Object;", 0, true}, {"Ljava/util/ArrayList;", 24, false},
		{"Ljava/util/HashMap$Node;", 32, false}, {"Landroid/os/Message;", 64, false},
		{"Ljava/lang/StringBuilder;", 16, false}, {"Ljava/lang/Integer;", 16, false},
		{"Landroid/graphics/Rect;", 32, false}, {"[J", 0, true},
	}
	frameworkTop = []allocreport.FrameName{
		{Class: "Ljava/util/Arrays;", Method: "copyOf", File: "Arrays.java", Line: 3139},
		{Class: "Ljava/lang/StringBuilder;", Method: "toString", File: "StringBuilder.java", Line: 413},
		{Class: "Ljava/util/ArrayList;", Method: "grow", File: "ArrayList.java", Line: 275},
		{Class: "Landroid/os/Message;", Method: "obtain", File: "Message.java", Line: 139},
		{Class: "Ljava/lang/Object;", Method: "internalClone", File: "", Line: -2},
		{Class: "Ljava/lang/Integer;", Method: "valueOf", File: "Integer.java", Line: 1034},
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

// program is a workload made concrete: its string tables and sites.
type program struct {
	w      Workload
	tables allocreport.Report // Raw*/dotted tables only
	sites  []site
}

func newProgram(w Workload, pkg string) *program {
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
		if rng.IntN(10) < 7 {
			fa := frameworkAllocated[rng.IntN(len(frameworkAllocated))]
			s.class, s.size, s.arr = fa.desc, fa.size, fa.arr
		} else {
			s.class, s.size = appClass(rng.IntN(w.Classes)), uint32(16+8*rng.IntN(12))
		}
		depth := w.MinDepth + rng.IntN(w.MaxDepth-w.MinDepth+1)
		top := rng.IntN(3)
		if top > 0 {
			s.frames = append(s.frames, frameworkTop[rng.IntN(len(frameworkTop))])
		}
		for len(s.frames) < depth-2 {
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
