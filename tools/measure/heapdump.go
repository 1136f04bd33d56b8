package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// heapdump writes a large Android-style dump (ART's layout: STRING and
// LOAD CLASS records, then segments of at most 128 objects, HEAP DUMP
// END) for measuring how fast, and in how much memory, report, diff and
// heapdump read, analyse, shrink and convert it:
//
//	go run ./tools/measure heapdump -mb 500 -out /tmp/big.hprof
//	/usr/bin/time -v alloctrack report /tmp/big.hprof
//
// Its objects form one graph: tree node i (an instance, or one in twenty
// an Object[]) holds nodes 2i+1 and 2i+2, so every node is reachable from
// the root and the dominator tree is deep; a quarter of the nodes also
// hold a random earlier node (shared, so dominators are not just
// parents), a tenth a String over a few hundred values (duplicates), and
// one in forty a byte[] of 256 B to 2 KiB (half of them equal, as Bitmap
// buffers would be).
func heapdumpCmd(args []string) error {
	fs := flag.NewFlagSet("heapdump", flag.ExitOnError)
	mb := fs.Int("mb", 500, "size of the dump to write, in MB (10^6 bytes)")
	out := fs.String("out", "", "file to write")
	fs.Parse(args)
	if *out == "" {
		return fmt.Errorf("heapdump: give -out FILE")
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	u1 := func(b []byte, v byte) []byte { return append(b, v) }
	u2 := func(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
	u4 := func(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
	record := func(tag byte, body []byte) {
		w.WriteByte(tag)
		w.Write(make([]byte, 4))
		w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(body))))
		w.Write(body)
	}
	w.WriteString("JAVA PROFILE 1.0.3\x00")
	w.Write(u4(nil, 4))
	w.Write(binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixMilli())))
	nextStr := uint32(0x400000)
	str := func(s string) uint32 {
		id := nextStr
		nextStr++
		record(hprof.TagString, append(u4(nil, id), s...))
		return id
	}
	const classes = 200
	classID := func(c int) uint32 { return 0x70000000 + uint32(c)*64 }
	names := []string{"java.lang.String", "java.lang.Object[]", "android.graphics.Bitmap"}
	for c := 3; c < classes; c++ {
		names = append(names, fmt.Sprintf("com.example.big.C%d", c))
	}
	fieldNames := []uint32{str("value"), str("hash"), str("left"), str("right"), str("extra"), str("n")}
	app := str("app")
	for c, n := range names {
		record(hprof.TagLoadClass, u4(u4(u4(u4(nil, uint32(c+1)), classID(c)), 0), str(n)))
	}
	var seg []byte
	objs := 0
	flush := func() {
		if len(seg) > 0 {
			record(hprof.TagHeapDumpSegment, seg)
		}
		seg, objs = seg[:0], 0
	}
	start := func() {
		if objs >= 128 || len(seg) >= 4096 {
			flush()
		}
		if objs == 0 {
			seg = u4(u4(u1(seg, hprof.SubHeapDumpInfo), 'A'), app)
		}
		objs++
	}
	// Classes: String (value, hash), Object[], Bitmap (mBuffer ~ value),
	// and the app's: left, right, extra (refs) and n (int).
	for c := range names {
		start()
		seg = u4(u4(u1(seg, hprof.SubClassDump), classID(c)), 0)
		for range 6 {
			seg = u4(seg, 0)
		}
		fields := []struct {
			name uint32
			t    hprof.Type
		}{{fieldNames[2], hprof.Object}, {fieldNames[3], hprof.Object}, {fieldNames[4], hprof.Object}, {fieldNames[5], hprof.Int}}
		switch c {
		case 0:
			fields = fields[:0]
			fields = append(fields, struct {
				name uint32
				t    hprof.Type
			}{fieldNames[0], hprof.Object}, struct {
				name uint32
				t    hprof.Type
			}{fieldNames[1], hprof.Int})
		case 1, 2:
			fields = fields[:0]
		}
		size := 0
		for _, f := range fields {
			size += f.t.Size(4)
		}
		seg = u2(u2(u2(u4(seg, uint32(size)), 0), 0), uint16(len(fields)))
		for _, fl := range fields {
			seg = u1(u4(seg, fl.name), byte(fl.t))
		}
	}
	flush()
	// Roots: object 0 and the classes.
	seg = u4(u1(seg, hprof.RootJNIGlobal), 0x10000000)
	seg = u4(seg, 0)
	for c := range names {
		seg = u4(u1(seg, hprof.RootStickyClass), classID(c))
	}
	flush()
	id := func(i int) uint32 { return 0x10000000 + uint32(i)*8 }
	written := func() int64 { return int64(w.Size()-w.Available()) + mustSize(f) }
	limit := int64(*mb) * 1_000_000
	var n int
	leaves := 0
	leaf := func() uint32 { leaves++; return 0x80000000 + uint32(leaves)*8 }
	for n = 0; written() < limit; n++ {
		start()
		if rng.IntN(20) == 0 { // an Object[] of the tree's two children and one more
			seg = u4(u4(u4(u4(u1(seg, hprof.SubObjectArrayDump), id(n)), 0), 4), classID(1))
			seg = u4(u4(u4(u4(seg, id(2*n+1)), id(2*n+2)), id(rng.IntN(n+1))), 0)
			continue
		}
		extra := uint32(0)
		switch k := rng.IntN(40); {
		case k < 4: // a String and its value
			extra = leaf()
			v := fmt.Appendf(nil, "value-%d", rng.IntN(300))
			seg = u4(u4(u4(u4(u1(seg, hprof.SubInstanceDump), extra), 0), classID(0)), 8)
			seg = u4(u4(seg, extra+4), 0)
			seg = u1(u4(u4(u4(u1(seg, hprof.SubPrimArrayDump), extra+4), 0), uint32(len(v))), byte(hprof.Byte))
			seg = append(seg, v...)
		case k == 4: // a byte[] of 256 B to 2 KiB
			extra = leaf()
			m := 256 + rng.IntN(1792)
			fill := byte(rng.IntN(2) * rng.IntN(256))
			seg = u1(u4(u4(u4(u1(seg, hprof.SubPrimArrayDump), extra), 0), uint32(m)), byte(hprof.Byte))
			for range m {
				seg = append(seg, fill)
			}
		case k < 15:
			extra = id(rng.IntN(n + 1))
		}
		seg = u4(u4(u4(u4(u1(seg, hprof.SubInstanceDump), id(n)), 0), classID(3+rng.IntN(classes-3))), 16)
		seg = u4(u4(u4(u4(seg, id(2*n+1)), id(2*n+2)), extra), uint32(n))
	}
	flush()
	record(hprof.TagHeapDumpEnd, nil)
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Printf("%s: %d bytes, %d objects\n", *out, mustSize(f), n)
	return nil
}

func mustSize(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}
