package hproftest

import (
	"bytes"

	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// LeakyDump is an Android-style dump with Activities (one destroyed and
// held by a static, one destroyed and unreachable, one alive), Fragments
// (one without a FragmentManager held in an array, one with), Strings
// whose value arrays repeat, and two Bitmaps with equal buffers.
func LeakyDump() []byte {
	b := NewBuilder("JAVA PROFILE 1.0.3")
	const (
		cObject = 0x100 + iota
		cActivity
		cMain
		cLeaky
		cFragment
		cMyFragment
		cString
		cBitmap
		cArray
	)
	obj := hprof.Object
	b.Class(cObject, 0, "java.lang.Object", nil, nil)
	b.Class(cActivity, cObject, "android.app.Activity", []Field{{Name: "mDestroyed", Type: hprof.Boolean}, {Name: "mFinished", Type: hprof.Boolean}}, nil)
	b.Class(cMain, cActivity, "com.example.MainActivity", []Field{{Name: "mData", Type: obj}}, nil)
	b.Class(cLeaky, cObject, "com.example.Leaky", nil, []StaticRef{{Name: "sActivity", Value: 0x1000}})
	b.Class(cFragment, cObject, "androidx.fragment.app.Fragment", []Field{{Name: "mFragmentManager", Type: obj}}, nil)
	b.Class(cMyFragment, cFragment, "com.example.MyFragment", []Field{{Name: "mView", Type: obj}}, nil)
	b.Class(cString, cObject, "java.lang.String", []Field{{Name: "value", Type: obj}, {Name: "hash", Type: hprof.Int}}, nil)
	b.Class(cBitmap, cObject, "android.graphics.Bitmap", []Field{{Name: "mBuffer", Type: obj}, {Name: "mWidth", Type: hprof.Int}, {Name: "mHeight", Type: hprof.Int}}, nil)
	b.Class(cArray, cObject, "java.lang.Object[]", nil, nil)
	b.HeapInfo('A', "app")
	// Activities: fields mData (own), then mDestroyed, mFinished.
	b.Instance(0x1000, cMain, 0x1100, 1, 1) // destroyed, held by Leaky.sActivity
	b.PrimitiveArray(0x1100, hprof.Byte, 1000, make([]byte, 1000))
	b.Instance(0x1001, cMain, 0, 1, 1) // destroyed, unreachable
	b.Instance(0x1002, cMain, 0, 0, 0) // alive
	// Fragments: mView, then mFragmentManager.
	b.ObjectArray(0x2000, cArray, 0x2001, 0x2002)
	b.Instance(0x2001, cMyFragment, 0, 0)      // detached, held
	b.Instance(0x2002, cMyFragment, 0, 0x1002) // attached
	// Strings: three copies of "hello" in three arrays, two sharing one
	// array of "shared", one unique.
	hello := utf16be("hello")
	for i := range uint32(3) {
		b.PrimitiveArray(0x3100+i, hprof.Char, 5, hello)
		b.Instance(0x3000+i, cString, uint64(0x3100+i), 0)
	}
	b.PrimitiveArray(0x3200, hprof.Char, 6, utf16be("shared"))
	b.Instance(0x3010, cString, 0x3200, 0)
	b.Instance(0x3011, cString, 0x3200, 0)
	b.PrimitiveArray(0x3201, hprof.Char, 6, utf16be("unique"))
	b.Instance(0x3012, cString, 0x3201, 0)
	// Bitmaps: two 10x10 with equal buffers.
	px := bytes.Repeat([]byte{7}, 400)
	b.PrimitiveArray(0x4100, hprof.Byte, 400, px)
	b.PrimitiveArray(0x4101, hprof.Byte, 400, px)
	b.Instance(0x4000, cBitmap, 0x4100, 10, 10)
	b.Instance(0x4001, cBitmap, 0x4101, 10, 10)
	b.ObjectArray(0x5000, cArray, 0x3000, 0x3001, 0x3002, 0x3010, 0x3011, 0x3012, 0x4000, 0x4001, 0x1002)
	b.Root(hprof.RootStickyClass, cLeaky)
	b.Root(hprof.RootUnknown, 0x2000)
	b.Root(hprof.RootUnknown, 0x5000)
	return b.Bytes()
}

func utf16be(s string) []byte {
	var b []byte
	for _, r := range s {
		b = append(b, byte(r>>8), byte(r))
	}
	return b
}
