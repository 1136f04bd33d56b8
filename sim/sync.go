package sim

import (
	"encoding/binary"
	"io"
	"net"
	"path"
	"slices"
	"strings"
)

// serveSync answers adb's file sync protocol, version 1
// (adb/file_sync_protocol.h; docs/heapdumps.md): requests are a 4-byte id
// and a little-endian u32 length, then that many bytes of path. STAT
// answers the file's mode, size and time (all 0 for no such file); RECV
// sends the file in DATA chunks of at most 64 KiB and DONE, or FAIL and a
// message; LIST sends a DENT per file in the directory and DONE; QUIT
// ends the service. From Android 8.0 (stat_v2) STA2 and LST2 answer the
// v2 stat (statV2), and from 11 (ls_v2) LIS2 lists with it; sendrecv_v2's
// RCV2 is refused. Files are the device's
// files (the trace directory, and what am dumpheap writes); SEND is
// refused.
func (d *Device) serveSync(c net.Conn) {
	defer c.Close()
	var h [8]byte
	u32 := func(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
	fail := func(msg string) {
		b := u32([]byte("FAIL"), uint32(len(msg)))
		c.Write(append(b, msg...))
	}
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		id, n := string(h[:4]), binary.LittleEndian.Uint32(h[4:])
		if id == "QUIT" {
			return
		}
		if n > 1024 {
			fail("path too long")
			return
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(c, p); err != nil {
			return
		}
		name := string(p)
		d.mu.Lock()
		b, ok := d.files[name]
		b = slices.Clone(b)
		var names []string
		var sizes []int
		if id == "LIST" || id == "LIS2" {
			dir := strings.TrimSuffix(name, "/")
			for f, data := range d.files {
				if path.Dir(f) == dir {
					names = append(names, path.Base(f))
					sizes = append(sizes, len(data))
				}
			}
		}
		d.mu.Unlock()
		switch id {
		case "STAT":
			out := []byte("STAT")
			if ok {
				out = u32(u32(u32(out, 0o100644), uint32(len(b))), uint32(d.boot.Unix()))
			} else {
				out = u32(u32(u32(out, 0), 0), 0)
			}
			c.Write(out)
		case "RECV":
			if !ok {
				fail("open failed: No such file or directory")
				continue
			}
			for len(b) > 0 {
				k := min(len(b), 64<<10)
				if _, err := c.Write(append(u32([]byte("DATA"), uint32(k)), b[:k]...)); err != nil {
					return
				}
				b = b[k:]
			}
			c.Write(u32([]byte("DONE"), 0))
		case "STA2", "LST2":
			if !d.hasFeature(id) {
				fail("sim: sync request " + id + " not supported")
				return
			}
			size := -1
			if ok {
				size = len(b)
			}
			c.Write(d.statV2([]byte(id), size))
		case "LIS2":
			if !d.hasFeature(id) {
				fail("sim: sync request " + id + " not supported")
				return
			}
			for i, f := range names {
				e := u32(d.statV2([]byte("DNT2"), sizes[i]), uint32(len(f)))
				c.Write(append(e, f...))
			}
			c.Write(append([]byte("DONE"), make([]byte, 72)...))
		case "LIST":
			for i, f := range names {
				e := u32(u32(u32(u32([]byte("DENT"), 0o100644), uint32(sizes[i])), uint32(d.boot.Unix())), uint32(len(f)))
				c.Write(append(e, f...))
			}
			c.Write(append([]byte("DONE"), make([]byte, 16)...))
		default:
			fail("sim: sync request " + id + " not supported")
			return
		}
	}
}

// syncV2Feature is the feature that brings each v2 sync request.
var syncV2Feature = map[string]string{"STA2": "stat_v2", "LST2": "stat_v2", "LIS2": "ls_v2"}

func (d *Device) hasFeature(req string) bool {
	return slices.Contains(d.Features(), syncV2Feature[req])
}

// statV2 appends to id the rest of a v2 stat (file_sync_protocol.h,
// Android 8.0 and later), all little-endian:
//
//	error u32, dev u64, ino u64, mode u32, nlink u32, uid u32, gid u32,
//	size u64, atime i64, mtime i64, ctime i64
//
// A size below 0 is no such file: error ENOENT and the rest 0.
func (d *Device) statV2(id []byte, size int) []byte {
	le := binary.LittleEndian
	if size < 0 {
		return append(le.AppendUint32(id, 2), make([]byte, 64)...)
	}
	b := le.AppendUint32(id, 0)
	b = le.AppendUint64(le.AppendUint64(b, 0xfd00), 1)
	b = le.AppendUint32(le.AppendUint32(b, 0o100644), 1)
	b = le.AppendUint32(le.AppendUint32(b, 2000), 2000) // shell
	b = le.AppendUint64(b, uint64(size))
	t := uint64(d.boot.Unix())
	return le.AppendUint64(le.AppendUint64(le.AppendUint64(b, t), t), t)
}

// PutFile writes a file on the device (for tests), as if an app or a
// command had.
func (d *Device) PutFile(path string, b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.files[path] = slices.Clone(b)
}

// File returns a file on the device, and whether it exists.
func (d *Device) File(path string) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.files[path]
	return slices.Clone(b), ok
}

// Files lists the device's files in dir, by name.
func (d *Device) Files(dir string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for f := range d.files {
		if path.Dir(f) == strings.TrimSuffix(dir, "/") {
			out = append(out, path.Base(f))
		}
	}
	slices.Sort(out)
	return out
}
