package sim

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/alloctrack/alloctrack/ddms/hprof"
)

// Bitmaps from Android 8 keep their pixels in native memory: a dump shows
// the Java object (mNativePtr, mWidth, mHeight) and nothing of its config
// or pixels. The simulator keeps them beside the heap, by native pointer,
// so that am dumpheap -b (Android 15) can compress them as Bitmap.dumpAll
// does, and the truth can say what duplicates waste.

// bitmapConfig is a Bitmap.Config and its bytes per pixel.
type bitmapConfig struct {
	name  string
	bytes int
}

var (
	cfgARGB8888 = bitmapConfig{"ARGB_8888", 4}
	cfgRGB565   = bitmapConfig{"RGB_565", 2}
	cfgAlpha8   = bitmapConfig{"ALPHA_8", 1}
	cfgRGBAF16  = bitmapConfig{"RGBA_F16", 8}
)

// nativePixels is one Bitmap's native pixel memory.
type nativePixels struct {
	cfg  bitmapConfig
	w, h int
	data []byte // w*h*cfg.bytes
}

// nativeBitmap makes a Bitmap whose pixels are native (Android 8 and
// later), filled with pattern.
func (h *simHeap) nativeBitmap(cfg bitmapConfig, w, ht int, pattern []byte) *hobj {
	h.nativePtr += 0x40
	if h.pixels == nil {
		h.pixels = map[uint64]nativePixels{}
	}
	data := bytes.Repeat(pattern, w*ht*cfg.bytes/len(pattern)+1)[:w*ht*cfg.bytes]
	h.pixels[h.nativePtr] = nativePixels{cfg, w, ht, data}
	return h.instance("android.graphics.Bitmap", heapApp, h.nativePtr, uint64(w), uint64(ht))
}

// imageBitmaps gives the app (Android 8 and later) Bitmaps of each config
// in a static array: two equal RGB_565, two equal ALPHA_8, two equal
// RGBA_F16, one ARGB_8888 alone.
func (h *simHeap) imageBitmaps() {
	if h.api < 26 {
		return
	}
	var ids []uint32
	for _, b := range []struct {
		cfg  bitmapConfig
		w, h int
		n    int
	}{{cfgRGB565, 32, 16, 2}, {cfgAlpha8, 16, 16, 2}, {cfgRGBAF16, 8, 8, 2}, {cfgARGB8888, 40, 10, 1}} {
		for range b.n {
			ids = append(ids, h.nativeBitmap(b.cfg, b.w, b.h, []byte(b.cfg.name)).id)
		}
	}
	arr := h.objArray("java.lang.Object[]", heapApp, ids)
	h.class(h.pkg+".Images", "java.lang.Object", heapApp, nil, []hstatic{{"sImages", hprof.Object, uint64(arr.id)}})
}

// compress is Bitmap.compress(format, 90, ...) of p as far as a dump
// shows it: a PNG as Skia's encoder writes each config (IHDR, sBIT, the
// pixels deflated, IEND), a JPEG or a lossless WebP (their header, then
// the pixels: the simulator does not encode them). Equal pixels give
// equal bytes.
func compress(format string, p nativePixels) []byte {
	switch format {
	case "jpg", "jpeg":
		return append([]byte{0xFF, 0xD8, 0xFF, 0xE0}, p.data...)
	case "webp":
		return append([]byte("RIFF\x00\x00\x00\x00WEBPVP8L"), p.data...)
	}
	// Skia: RGB_565 as 8-bit RGB, sBIT 5,6,5; ALPHA_8 as 8-bit gray+alpha,
	// sBIT gray 1 (only alpha); RGBA_F16 as 16-bit RGBA, sBIT 16;
	// ARGB_8888 as 8-bit RGBA, sBIT 8.
	depth, color, sbit, pixel := byte(8), byte(6), []byte{8, 8, 8, 8}, 4
	switch p.cfg {
	case cfgRGB565:
		color, sbit, pixel = 2, []byte{5, 6, 5}, 3
	case cfgAlpha8:
		color, sbit, pixel = 4, []byte{1, 8}, 2
	case cfgRGBAF16:
		depth, sbit, pixel = 16, []byte{16, 16, 16, 16}, 8
	}
	var raw bytes.Buffer
	src := bytes.Repeat(p.data, pixel/p.cfg.bytes+1)
	for y := range p.h {
		raw.WriteByte(0) // filter: none
		raw.Write(src[y*p.w*pixel : (y+1)*p.w*pixel])
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(raw.Bytes())
	zw.Close()
	out := []byte("\x89PNG\r\n\x1a\n")
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(p.w)), uint32(p.h))
	out = pngChunk(out, "IHDR", append(ihdr, depth, color, 0, 0, 0))
	out = pngChunk(out, "sBIT", sbit)
	out = pngChunk(out, "IDAT", z.Bytes())
	return pngChunk(out, "IEND", nil)
}

