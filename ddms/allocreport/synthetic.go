package allocreport

import (
	"fmt"
	"math/rand/v2"
)

// SyntheticDepth is the stack depth of the synthetic reports: ART's default
// (7 and later) of 16 frames.
const SyntheticDepth = 16

// SyntheticMax returns the largest report a VM sends: MaxEntries
// allocations of SyntheticDepth frames each (about 9 MB), drawn
// deterministically from 320 classes, 1,000 method names and 200 source
// files with the skew a device shows. Every call returns the same bytes. It
// is the payload the parse and counting benchmarks measure.
func SyntheticMax() ([]byte, error) {
	rng := rand.New(rand.NewPCG(0x616c6c6f63, 0x747261636b))

	// 200 source files, 320 classes declared in them, 1000 method names.
	files := make([]string, 200)
	for i := range files {
		files[i] = fmt.Sprintf("Module%02dSource%03d.java", i%17, i)
	}
	type class struct {
		desc string
		file int
	}
	classes := make([]class, 320)
	for i := range classes {
		pkg := [...]string{"android/view", "android/os", "java/util", "java/lang", "com/example/app/ui", "com/example/app/net", "kotlinx/coroutines", "androidx/recyclerview/widget"}[i%8]
		f := i // every file declares at least one class
		if i >= len(files) {
			f = rng.IntN(len(files))
			if i%2 == 0 {
				f = -1 // a class with no source file information
			}
		}
		classes[i] = class{desc: fmt.Sprintf("L%s/Class%03d;", pkg, i), file: f}
	}
	methods := make([]string, 1000)
	common := []string{"<init>", "<clinit>", "run", "invoke", "onDraw", "dispatchMessage", "handleMessage", "toString", "valueOf", "append"}
	for i := range methods {
		if i < len(common) {
			methods[i] = common[i]
		} else {
			methods[i] = fmt.Sprintf("method%04d", i)
		}
	}
	// Allocated classes: the declared classes plus arrays and boxed types.
	allocated := []string{"[I", "[B", "[C", "[J", "[Ljava/lang/Object;", "[[I", "Ljava/lang/String;", "Ljava/lang/Integer;", "Ljava/lang/Long;", "Landroid/os/Message;"}
	for i := 0; i < 300; i++ {
		allocated = append(allocated, classes[rng.IntN(len(classes))].desc)
	}
	threads := []uint16{3311, 3316, 3320, 3402, 4011, 12345, 40000}

	bld := NewBuilder()
	frames := make([]FrameName, SyntheticDepth)
	for i := 0; i < MaxEntries; i++ {
		for j := range frames {
			c := classes[rng.IntN(len(classes))]
			m := methods[rng.IntN(len(methods))]
			if rng.IntN(4) == 0 {
				m = common[rng.IntN(len(common))] // a skewed spread, as on devices
			}
			f := FrameName{Class: c.desc, Method: m, Line: int16(1 + rng.IntN(4000))}
			if c.file >= 0 {
				f.File = files[c.file]
			}
			switch rng.IntN(10) {
			case 0:
				f.Line = -2 // native
			case 1:
				f.Line = -1
			}
			frames[j] = f
		}
		size := uint32(16 + 8*rng.IntN(64))
		if rng.IntN(100) == 0 {
			size = uint32(rng.IntN(1 << 20))
		}
		bld.Add(size, threads[rng.IntN(len(threads))], allocated[rng.IntN(len(allocated))], frames)
	}
	r, err := bld.Report()
	if err != nil {
		return nil, err
	}
	return Encode(r)
}

// SyntheticMaxLargeTables is SyntheticMax with large string tables:
// 2,000 classes, 5,000 methods and 1,000 file names, mixed ASCII and
// non-ASCII (Latin, CJK, Cyrillic, and characters outside the BMP, sent as
// surrogate pairs).
func SyntheticMaxLargeTables() ([]byte, error) {
	rng := rand.New(rand.NewPCG(0x6c61726765, 0x7461626c6573))
	words := []string{"Widget", "Ünïcödé", "数据源", "Загрузчик", "Résumé", "Handler", "𝔘𝔫𝔦", "Service", "ビュー", "Adapter", "Ñandú", "Repository"}
	pkgs := []string{"android/view", "java/util", "com/example/app/ui", "com/例子/应用", "ru/пример/сеть", "kotlinx/coroutines", "androidx/compose/runtime", "com/exämple/dätä"}
	word := func() string { return words[rng.IntN(len(words))] }
	files := make([]string, 1000)
	for i := range files {
		files[i] = fmt.Sprintf("%s%s%d.java", word(), word(), i)
	}
	classes := make([]string, 2000)
	for i := range classes {
		classes[i] = fmt.Sprintf("L%s/%s%s$%s%d;", pkgs[i%len(pkgs)], word(), word(), word(), i)
	}
	methods := make([]string, 5000)
	for i := range methods {
		methods[i] = fmt.Sprintf("%s%s%d", []string{"on", "get", "load", "рисовать", "処理", "set"}[i%6], word(), i)
	}
	bld := NewBuilder()
	// Every name once first, so that the tables are as large as stated
	// (the frames below then draw from them at random).
	for i := 0; i < 5000; i++ {
		bld.Add(16, 1, classes[i%len(classes)], []FrameName{{Class: classes[(i*7)%len(classes)], Method: methods[i], File: files[i%len(files)], Line: int16(i % 4000)}})
	}
	frames := make([]FrameName, SyntheticDepth)
	for i := 5000; i < MaxEntries; i++ {
		for j := range frames {
			c := rng.IntN(len(classes))
			frames[j] = FrameName{Class: classes[c], Method: methods[rng.IntN(len(methods))], File: files[c%len(files)], Line: int16(1 + rng.IntN(4000))}
			if rng.IntN(10) == 0 {
				frames[j].Line = -2
			}
		}
		bld.Add(uint32(16+8*rng.IntN(64)), uint16(3000+rng.IntN(40)), classes[rng.IntN(len(classes))], frames)
	}
	r, err := bld.Report()
	if err != nil {
		return nil, err
	}
	return Encode(r)
}
