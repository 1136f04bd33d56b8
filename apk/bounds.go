package apk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Binary XML, as far as it is checked here (frameworks/base
// libs/androidfw/include/androidfw/ResourceTypes.h; little-endian):
//
//	file:          chunk header (type 0x0003) | chunks
//	chunk header:  type u16 | header size u16 | size u32 (header included)
//	string pool:   chunk header | strings u32 | styles u32 | flags u32
//	               | strings start u32 | styles start u32
//	               | string offsets u32 × strings | style offsets u32 × styles
//	               | … each string at strings start + its offset
//	UTF-16 string: length u16 (top bit set: one u16 more, 31 bits) | units
//	UTF-8 string:  UTF-16 length u8 (top bit set: one u8 more) | byte
//	               length (the same) | bytes
//	namespace:     chunk header | line u32 | comment u32 | (at header size)
//	               prefix u32 | uri u32
//	start element: chunk header | line u32 | comment u32 | (at header size)
//	               ns u32 | name u32 | attribute start u16 | attribute size
//	               u16 | attribute count u16 | id, class, style u16
//	               | (at header size + attribute start, attribute size
//	               each) ns u32 | name u32 | raw value u32 | value 8 bytes
const (
	chunkXML        = 0x0003
	chunkStringPool = 0x0001
	chunkStartNS    = 0x0100
	chunkStartElem  = 0x0102
	poolHeader      = 28
	attrMin         = 20
	noRef           = 0xffffffff
	flagUTF8        = 0x100
)

// maxText bounds the string bytes the namespaces and the first element
// may name: the decoder writes each named string out as text.
const maxText = 1 << 20

// scan is a check of a binary XML file's chunks up to its first element.
type scan struct {
	lens      []int // declared bytes of each string of the pool
	text      int   // string bytes named so far
	maxPrefix int   // the longest namespace prefix
}

// firstElement checks the chunks of a binary XML file b up to its first
// start element and returns them as a file of their own: the decoder
// allocates what string pools and elements declare, so none may declare
// more than it holds.
func firstElement(b []byte) ([]byte, error) {
	if len(b) < 8 || le16(b) != chunkXML || le16(b[2:]) < 8 {
		return nil, errors.New("not binary XML (no chunk header of type 0x0003)")
	}
	var s scan
	end := min(uint64(le32(b[4:])), uint64(len(b)))
	for off := uint64(le16(b[2:])); off < end; {
		c, err := chunkAt(b, off)
		if err != nil {
			return nil, err
		}
		switch le16(c) {
		case chunkStringPool:
			err = s.pool(c)
		case chunkStartNS:
			err = s.namespace(c)
		case chunkStartElem:
			if err = s.element(c); err == nil {
				head := bytes.Clone(b[:off+uint64(len(c))])
				binary.LittleEndian.PutUint32(head[4:], uint32(len(head)))
				return head, nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("chunk type 0x%04x at offset %d: %w", le16(c), off, err)
		}
		off += uint64(len(c))
	}
	return nil, errors.New("no element")
}

// chunkAt returns the chunk at off, checked to lie within b.
func chunkAt(b []byte, off uint64) ([]byte, error) {
	if off+8 > uint64(len(b)) {
		return nil, fmt.Errorf("chunk at offset %d: past the end (%d bytes)", off, len(b))
	}
	hs, size := uint64(le16(b[off+2:])), uint64(le32(b[off+4:]))
	if hs < 8 || size < hs || off+size > uint64(len(b)) {
		return nil, fmt.Errorf("chunk at offset %d: header size %d, size %d in a file of %d bytes", off, hs, size, len(b))
	}
	return b[off : off+size], nil
}

// pool checks a string pool chunk and notes its strings' lengths.
func (s *scan) pool(c []byte) error {
	if len(c) < poolHeader {
		return fmt.Errorf("string pool of %d bytes, shorter than its header", len(c))
	}
	n, styles := uint64(le32(c[8:])), uint64(le32(c[12:]))
	if poolHeader+4*(n+styles) > uint64(len(c)) {
		return fmt.Errorf("string pool of %d bytes declares %d strings and %d styles", len(c), n, styles)
	}
	utf8, start := le32(c[16:])&flagUTF8 != 0, uint64(le32(c[20:]))
	s.lens = make([]int, n)
	for i := range s.lens {
		o := start + uint64(le32(c[poolHeader+4*i:]))
		l, ok := stringLen(c, o, utf8)
		if !ok {
			return fmt.Errorf("string %d at %d: its length runs past the pool's %d bytes", i, o, len(c))
		}
		s.lens[i] = l
	}
	return nil
}

// stringLen is the byte length of the string at o of pool c, if all of it
// lies within c.
func stringLen(c []byte, o uint64, utf8 bool) (int, bool) {
	var n uint64
	var ok bool
	if utf8 {
		if _, o, ok = length(c, o, 1); ok {
			n, o, ok = length(c, o, 1)
		}
	} else {
		n, o, ok = length(c, o, 2)
		n *= 2
	}
	return int(n), ok && o+n <= uint64(len(c))
}

// length reads a string length of unit bytes (1 or 2) at o: the top bit
// set says one unit more follows. It returns the offset after it.
func length(c []byte, o uint64, unit uint64) (n, next uint64, ok bool) {
	get := func(o uint64) uint64 {
		if unit == 1 {
			return uint64(c[o])
		}
		return uint64(le16(c[o:]))
	}
	top := uint64(1) << (8*unit - 1)
	if o+unit > uint64(len(c)) {
		return 0, 0, false
	}
	if n = get(o); n&top == 0 {
		return n, o + unit, true
	}
	if o+2*unit > uint64(len(c)) {
		return 0, 0, false
	}
	return (n&^top)<<(8*unit) | get(o+unit), o + 2*unit, true
}

// namespace checks a start namespace chunk and counts its strings.
func (s *scan) namespace(c []byte) error {
	hs := uint64(le16(c[2:]))
	if hs+8 > uint64(len(c)) {
		return fmt.Errorf("namespace of %d bytes", len(c))
	}
	p := s.str(le32(c[hs:]))
	s.maxPrefix = max(s.maxPrefix, p)
	s.text += p + s.str(le32(c[hs+4:]))
	return s.textOK()
}

// element checks a start element's attributes lie within it, and counts
// the strings it names.
func (s *scan) element(c []byte) error {
	hs := uint64(le16(c[2:]))
	if hs+attrMin > uint64(len(c)) {
		return fmt.Errorf("element of %d bytes", len(c))
	}
	ext := c[hs:]
	start := uint64(uint16(le16(ext[8:]) + uint16(hs))) // as the decoder adds them
	size, count := uint64(le16(ext[10:])), uint64(le16(ext[12:]))
	if count > 0 && (size < attrMin || start+count*size > uint64(len(c))) {
		return fmt.Errorf("%d attributes of %d bytes at %d do not fit its %d bytes", count, size, start, len(c))
	}
	s.text += s.str(le32(ext[4:]))
	for i := range count {
		a := c[start+i*size:]
		if le32(a) != noRef {
			s.text += s.maxPrefix
		}
		s.text += s.str(le32(a[4:])) + s.str(le32(a[8:]))
	}
	return s.textOK()
}

// str is the length of string ref, 0 for none.
func (s *scan) str(ref uint32) int {
	if uint64(ref) < uint64(len(s.lens)) {
		return s.lens[ref]
	}
	return 0
}

func (s *scan) textOK() error {
	if s.text > maxText {
		return fmt.Errorf("names %d bytes of strings, more than the %d read", s.text, maxText)
	}
	return nil
}

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
