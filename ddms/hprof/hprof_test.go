package hprof_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/alloctrack/alloctrack/internal/hproftest"
)

func TestWalkAndroidDump(t *testing.T) {
	rd, err := hprof.NewReader(bytes.NewReader(hproftest.AndroidDump()))
	if err != nil {
		t.Fatal(err)
	}
	if h := rd.Header(); h.Version != "JAVA PROFILE 1.0.3" || h.IDSize != 4 {
		t.Fatalf("header %+v", h)
	}
	var heaps []uint32
	var roots []byte
	var classes []*hprof.ClassDump
	objects := 0
	err = rd.Walk(&hprof.Visitor{
		HeapInfo:       func(id uint32, _ uint64) error { heaps = append(heaps, id); return nil },
		Root:           func(tag byte, _ uint64) error { roots = append(roots, tag); return nil },
		ClassDump:      func(c *hprof.ClassDump) error { classes = append(classes, c); return nil },
		Instance:       func(_, _ uint64, _ uint32) error { objects++; return nil },
		ObjectArray:    func(_, _ uint64, _ uint32) error { objects++; return nil },
		PrimitiveArray: func(_ uint64, _ hprof.Type, _ uint32) error { objects++; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(heaps) != 2 || heaps[0] != 'Z' || heaps[1] != 'A' || objects != 7 || len(classes) != 1 ||
		classes[0].InstanceSize != 8 || len(classes[0].Fields) != 2 || classes[0].Fields[1].Type != hprof.Object ||
		string(roots) != string([]byte{hprof.RootInternedString, hprof.RootJNIMonitor, hprof.RootVMInternal, hprof.SubUnreachable}) {
		t.Errorf("heaps %v, roots %x, classes %+v, %d objects", heaps, roots, classes, objects)
	}
	if rd.Offset() != int64(len(hproftest.AndroidDump())) {
		t.Errorf("read %d of %d bytes", rd.Offset(), len(hproftest.AndroidDump()))
	}
}

// Every truncation of a dump is an error that names an offset within it;
// none panics or reads on.
func TestTruncatedDumps(t *testing.T) {
	full := hproftest.AndroidDump()
	for n := range len(full) {
		rd, err := hprof.NewReader(bytes.NewReader(full[:n]))
		if err == nil {
			err = rd.Walk(&hprof.Visitor{})
		}
		// A cut between two records is a whole, shorter dump.
		if err == nil {
			continue
		}
		var fe *hprof.FormatError
		if !errors.As(err, &fe) || fe.Offset < 0 || fe.Offset > int64(n) {
			t.Fatalf("cut at %d: %T %v", n, err, err)
		}
	}
}

func TestNotHprof(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("hello"), []byte("JAVA PROFILE 9.9\x00"), append([]byte("JAVA PROFILE 1.0.2\x00"), 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0)} {
		if _, err := hprof.NewReader(bytes.NewReader(b)); err == nil {
			t.Errorf("%q read as a dump", b)
		}
	}
}

// A length in a dump never makes the reader allocate it: a STRING record
// that claims 4 GiB in a 40-byte file is an error, quickly.
func TestHostileLengths(t *testing.T) {
	d := hproftest.NewDump("JAVA PROFILE 1.0.2")
	d.U1(hprof.TagString)
	d.U4(0)
	d.U4(0xffffffff)
	d.U4(1)
	rd, err := hprof.NewReader(bytes.NewReader(d.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := rd.Walk(&hprof.Visitor{String: func(uint64, []byte) error { return nil }}); err == nil {
		t.Fatal("a 4 GiB string in a short file was accepted")
	}
}

func FuzzReader(f *testing.F) {
	f.Add(hproftest.AndroidDump())
	f.Add([]byte("JAVA PROFILE 1.0.2\x00\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rd, err := hprof.NewReader(bytes.NewReader(b))
		if err == nil {
			err = rd.Walk(&hprof.Visitor{
				String:    func(uint64, []byte) error { return nil },
				LoadClass: func(uint32, uint64, uint64) error { return nil },
				ClassDump: func(*hprof.ClassDump) error { return nil },
			})
		}
		var fe *hprof.FormatError
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("%T %v", err, err)
		}
		// Again, reading every value.
		rd, err = hprof.NewReader(bytes.NewReader(b))
		if err == nil {
			err = rd.Walk(&hprof.Visitor{
				ClassDump:    func(*hprof.ClassDump) error { return nil },
				InstanceData: func(uint64, uint64, []byte) error { return nil },
				Elements:     func(uint64, uint32, []byte) error { return nil },
				Values:       func(uint64, hprof.Type, uint64, []byte) error { return nil },
			})
		}
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("reading values: %T %v", err, err)
		}
	})
}
