package ddms

import (
	"encoding/binary"
	"fmt"
	"unicode/utf16"
)

// decoder reads big-endian fields from a payload. The first failure is
// sticky: later reads return zero values and err keeps the first cause.
type decoder struct {
	what string // e.g. "HELO reply", for error messages
	b    []byte
	off  int
	err  error
}

func (d *decoder) fail(field string, need int) {
	if d.err == nil {
		d.err = fmt.Errorf("%w %s: %s at offset %d needs %d bytes, %d left (payload length %d)",
			ErrMalformed, d.what, field, d.off, need, len(d.b)-d.off, len(d.b))
	}
}

func (d *decoder) left() int { return len(d.b) - d.off }

func (d *decoder) take(field string, n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > d.left() {
		d.fail(field, n)
		return nil
	}
	s := d.b[d.off : d.off+n]
	d.off += n
	return s
}

func (d *decoder) u8(field string) uint8 {
	if s := d.take(field, 1); s != nil {
		return s[0]
	}
	return 0
}

func (d *decoder) u32(field string) uint32 {
	if s := d.take(field, 4); s != nil {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (d *decoder) u64(field string) uint64 {
	if s := d.take(field, 8); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

// chars reads n UTF-16BE code units.
func (d *decoder) chars(field string, n uint32) string {
	if d.err != nil {
		return ""
	}
	if uint64(n)*2 > uint64(d.left()) {
		if d.err == nil {
			d.err = fmt.Errorf("%w %s: %s at offset %d declares %d UTF-16 units (%d bytes), %d bytes left (payload length %d)",
				ErrMalformed, d.what, field, d.off, n, uint64(n)*2, d.left(), len(d.b))
		}
		return ""
	}
	return DecodeUTF16(d.take(field, int(n)*2))
}

// str reads a u32 count of UTF-16 units and the units.
func (d *decoder) str(field string) string {
	n := d.u32(field + " length")
	return d.chars(field, n)
}

// DecodeUTF16 turns UTF-16BE bytes into a Go string. An odd final byte is
// ignored; unpaired surrogates become U+FFFD.
func DecodeUTF16(b []byte) string {
	ascii := true
	for i := 0; i+1 < len(b); i += 2 {
		if b[i] != 0 || b[i+1] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		out := make([]byte, len(b)/2)
		for i := range out {
			out[i] = b[2*i+1]
		}
		return string(out)
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

// AppendUTF16 appends s as UTF-16BE code units (no length prefix).
func AppendUTF16(dst []byte, s string) []byte {
	for _, r := range s {
		if r >= 0x10000 {
			r1, r2 := utf16.EncodeRune(r)
			dst = binary.BigEndian.AppendUint16(dst, uint16(r1))
			dst = binary.BigEndian.AppendUint16(dst, uint16(r2))
			continue
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(r))
	}
	return dst
}

// UTF16Len is the number of UTF-16 code units of s.
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return n
}

// AppendString appends a u32 unit count and the UTF-16BE units of s.
func AppendString(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(UTF16Len(s)))
	return AppendUTF16(dst, s)
}
