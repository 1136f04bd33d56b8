// Package apktest writes small APK files for tests: a zip archive whose
// AndroidManifest.xml is Android's binary XML (docs/gates.md, "The app's
// version from an APK"), with a manifest element that carries the package,
// android:versionCode, android:versionName and, if set,
// android:versionCodeMajor. Android's own aapt reads what it writes
// (apktest_test.go checks that with `aapt dump badging`).
package apktest

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf16"
)

// Manifest is what an APK's manifest element says; a version attribute
// whose value is zero or empty is left out.
type Manifest struct {
	Package          string
	VersionCode      uint32
	VersionName      string
	VersionCodeMajor uint32 // 0: left out
}

// Android's resource ids of the manifest's attributes (the public ids of
// android.R.attr; the resource map ties attribute names to them).
const (
	AttrVersionCode      = 0x0101021b
	AttrVersionName      = 0x0101021c
	AttrVersionCodeMajor = 0x01010576
)

// Chunk types and value types of binary XML (frameworks/base
// libs/androidfw/include/androidfw/ResourceTypes.h).
const (
	chunkStringPool  = 0x0001
	chunkXML         = 0x0003
	chunkStartNS     = 0x0100
	chunkEndNS       = 0x0101
	chunkStartElem   = 0x0102
	chunkEndElem     = 0x0103
	chunkResourceMap = 0x0180
	typeString       = 0x03
	typeIntDec       = 0x10
	noRef            = 0xffffffff
)

// AndroidNS is the android: namespace of a manifest's attributes.
const AndroidNS = "http://schemas.android.com/apk/res/android"

// ManifestXML encodes m as a binary AndroidManifest.xml:
//
//	XML header (type 3) | string pool | resource map | start namespace
//	| start element <manifest ...attributes> | end element | end namespace
//
// The attribute names come first in the string pool, so the resource map
// gives each its id.
func ManifestXML(m Manifest) []byte {
	strs := []string{"versionCode", "versionName"}
	ids := []uint32{AttrVersionCode, AttrVersionName}
	if m.VersionCodeMajor != 0 {
		strs, ids = append(strs, "versionCodeMajor"), append(ids, AttrVersionCodeMajor)
	}
	idx := func(s string) uint32 {
		for i, x := range strs {
			if x == s {
				return uint32(i)
			}
		}
		strs = append(strs, s)
		return uint32(len(strs) - 1)
	}
	android, ns, pkgAttr, manifest := idx("android"), idx(AndroidNS), idx("package"), idx("manifest")
	pkg, name := idx(m.Package), idx(m.VersionName)
	var attrs [][5]uint32 // ns, name, raw value, type, data
	if m.VersionCode != 0 {
		attrs = append(attrs, [5]uint32{ns, idx("versionCode"), noRef, typeIntDec, m.VersionCode})
	}
	if m.VersionName != "" {
		attrs = append(attrs, [5]uint32{ns, idx("versionName"), name, typeString, name})
	}
	if m.VersionCodeMajor != 0 {
		attrs = append(attrs, [5]uint32{ns, idx("versionCodeMajor"), noRef, typeIntDec, m.VersionCodeMajor})
	}
	attrs = append(attrs, [5]uint32{noRef, pkgAttr, pkg, typeString, pkg})

	var body []byte
	body = append(body, StringPool(strs)...)
	body = append(body, chunk(chunkResourceMap, 8, u32s(ids...))...)
	body = append(body, node(chunkStartNS, u32s(android, ns))...)
	body = append(body, startElement(manifest, attrs)...)
	body = append(body, node(chunkEndElem, u32s(noRef, manifest))...)
	body = append(body, node(chunkEndNS, u32s(android, ns))...)
	return chunk(chunkXML, 8, body)
}

// startElement is a start element chunk: the element's name, then its
// attributes, 20 bytes each.
func startElement(name uint32, attrs [][5]uint32) []byte {
	ext := u32s(noRef, name)
	ext = binary.LittleEndian.AppendUint16(ext, 20) // attributeStart
	ext = binary.LittleEndian.AppendUint16(ext, 20) // attributeSize
	ext = binary.LittleEndian.AppendUint16(ext, uint16(len(attrs)))
	ext = append(ext, 0, 0, 0, 0, 0, 0) // id, class and style indexes
	for _, a := range attrs {
		ext = append(ext, u32s(a[0], a[1], a[2])...)
		ext = binary.LittleEndian.AppendUint16(ext, 8) // Res_value size
		ext = append(ext, 0, byte(a[3]))
		ext = binary.LittleEndian.AppendUint32(ext, a[4])
	}
	return node(chunkStartElem, ext)
}

// node is a tree node chunk: header, line number 1, no comment, ext.
func node(typ uint16, ext []byte) []byte {
	return chunk(typ, 16, append(u32s(1, noRef), ext...))
}

// StringPool encodes strs as a UTF-16 string pool chunk without styles.
func StringPool(strs []string) []byte {
	var data []byte
	offsets := make([]uint32, len(strs))
	for i, s := range strs {
		offsets[i] = uint32(len(data))
		u := utf16.Encode([]rune(s))
		if len(u) > 0x7fff { // the high 15 bits first, flagged
			data = binary.LittleEndian.AppendUint16(data, uint16(len(u)>>16)|0x8000)
		}
		data = binary.LittleEndian.AppendUint16(data, uint16(len(u)))
		for _, c := range u {
			data = binary.LittleEndian.AppendUint16(data, c)
		}
		data = append(data, 0, 0)
	}
	for len(data)%4 != 0 {
		data = append(data, 0)
	}
	const header = 28
	head := u32s(uint32(len(strs)), 0, 0, uint32(header+4*len(strs)), 0)
	return chunk(chunkStringPool, header, append(append(head, u32s(offsets...)...), data...))
}

// chunk puts a chunk header (type, header size, total size) before rest,
// which holds the rest of the header and the chunk's data.
func chunk(typ, headerSize uint16, rest []byte) []byte {
	b := binary.LittleEndian.AppendUint16(nil, typ)
	b = binary.LittleEndian.AppendUint16(b, headerSize)
	b = binary.LittleEndian.AppendUint32(b, uint32(8+len(rest)))
	return append(b, rest...)
}

func u32s(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

// Zip is a zip archive of files, in the order given (name, content, ...).
func Zip(files ...[]byte) []byte {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for i := 0; i+1 < len(files); i += 2 {
		f, err := w.Create(string(files[i]))
		if err == nil {
			_, err = f.Write(files[i+1])
		}
		if err != nil {
			panic(err) // writing to memory
		}
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// APK is an APK of m: a zip archive that holds its manifest (aapt reads
// the manifest of one without resources.arsc).
func APK(m Manifest) []byte {
	return Zip([]byte("AndroidManifest.xml"), ManifestXML(m))
}

// Write writes an APK of m as name in a new temporary directory of t and
// returns its path.
func Write(t testing.TB, name string, m Manifest) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, APK(m), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
