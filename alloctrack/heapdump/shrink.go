package heapdump

import (
	"encoding/binary"
	"io"
	"maps"
	"slices"

	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// ShrinkStats says what Shrink did.
type ShrinkStats struct {
	// Emptied is the primitive arrays written without their values, and
	// the bytes of values dropped; DuplicateBuffers the Bitmap buffers
	// left out because an equal one is kept, and their bytes.
	Emptied, EmptiedBytes                  uint64
	DuplicateBuffers, DuplicateBufferBytes uint64
}

// Shrink writes the dump r to w as Tencent Matrix's ResourceCanary
// shrinks dumps: every primitive array loses its values (it is written
// with no elements), except Strings' values and Bitmaps' buffers; a
// Bitmap whose buffer equals another's is pointed at that one, and the
// copy is left out. Everything else is copied as it is, so the result is
// a valid dump of the same format that every reader takes; what it no
// longer holds is the dropped arrays' sizes (they count as empty).
func Shrink(r io.ReadSeeker, w io.Writer) (*ShrinkStats, error) {
	g, err := ReadGraph(r)
	if err != nil {
		return nil, err
	}
	return g.Shrink(r, w)
}

// Shrink is Shrink of the dump r whose graph g is: the dump is not read
// into a graph again.
func (g *Graph) Shrink(r io.ReadSeeker, w io.Writer) (*ShrinkStats, error) {
	ids := g.Header.IDSize
	keep := map[int32]bool{}
	type bufKey struct{ hash, size uint64 }
	first := map[bufKey]uint64{} // a buffer's contents -> the id of the copy kept
	replace := map[uint64]uint64{}
	st := &ShrinkStats{}
	for _, o := range g.watched {
		if !o.has[0] || (o.kind != watchString && o.kind != watchBitmap) {
			continue
		}
		arr := g.lookup(o.vals[0])
		if arr < 0 || g.kind[arr] < 0 || !g.kinds[g.kind[arr]].prim {
			continue
		}
		if o.kind == watchBitmap {
			if h, ok := g.hashes[arr]; ok {
				k := bufKey{h, g.size[arr]}
				if id, seen := first[k]; seen && id != g.ids[arr] {
					if _, done := replace[g.ids[arr]]; !done {
						st.DuplicateBuffers++
						st.DuplicateBufferBytes += g.size[arr]
					}
					replace[g.ids[arr]] = id
					continue
				}
				first[k] = g.ids[arr]
			}
		}
		keep[arr] = true
	}
	// Android 15's compressed pixels (Bitmap.dumpData) are kept, every
	// one (they are not deduplicated), and so are its natives.
	if g.pixNatives != 0 {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		if err := g.readPixels(r); err != nil {
			return nil, err
		}
		for _, id := range append(slices.Collect(maps.Values(g.pixels)), g.pixNatives) {
			if n := g.lookup(id); n > 0 { // the images, and what pairs them with Bitmaps
				keep[n] = true
			}
		}
	}
	bitmapField := map[uint64]uint32{} // class -> offset of mBuffer
	for class, w := range g.watches {
		if w.kind == watchBitmap && w.fields[0].ok {
			bitmapField[class] = w.fields[0].off
		}
	}
	for n := 1; n < len(g.ids); n++ {
		if k := g.kind[n]; k >= 0 && g.kinds[k].prim && g.size[n] > 0 && !keep[int32(n)] {
			if _, dup := replace[g.ids[n]]; !dup {
				st.Emptied++
				st.EmptiedBytes += g.size[n]
			}
		}
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	err := hprof.Rewrite(r, w, hprof.Edit{
		Array: func(id uint64, t hprof.Type, n uint32) hprof.ArrayAction {
			if _, dup := replace[id]; dup {
				return hprof.ArrayDrop
			}
			if keep[g.lookup(id)] || n == 0 {
				return hprof.ArrayKeep
			}
			return hprof.ArrayEmpty
		},
		Instance: func(_, class uint64, data []byte) {
			off, ok := bitmapField[class]
			if !ok || int(off)+ids > len(data) {
				return
			}
			b := data[off : int(off)+ids]
			to, ok := replace[hprof.ID(b, ids)]
			if !ok {
				return
			}
			if ids == 8 {
				binary.BigEndian.PutUint64(b, to)
			} else {
				binary.BigEndian.PutUint32(b, uint32(to))
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}
