package heapdump

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/alloctrack/alloctrack/internal/hproftest"
)

func charsBE(s string) []byte {
	var b []byte
	for _, r := range s {
		b = binary.BigEndian.AppendUint16(b, uint16(r))
	}
	return b
}

// Strings as Android 4.4 and 5 write them (value, hashCode, offset,
// count): a String's text is count chars from offset, so a substring that
// shares its parent's array is no copy of its parent and equals the
// Strings that hold its text; a range that does not fit its array is left
// out; ranges are read across the reader's 64 KiB chunks.
func TestDuplicateStringRangesDalvik(t *testing.T) {
	b := hproftest.NewBuilder("JAVA PROFILE 1.0.3")
	const cObject, cString, cArray = 0x100, 0x101, 0x102
	in := hprof.Int
	b.Class(cObject, 0, "java.lang.Object", nil, nil)
	b.Class(cString, cObject, "java.lang.String", []hproftest.Field{{Name: "value", Type: hprof.Object}, {Name: "hashCode", Type: in}, {Name: "offset", Type: in}, {Name: "count", Type: in}}, nil)
	b.Class(cArray, cObject, "java.lang.Object[]", nil, nil)
	b.PrimitiveArray(0x1000, hprof.Char, 10, charsBE("key=hello;"))
	b.PrimitiveArray(0x1001, hprof.Char, 5, charsBE("hello"))
	long := strings.Repeat("0123456789", 4000) // 80,000 bytes
	b.PrimitiveArray(0x1002, hprof.Char, uint32(len(long)), charsBE(long))
	b.PrimitiveArray(0x1003, hprof.Char, 100, charsBE(long[32700:32800])) // bytes 65,400 to 65,600 of the long one
	strs := []struct {
		id         uint32
		arr        uint64
		off, count int32
	}{
		{0x2000, 0x1000, 0, 10}, // the line
		{0x2001, 0x1000, 4, 5},  // hello, a substring
		{0x2002, 0x1001, 0, 5},  // hello, its own array
		{0x2003, 0x1000, 4, 4},  // hell
		{0x2004, 0x1000, 8, 5},  // past the end
		{0x2005, 0x1000, -1, 2}, // before the start
		{0x2006, 0x1002, 32700, 100},
		{0x2007, 0x1003, 0, 100},
	}
	var ids []uint32
	for _, s := range strs {
		b.Instance(s.id, cString, s.arr, 0, uint64(uint32(s.off)), uint64(s.count))
		ids = append(ids, s.id)
	}
	b.ObjectArray(0x3000, cArray, ids...)
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
	if len(a.DuplicateStrings) != 2 {
		t.Fatalf("duplicate Strings %+v, want hello and the long one's range", a.DuplicateStrings)
	}
	digits, hello := a.DuplicateStrings[0], a.DuplicateStrings[1]
	if want := long[32700:32760] + "…"; digits.Value != want || digits.Copies != 2 || digits.BufferBytes != 200 || digits.Wasted != 200+16 {
		t.Errorf("range across chunks %+v", digits)
	}
	if hello.Value != "hello" || hello.Copies != 2 || hello.Buffers != 2 || hello.BufferBytes != 10 || hello.Wasted != 10+16 || hello.IDs[0] != 0x2001 {
		t.Errorf("hello %+v", hello)
	}
}
