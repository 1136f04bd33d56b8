package adbtest

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
)

// service answers a device service after host:transport.
func (s *Server) service(c net.Conn, d Device, req string) {
	m := Honest
	if !d.HonestProps || !strings.HasPrefix(req, "shell:getprop ") {
		m = s.mode(d.Mode)
	}
	switch {
	case m == Stall:
		hold(c)
	case m == FailNegative:
		write(c, "FAIL-001")
		hold(c)
	case strings.HasPrefix(req, "shell:"):
		s.shell(c, d, m, strings.TrimPrefix(req, "shell:"))
	case strings.HasPrefix(req, "shell,v2,"):
		s.shellV2(c, d, m, req[strings.IndexByte(req, ':')+1:])
	case req == "track-jdwp", req == "track-app":
		s.track(c, m, req)
	case req == "sync:":
		s.syncService(c, m)
	case strings.HasPrefix(req, "jdwp:"):
		s.jdwpService(c, m)
	default:
		write(c, "FAIL"+hex4("closed"))
		hold(c)
	}
}

// output is what an honest device prints for cmd.
func output(d Device, cmd string) string {
	switch cmd {
	case "getprop ro.build.version.sdk":
		if d.API == 0 {
			return "30\n"
		}
		return strconv.Itoa(d.API) + "\n"
	case "getprop ro.product.model":
		return "Hostile\n"
	}
	if strings.HasPrefix(cmd, "ps") {
		return "USER PID PPID VSZ RSS WCHAN ADDR S NAME\n"
	}
	return ""
}

// shell answers shell: (output with no length, then the close).
func (s *Server) shell(c net.Conn, d Device, m Mode, cmd string) {
	switch m {
	case Honest:
		write(c, "OKAY"+output(d, cmd))
		return
	case Endless:
		write(c, "OKAY")
		s.flood(c, "endless output\n")
		return
	}
	s.answerLength(c, m, "FAIL")
}

// shellPacket frames data as a shell protocol v2 packet with length n.
func shellPacket(id byte, n uint32, data string) string {
	b := []byte{id, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], n)
	return string(b) + data
}

// shellV2 answers shell,v2,raw: (packets: id, LE uint32 length, bytes).
func (s *Server) shellV2(c net.Conn, d Device, m Mode, cmd string) {
	switch m {
	case Honest:
		out := output(d, cmd)
		write(c, "OKAY"+shellPacket(1, uint32(len(out)), out)+shellPacket(3, 1, "\x00"))
	case NegativeLength:
		write(c, "OKAY"+shellPacket(1, 0xffffffff, "short"))
	case HugeLength:
		write(c, "OKAY"+shellPacket(1, 0xfffffff0, "short"))
	case BadHex:
		write(c, "OKAY"+shellPacket(9, 0xfffffff0, "unknown id"))
	case Endless:
		write(c, "OKAY")
		chunk := strings.Repeat("endless ", 512)
		s.flood(c, shellPacket(1, uint32(len(chunk)), chunk))
		return
	}
	hold(c)
}

// track answers track-jdwp and track-app (framed lists).
func (s *Server) track(c net.Conn, m Mode, req string) {
	switch m {
	case Honest:
		write(c, "OKAY0000") // no process
		hold(c)
	case Endless:
		write(c, "OKAY")
		list := "0000"
		if req == "track-jdwp" {
			list = hex4("1234\n")
		}
		s.flood(c, list)
	default:
		s.answerLength(c, m, "OKAY")
	}
}

// syncService answers sync: STAT with a file, RECV with DATA per the
// mode (sync packets: 4-byte id, LE uint32 length or value).
func (s *Server) syncService(c net.Conn, m Mode) {
	write(c, "OKAY")
	for {
		var h [8]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		n := binary.LittleEndian.Uint32(h[4:])
		if _, err := io.CopyN(io.Discard, c, int64(min(n, 1024))); err != nil {
			return
		}
		switch string(h[:4]) {
		case "STAT":
			if !s.stat(c, m) {
				return
			}
		case "RECV":
			s.recv(c, m)
			return
		default:
			return
		}
	}
}

// stat answers STAT (id, mode, size, mtime; no length): honestly with an
// empty file, with a file of 1 MiB before a hostile RECV, or with an
// unknown id (BadHex). It tells whether the client may go on.
func (s *Server) stat(c net.Conn, m Mode) bool {
	switch m {
	case Honest:
		return write(c, syncPacket("STAT", 0o100644)+le32(0)+le32(0))
	case BadHex:
		write(c, syncPacket("ZZZZ", 0o100644)+le32(0)+le32(0))
		hold(c)
		return false
	}
	return write(c, syncPacket("STAT", 0o100644)+le32(1<<20)+le32(0))
}

func le32(v uint32) string {
	return string(binary.LittleEndian.AppendUint32(nil, v))
}

func syncPacket(id string, n uint32) string { return id + le32(n) }

// recv answers RECV in a mode.
func (s *Server) recv(c net.Conn, m Mode) {
	switch m {
	case Honest:
		write(c, syncPacket("DONE", 0))
	case NegativeLength:
		write(c, syncPacket("FAIL", 0xffffffff)+"short")
	case HugeLength:
		write(c, syncPacket("DATA", 0xfffffff0)+"short")
	case BadHex:
		write(c, syncPacket("ZZZZ", 0xfffffff0))
	case Endless:
		chunk := strings.Repeat("endless ", 8<<10)
		s.flood(c, syncPacket("DATA", uint32(len(chunk)))+chunk)
		return
	}
	hold(c)
}

// jdwpService answers jdwp:<pid>: the stream has no length of its own.
func (s *Server) jdwpService(c net.Conn, m Mode) {
	switch m {
	case Honest:
		write(c, "FAIL"+hex4("closed"))
		hold(c)
	case Endless:
		write(c, "OKAY")
		s.flood(c, "JDWP-Handshake")
	case HugeLength:
		// The handshake, then a JDWP packet header of the largest length.
		write(c, "OKAYJDWP-Handshake\xff\xff\xff\xff\x00\x00\x00\x01\x80\x00\x00")
		hold(c)
	default:
		s.answerLength(c, m, "FAIL")
	}
}
