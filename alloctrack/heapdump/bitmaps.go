package heapdump

import (
	"bytes"
	"encoding/binary"

	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// Android 15's am dumpheap -b FORMAT has the app's main thread build
// Bitmap.dumpData just before the dump (ActivityThread.handleDumpHeap,
// Bitmap.dumpAll): a Bitmap$DumpData, its natives (long[]), its buffers
// (byte[][]) and one compressed image (byte[]) per Bitmap, made for the
// dump and let go after it. They are the dump's own artefacts, not the
// app's memory: the histogram, retained sizes, budgets and diffs leave
// them out (Histogram.LeftOut says how much), and a duplicate Bitmap
// wastes its pixel memory, width x height x bytes per pixel of its
// config, not its compressed size.

// leaveOutDumpData marks Bitmap.dumpData and what only it holds as left
// out, before the dominators: their sizes become 0, so nothing retains
// them, and the histogram does not count them.
func (g *Graph) leaveOutDumpData() {
	dd := g.lookup(g.dumpData)
	if g.dumpData == 0 || dd < 0 {
		return
	}
	g.leftOut = map[int32]uint64{dd: g.size[dd]}
	for _, id := range []uint64{g.pixNatives, g.pixBuffers} {
		if n := g.lookup(id); n > 0 && id != 0 {
			g.leftOut[n] = g.size[n]
		}
	}
	if b := g.lookup(g.pixBuffers); g.pixBuffers != 0 && b > 0 {
		for _, w := range g.succ[g.off[b]:g.off[b+1]] {
			if k := g.kind[w]; k >= 0 && g.kinds[k].prim && g.kinds[k].class == uint64(hprof.Byte) {
				g.leftOut[w] = g.size[w]
			}
		}
	}
	for n, size := range g.leftOut {
		g.size[n] = 0
		g.leftOutBytes += size
	}
}

// arraySize is an array's size as the dump gives it, left out or not.
func (g *Graph) arraySize(n int32) uint64 {
	if s, ok := g.leftOut[n]; ok {
		return s
	}
	return g.size[n]
}

// A Bitmap's pixel format, as far as its compressed image tells it.
type pixelFormat struct {
	config string // Bitmap.Config's name
	bytes  uint64 // per pixel
}

var argb8888 = pixelFormat{"ARGB_8888", 4}

// pngFormat tells a Bitmap's config from the PNG that Bitmap.compress
// made of it. Skia's PNG encoder (SkPngEncoder) writes each config its own
// way: RGB_565 as 8-bit RGB with significant bits (sBIT) 5, 6, 5; ALPHA_8
// as 8-bit gray+alpha with sBIT gray 1 (its mark for "only alpha");
// RGBA_F16 as 16-bit samples with sBIT 16; RGBA_1010102 as 16-bit samples
// with sBIT 10; ARGB_4444 with sBIT 4; ARGB_8888 (and a HARDWARE Bitmap,
// read back to it) as 8-bit RGB or RGBA. A JPEG, a WebP or anything else
// does not tell: such a Bitmap counts as ARGB_8888, the default config,
// and ok is false.
func pngFormat(b []byte) (f pixelFormat, ok bool) {
	const sig = "\x89PNG\r\n\x1a\n"
	if !bytes.HasPrefix(b, []byte(sig)) {
		return argb8888, false
	}
	var depth, color byte
	var sbit []byte
	for p := len(sig); p+8 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[p:]))
		typ, data := string(b[p+4:p+8]), b[p+8:]
		if n < 0 || n > len(data) {
			break
		}
		data = data[:n]
		switch typ {
		case "IHDR":
			if n >= 10 {
				depth, color = data[8], data[9]
			}
		case "sBIT":
			sbit = data
		}
		if typ == "IDAT" || typ == "IEND" {
			break
		}
		p += 12 + n
	}
	switch {
	case depth == 0:
		return argb8888, false
	case depth == 16 && len(sbit) > 0 && sbit[0] == 10:
		return pixelFormat{"RGBA_1010102", 4}, true
	case depth == 16:
		return pixelFormat{"RGBA_F16", 8}, true
	case color == 4 && len(sbit) == 2 && sbit[0] == 1 && sbit[1] == 8:
		return pixelFormat{"ALPHA_8", 1}, true
	case color == 2 && bytes.Equal(sbit, []byte{5, 6, 5}):
		return pixelFormat{"RGB_565", 2}, true
	case len(sbit) > 0 && sbit[0] == 4:
		return pixelFormat{"ARGB_4444", 2}, true
	}
	return argb8888, true
}
