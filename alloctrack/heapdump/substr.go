package heapdump

import (
	"io"

	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/cespare/xxhash/v2"
)

// Before Android 6 (Dalvik's 4.4, ART's 5.x) a String is count chars of
// its value array from offset, and substring shares its parent's array
// (docs/heapdumps.md, "What each Android version does"): its text is
// that range, not the whole array, and Strings that share one array are
// one copy of what they hold. Later Strings have no offset: their text is
// their whole array.

// strText is a String's text when it is part of its array: its hash, its
// length in bytes and its first bytes (the duplicate's preview); bad when
// offset and count do not fit the array.
type strText struct {
	hash, size uint64
	preview    []byte
	bad        bool
}

const previewBytes = 128 // 64 chars: more than decodeString shows

// strRange is the part of an array a String wants: bytes [from, to).
type strRange struct {
	node     int32 // the String
	from, to uint64
	digest   *xxhash.Digest
	preview  []byte
}

// stringRanges reads the dump once more, only when some reachable String
// holds part of its array, for the hashes of those parts.
func (g *Graph) stringRanges(r io.ReadSeeker) error {
	g.texts = map[int32]strText{}
	want := map[int32][]*strRange{} // by array node
	for _, o := range g.watched {
		if o.kind != watchString || !o.has[0] || !o.has[1] || !o.has[2] || g.idom[o.node] < 0 {
			continue
		}
		arr := g.lookup(o.vals[0])
		if arr < 0 || g.kind[arr] < 0 || !g.kinds[g.kind[arr]].prim {
			continue
		}
		unit := uint64(hprof.Type(g.kinds[g.kind[arr]].class).Size(g.Header.IDSize))
		off, n := int32(o.vals[1]), int32(o.vals[2])
		switch {
		case off < 0 || n < 0 || (uint64(off)+uint64(n))*unit > g.size[arr]:
			g.texts[o.node] = strText{bad: true}
		case off == 0 && uint64(n)*unit == g.size[arr]: // the whole array
		default:
			want[arr] = append(want[arr], &strRange{node: o.node, from: uint64(off) * unit, to: (uint64(off) + uint64(n)) * unit, digest: xxhash.New()})
		}
	}
	if len(want) == 0 {
		return nil
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	rd, err := hprof.NewReader(r)
	if err != nil {
		return err
	}
	err = rd.Walk(&hprof.Visitor{Values: func(id uint64, _ hprof.Type, first uint64, b []byte) error {
		for _, rg := range want[g.lookup(id)] {
			lo, hi := max(rg.from, first), min(rg.to, first+uint64(len(b)))
			if lo >= hi {
				continue
			}
			part := b[lo-first : hi-first]
			rg.digest.Write(part)
			if room := previewBytes - len(rg.preview); room > 0 {
				rg.preview = append(rg.preview, part[:min(len(part), room)]...)
			}
		}
		return nil
	}})
	for _, ranges := range want {
		for _, rg := range ranges {
			g.texts[rg.node] = strText{hash: rg.digest.Sum64(), size: rg.to - rg.from, preview: rg.preview}
		}
	}
	return err
}

// contents returns the hash and size of what a watched object holds in
// array node arr: a String's range, else the whole array.
func (g *Graph) contents(o watchedObj, arr int32) (hash, size uint64, ok bool) {
	if t, found := g.texts[o.node]; found {
		return t.hash, t.size, !t.bad
	}
	hash, ok = g.hashes[arr]
	return hash, g.size[arr], ok
}

// stringValue is the text a duplicate String group shows: the first
// String's range, else the first bytes of its array.
func (g *Graph) stringValue(id uint64, arrayBytes []byte, chars bool) string {
	if t, ok := g.texts[g.lookup(id)]; ok {
		return decodeString(t.preview, chars)
	}
	return decodeString(arrayBytes, chars)
}