func pngChunk(out []byte, typ string, data []byte) []byte {
	out = binary.BigEndian.AppendUint32(out, uint32(len(data)))
	body := append([]byte(typ), data...)
	out = append(out, body...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(body))
}

// bitmapFormats are the formats Bitmap.dumpAll knows; any other only
// gets a warning in the app's log, and no pixels in the dump.
var bitmapFormats = map[string]bool{"png": true, "jpg": true, "jpeg": true, "webp": true}

// withBitmaps runs dump with Bitmap.dumpData holding every live Bitmap's
// pixels as Android 15's Bitmap.dumpAll(format) leaves them: a DumpData
// whose natives are the Bitmaps' mNativePtr and buffers their compressed
// pixels, made in the app's heap for the dump and let go afterwards
// (they are the truth's LeftOut, not the app's memory).
func (h *simHeap) withBitmaps(format string, dump func()) {
	var natives []byte
	var bufs []uint32
	for _, id := range h.order {
		o := h.objs[id]
		if o == nil || o.class < 0 || h.classes[o.class].name != "android.graphics.Bitmap" {
			continue
		}
		natives = binary.BigEndian.AppendUint64(natives, o.vals[0])
		bufs = append(bufs, h.primArray(hprof.Byte, heapApp, compress(format, h.pixels[o.vals[0]])).id)
	}
	nat := h.primArray(hprof.Long, heapApp, natives)
	arr := h.objArray("byte[][]", heapApp, append([]uint32{}, bufs...))
	dd := h.instance("android.graphics.Bitmap$DumpData", heapApp, uint64(len(bufs)), 1, uint64(nat.id), uint64(arr.id), uint64(len(bufs)))
	st := h.static("android.graphics.Bitmap", "dumpData")
	st.v = uint64(dd.id)
	made := append([]uint32{nat.id, arr.id, dd.id}, bufs...)
	h.leftOut = map[uint32]bool{}
	for _, id := range made {
		h.leftOut[id] = true
	}
	defer func() {
		st.v, h.leftOut = 0, nil
		for _, id := range made {
			h.drop(id)
		}
	}()
	dump()
}

// bitmapTruth is what the truth says of Bitmaps and of what a dump made
// for itself: the objects and bytes left out, and the bytes each group of
// equal native Bitmaps wastes (their pixels and Java objects beyond the
// first), by "WxH".
func (h *simHeap) bitmapTruth(t *HeapTruth) {
	for id := range h.leftOut {
		o := h.objs[id]
		t.LeftOut++
		switch {
		case o.class < 0:
			t.LeftOutBytes += uint64(len(o.data))
		case o.elems != nil || h.classes[o.class].name == "byte[][]":
			t.LeftOutBytes += 4 * uint64(len(o.elems))
		default:
			t.LeftOutBytes += uint64(h.fieldBytes(o.class))
		}
	}
	copies := map[string][]uint64{}
	for _, id := range h.order {
		o := h.objs[id]
		if o == nil || o.class < 0 || h.classes[o.class].name != "android.graphics.Bitmap" || h.api < 26 {
			continue
		}
		p := h.pixels[o.vals[0]]
		k := fmt.Sprintf("%dx%d %s %x", p.w, p.h, p.cfg.name, p.data)
		copies[k] = append(copies[k], uint64(p.w*p.h*p.cfg.bytes+h.fieldBytes(o.class)))
	}
	t.BitmapWaste = map[string]uint64{}
	for k, c := range copies {
		if len(c) > 1 {
			var wh string
			fmt.Sscan(k, &wh)
			t.BitmapWaste[wh] = uint64(len(c)-1) * c[0]
		}
	}
}

// fieldBytes is the size of an instance of class ci in a dump.
func (h *simHeap) fieldBytes(ci int) int {
	n := 0
	for _, f := range h.layout(ci) {
		n += f.t.Size(4)
	}
	return n
}
