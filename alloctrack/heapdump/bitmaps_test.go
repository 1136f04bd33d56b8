package heapdump

import (
	"encoding/binary"
	"testing"
)

// png is a PNG's signature, IHDR (8x8, depth, color type) and, when sbit
// is set, an sBIT chunk, then an IDAT (CRCs are not checked).
func png(depth, color byte, sbit ...byte) []byte {
	chunk := func(out []byte, typ string, data []byte) []byte {
		out = binary.BigEndian.AppendUint32(out, uint32(len(data)))
		out = append(append(out, typ...), data...)
		return append(out, 0, 0, 0, 0)
	}
	out := chunk([]byte("\x89PNG\r\n\x1a\n"), "IHDR", []byte{0, 0, 0, 8, 0, 0, 0, 8, depth, color, 0, 0, 0})
	out = chunk(out, "iCCP", make([]byte, 300)) // a colour profile before sBIT
	if sbit != nil {
		out = chunk(out, "sBIT", sbit)
	}
	return chunk(out, "IDAT", []byte{1, 2, 3})
}

// Each config as Skia's PNG encoder writes it; what does not tell
// counts as ARGB_8888.
func TestPNGFormat(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		want pixelFormat
		ok   bool
	}{
		{"8888", png(8, 6, 8, 8, 8, 8), pixelFormat{"ARGB_8888", 4}, true},
		{"8888 opaque", png(8, 2, 8, 8, 8), pixelFormat{"ARGB_8888", 4}, true},
		{"565", png(8, 2, 5, 6, 5), pixelFormat{"RGB_565", 2}, true},
		{"alpha", png(8, 4, 1, 8), pixelFormat{"ALPHA_8", 1}, true},
		{"gray+alpha", png(8, 4, 8, 8), pixelFormat{"ARGB_8888", 4}, true},
		{"f16", png(16, 6, 16, 16, 16, 16), pixelFormat{"RGBA_F16", 8}, true},
		{"1010102", png(16, 6, 10, 10, 10, 2), pixelFormat{"RGBA_1010102", 4}, true},
		{"4444", png(8, 6, 4, 4, 4, 4), pixelFormat{"ARGB_4444", 2}, true},
		{"jpeg", []byte{0xFF, 0xD8, 0xFF, 0xE0, 1, 2}, argb8888, false},
		{"cut", png(8, 2, 5, 6, 5)[:20], argb8888, false},
		{"chunk past the end", append(png(8, 2)[:33], 0xFF, 0xFF, 0xFF, 0xFF, 's', 'B', 'I', 'T'), argb8888, true},
	} {
		if got, ok := pngFormat(c.b); got != c.want || ok != c.ok {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
