package allocreport

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"unicode/utf16"
)

// checkFramesPlain is the frame check written as plainly as possible, the
// reference for checkFrames (assembly on amd64) and checkFramesGo.
func checkFramesPlain(b []byte, allocs []Allocation, nc, nm, nf int) int {
	for i, a := range allocs {
		for j := range int(a.Depth) {
			p := b[int(a.off)+j*FrameLen:]
			if int(binary.BigEndian.Uint16(p)) >= nc || int(binary.BigEndian.Uint16(p[2:])) >= nm ||
				int(binary.BigEndian.Uint16(p[4:])) >= nf {
				return i
			}
		}
	}
	return -1
}

// TestCheckFramesAgree checks entries of every depth from 0 to 20 (so
// every mix of the four-, two- and one-frame steps) with one index at,
// just below or far above its limit in every field and position, and
// random lines, against the plain check.
func TestCheckFramesAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, lim := range [][3]int{{1, 1, 1}, {320, 1000, 200}, {65535, 65535, 65535}, {2, 40000, 0x8001}, {0x100, 0xff, 0x101}} {
		nc, nm, nf := lim[0], lim[1], lim[2]
		lv := frameLimits(nc, nm, nf)
		for depth := 0; depth <= 20; depth++ {
			for pos := range max(depth, 1) {
				for field := range 4 {
					for _, delta := range []int{-1, 0, 1, 0x7fff, 0xffff} {
						// Three entries: the middle one has the index under test.
						var b []byte
						var allocs []Allocation
						for e := range 3 {
							allocs = append(allocs, Allocation{Depth: uint8(depth), off: uint32(len(b))})
							for j := range depth {
								f := [4]uint16{uint16(rng.IntN(nc)), uint16(rng.IntN(nm)), uint16(rng.IntN(nf)), uint16(rng.Uint32())}
								if e == 1 && j == pos && field < 3 {
									v := lim[field] + delta
									f[field] = uint16(min(max(v, 0), 0xffff))
								}
								for _, x := range f {
									b = binary.BigEndian.AppendUint16(b, x)
								}
							}
							b = append(b, 0xff) // a byte that is no frame's, between entries
						}
						want := checkFramesPlain(b, allocs, nc, nm, nf)
						if got := checkFramesGo(&b[0], allocs, &lv); got != want {
							t.Fatalf("limits %v depth %d pos %d field %d delta %d: checkFramesGo %d, want %d", lim, depth, pos, field, delta, got, want)
						}
						if got := checkFrames(&b[0], allocs, &lv); got != want {
							t.Fatalf("limits %v depth %d pos %d field %d delta %d: checkFrames %d, want %d", lim, depth, pos, field, delta, got, want)
						}
					}
				}
			}
		}
	}
}

// TestParseBadFrameAnywhere puts one out-of-range index in every field of
// frames at and around the chunk boundaries of walkEntries: Parse must
// report exactly that frame, as the plain loop would word it.
func TestParseBadFrameAnywhere(t *testing.T) {
	bld := NewBuilder()
	frames := []FrameName{{"La/A;", "m0", "A.java", 1}, {"La/B;", "m1", "B.java", 2}, {"La/C;", "m2", "C.java", 3}}
	const entries = 3*walkChunk + 5
	for i := range entries {
		bld.Add(uint32(16+i), 7, "La/A;", frames[:1+i%3])
	}
	r, err := bld.Report()
	if err != nil {
		t.Fatal(err)
	}
	good, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(good); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, walkChunk - 1, walkChunk, walkChunk + 1, 2*walkChunk + 7, entries - 1} {
		depth := 1 + i%3
		for j := range depth {
			for field, what := range []string{"class", "method", "file"} {
				b := append([]byte(nil), good...)
				a := &r.Allocations[i]
				off := HeaderLen + (int(a.off)) + j*FrameLen + 2*field
				// r is a built report: its offsets are into its own frame
				// bytes; in the payload each entry adds a 9-byte header.
				off += (i + 1) * EntryHeaderLen
				binary.BigEndian.PutUint16(b[off:], 3)
				_, err := Parse(b)
				want := fmt.Sprintf("REAL report: entry %d frame %d: %s index 3 out of range (3 %s names) at offset %d", i, j, what, what, off)
				if err == nil || err.Error() != want {
					t.Fatalf("entry %d frame %d %s: got %v, want %s", i, j, what, err, want)
				}
			}
		}
	}
}

// TestPutUTF16 compares putUTF16 with string(utf16.Decode) on random
// mixes of ASCII, two- and three-byte letters, surrogate pairs and lone
// surrogates at every position.
func TestPutUTF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pick := []func() uint16{
		func() uint16 { return uint16(rng.IntN(0x80)) },
		func() uint16 { return uint16(0x80 + rng.IntN(0x780)) },
		func() uint16 { return uint16(0x800 + rng.IntN(0xd000)) },
		func() uint16 { return uint16(0xe000 + rng.IntN(0x2000)) },
		func() uint16 { return uint16(0xd800 + rng.IntN(0x400)) }, // high surrogate
		func() uint16 { return uint16(0xdc00 + rng.IntN(0x400)) }, // low surrogate
		func() uint16 {
			return [...]uint16{0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xdbff, 0xdc00, 0xdfff, 0xe000, 0xffff}[rng.IntN(10)]
		},
	}
	for range 20000 {
		n := rng.IntN(24)
		units := make([]uint16, n)
		ascii := rng.IntN(2) == 0
		for i := range units {
			if ascii && rng.IntN(8) != 0 {
				units[i] = pick[0]()
			} else {
				units[i] = pick[rng.IntN(len(pick))]()
			}
		}
		var b []byte
		for _, u := range units {
			b = binary.BigEndian.AppendUint16(b, u)
		}
		want := string(utf16.Decode(units))
		dst := make([]byte, 5+3*n+4)
		k := putUTF16(dst, 5, b)
		if got := string(dst[5:k]); got != want {
			t.Fatalf("units %04x: got %q, want %q", units, got, want)
		}
	}
}

// TestParseReusing checks that a parse into a reused array gives the same
// report as a fresh one, uses the array only when it is large enough, and
// that stale contents do not leak into the result.
func TestParseReusing(t *testing.T) {
	p, err := Encode(sampleReport(t))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse(p)
	if err != nil {
		t.Fatal(err)
	}
	stale := make([]Allocation, 10)
	for i := range stale {
		stale[i] = Allocation{Size: 999, Depth: 200, off: 1 << 30}
	}
	got, err := ParseReusing(p, stale[:7])
	if err != nil {
		t.Fatal(err)
	}
	if !sameRecords(got, want) || &got.Allocations[0] != &stale[0] {
		t.Fatalf("reused parse differs or did not use the array: %+v", got.Allocations)
	}
	small := make([]Allocation, 1)
	got, err = ParseReusing(p, small)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRecords(got, want) || &got.Allocations[0] == &small[0] {
		t.Fatal("a too-small array was used")
	}
}

func BenchmarkParseMaxReusing(b *testing.B) {
	p := maxReport(b)
	allocs := make([]Allocation, MaxEntries)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseReusing(p, allocs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseMaxLargeTablesReusing(b *testing.B) {
	p := maxReportLargeTables(b)
	allocs := make([]Allocation, MaxEntries)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseReusing(p, allocs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseRealReusing(b *testing.B) {
	p := readReal(b)
	allocs := make([]Allocation, MaxEntries)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseReusing(p, allocs); err != nil {
			b.Fatal(err)
		}
	}
}
