package adb

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
)

// maxSyncData is the most a DATA packet of adb's sync protocol carries
// (SYNC_DATA_MAX, 64 KiB).
const maxSyncData = 64 << 10

// Stat returns the size of a device file and whether it exists, through
// adb's sync protocol (STAT, version 1: sizes of 4 GiB and more wrap).
func (c *Client) Stat(ctx context.Context, serial, remote string) (size int64, exists bool, err error) {
	if len(remote) > 1024 {
		return 0, false, fmt.Errorf("adb: stat %s: path longer than 1024 bytes", remote)
	}
	cn, err := c.transport(ctx, serial, false)
	if err != nil {
		return 0, false, err
	}
	defer cn.Close()
	if err := cn.send("sync:"); err != nil {
		return 0, false, err
	}
	mode, sz, err := syncStat(cn, remote)
	if err != nil {
		return 0, false, err
	}
	io.WriteString(cn.Conn, "QUIT\x00\x00\x00\x00")
	return int64(sz), mode != 0, nil
}

// syncStat sends STAT and reads its answer: mode (0: no such file) and
// size.
func syncStat(cn *conn, remote string) (mode, size uint32, err error) {
	b := binary.LittleEndian.AppendUint32([]byte("STAT"), uint32(len(remote)))
	if _, err := cn.Conn.Write(append(b, remote...)); err != nil {
		return 0, 0, cn.fail("adb: stat %s", err, remote)
	}
	return readStat(cn, remote)
}

// readStat reads a STAT answer (version 1), 16 bytes with no length:
//
//	0      4            8            12           16
//	+------+------------+------------+------------+
//	| STAT | mode LE u32| size LE u32| mtime LE u32|
//	+------+------------+------------+------------+
func readStat(cn *conn, remote string) (mode, size uint32, err error) {
	var h [16]byte
	if _, err := io.ReadFull(cn.r, h[:]); err != nil {
		return 0, 0, cn.fail("adb: stat %s: reading STAT", err, remote)
	}
	if string(h[:4]) != "STAT" {
		return 0, 0, fmt.Errorf("%w: stat %s: STAT answered %q", ErrProtocol, remote, h[:4])
	}
	return binary.LittleEndian.Uint32(h[4:]), binary.LittleEndian.Uint32(h[8:]), nil
}

// Pull copies a device file to w through adb's file sync protocol,
// version 1 (sync:, then STAT and RECV; every adb server and device speak
// it, see docs/heapdumps.md), and returns its size. A missing file is an
// error that says so, as is a file whose size changed while it was read.
// The context bounds the whole copy.
func (c *Client) Pull(ctx context.Context, serial, remote string, w io.Writer) (int64, error) {
	if len(remote) > 1024 {
		return 0, fmt.Errorf("adb: pull %s: path longer than 1024 bytes", remote)
	}
	cn, err := c.transport(ctx, serial, false)
	if err != nil {
		return 0, err
	}
	defer cn.Close()
	if err := cn.send("sync:"); err != nil {
		return 0, err
	}
	req := func(id string) error {
		b := binary.LittleEndian.AppendUint32([]byte(id), uint32(len(remote)))
		if _, err := cn.Conn.Write(append(b, remote...)); err != nil {
			return cn.fail("adb: pull %s: %s", err, remote, id)
		}
		return nil
	}
	mode, size, err := syncStat(cn, remote)
	if err != nil {
		return 0, err
	}
	if mode == 0 {
		return 0, fmt.Errorf("adb: pull %s from %s: no such file", remote, serial)
	}
	if err := req("RECV"); err != nil {
		return 0, err
	}
	return recvData(cn, serial, remote, size, w)
}

// recvData copies the answer to RECV to w and returns its size. Each
// packet is an id and a little-endian uint32:
//
//	DATA len <len bytes, at most 64 KiB>   part of the file
//	DONE mtime                              the end
//	FAIL len <len bytes, at most 64 KiB>    the reason (the first KiB kept)
//
// size is STAT's (the low 32 bits of the file's), checked at DONE.
func recvData(cn *conn, serial, remote string, size uint32, w io.Writer) (int64, error) {
	var n int64
	var h [8]byte
	buf := make([]byte, maxSyncData)
	for {
		if _, err := io.ReadFull(cn.r, h[:]); err != nil {
			return n, cn.fail("adb: pull %s: after %d bytes", err, remote, n)
		}
		k := binary.LittleEndian.Uint32(h[4:8])
		switch string(h[:4]) {
		case "DATA":
			if k > maxSyncData {
				return n, fmt.Errorf("%w: pull %s: DATA of %d bytes", ErrProtocol, remote, k)
			}
			if _, err := io.ReadFull(cn.r, buf[:k]); err != nil {
				return n, cn.fail("adb: pull %s: after %d bytes", err, remote, n)
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return n, err
			}
			n += int64(k)
		case "DONE":
			io.WriteString(cn.Conn, "QUIT\x00\x00\x00\x00")
			if uint32(n) != size { // STAT v1's size is the low 32 bits
				return n, fmt.Errorf("adb: pull %s: %d bytes read, STAT said %d: the file changed while it was read", remote, n, size)
			}
			return n, nil
		case "FAIL":
			return n, recvFail(cn, serial, remote, k)
		default:
			return n, fmt.Errorf("%w: pull %s: sync answered %q", ErrProtocol, remote, h[:4])
		}
	}
}

// recvFail reads the reason of a FAIL answer to RECV, of k bytes, and
// returns it as the error, its first KiB quoted. A reason longer than a
// DATA packet is a protocol error, and one cut short is an error of its
// own, which says what came.
func recvFail(cn *conn, serial, remote string, k uint32) error {
	if k > maxSyncData {
		return fmt.Errorf("%w: pull %s: FAIL reason of %d bytes (at most %d)", ErrProtocol, remote, k, maxSyncData)
	}
	msg, err := readExactly(cn.r, int(k))
	if err != nil {
		return cn.fail("adb: pull %s: reading a FAIL reason of %d bytes (%q came)", err, remote, k, msg[:min(len(msg), 1024)])
	}
	return fmt.Errorf("adb: pull %s from %s: %s", remote, serial, msg[:min(len(msg), 1024)])
}
