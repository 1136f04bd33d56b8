package transcript

import (
	"bytes"
	"encoding/binary"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// pipe copies the bytes both ways until both sides are done, recording each
// read as a data record, then a close record for each side that ended.
func (p *proxy) pipe(st *connState, cc, sc net.Conn) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fromDevice []byte // for the shell v2 summary
	shellV2 := strings.HasPrefix(st.service, "shell,v2")
	anon := p.anon.conn() // nil without anonymizing
	emit := func(dir string, data []byte) {
		p.w.write(Entry{Kind: KindData, Conn: st.id, Dir: dir, Data: bytes.Clone(data)})
	}
	copyDir := func(dst, src net.Conn, dir string) {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				data := buf[:n]
				if p.anon != nil && dir == FromDevice && deviceList(st.hostSvc) {
					p.learnDevices(data)
				}
				if dir == FromDevice && shellV2 {
					mu.Lock()
					fromDevice = append(fromDevice, data...)
					mu.Unlock()
				}
				anon.push(dir, data, emit)
				if _, werr := dst.Write(data); werr != nil {
					err = werr
				}
			}
			if err != nil {
				anon.flush(dir, emit)
				p.w.write(Entry{Kind: KindClose, Conn: st.id, Dir: dir})
				// The other side learns of the end as a half close, or
				// a full one where the connection has no half close.
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				} else {
					dst.Close()
				}
				return
			}
		}
	}
	wg.Add(2)
	go copyDir(sc, cc, ToDevice)
	go copyDir(cc, sc, FromDevice)
	wg.Wait()
	if shellV2 {
		p.shellSummary(st, fromDevice)
	}
}

// Shell protocol v2 packet: id (1 byte: 1 stdout, 2 stderr, 3 exit), length
// (u32 little-endian), data.
const (
	shellStdout = 1
	shellStderr = 2
	shellExit   = 3
)

// shellSummary writes a shell v2 command's stdout, stderr and exit status
// as one readable record.
func (p *proxy) shellSummary(st *connState, b []byte) {
	var out, errOut []byte
	var exit *int
	for len(b) >= 5 {
		n := int(binary.LittleEndian.Uint32(b[1:5]))
		if n > len(b)-5 {
			break
		}
		data := b[5 : 5+n]
		switch b[0] {
		case shellStdout:
			out = append(out, data...)
		case shellStderr:
			errOut = append(errOut, data...)
		case shellExit:
			if n == 1 {
				code := int(data[0])
				exit = &code
			}
		}
		b = b[5+n:]
	}
	p.w.write(Entry{Kind: KindShell, Conn: st.id, Request: p.anonString(st.service),
		Stdout: p.anonString(string(out)), Stderr: p.anonString(string(errOut)), Exit: exit})
}

// hostSerial finds the serial in a host-serial:SERIAL:SERVICE request; a
// serial may hold one colon (HOST:PORT).
var hostSerial = regexp.MustCompile(`^host-serial:((?:[^:]+:[0-9]+)|[^:]+):`)

// learnRequest learns a serial from a request before it is recorded.
func (p *proxy) learnRequest(req string) {
	if p.anon == nil {
		return
	}
	if s, ok := transportSerial(req); ok && s != "" && !strings.Contains(req, "transport-id") {
		p.anon.addSerial(s)
	}
	if m := hostSerial.FindStringSubmatch(req); m != nil {
		p.anon.addSerial(m[1])
	}
}

// learnDevices learns serials from a device list (host:devices,
// host:devices-l, host:track-devices: messages of 4 hex digits of length
// and text, one device a line, its serial first) before the bytes are
// recorded. A list split across reads is learned from the part whole in
// one read (docs/doctor.md says so).
func (p *proxy) learnDevices(b []byte) {
	for len(b) >= 4 {
		n, err := strconv.ParseUint(string(b[:4]), 16, 16)
		if err != nil || int(n) > len(b)-4 {
			return
		}
		for _, line := range strings.Split(string(b[4:4+n]), "\n") {
			if f := strings.Fields(line); len(f) >= 2 {
				p.anon.addSerial(f[0])
			}
		}
		b = b[4+n:]
	}
}

func (p *proxy) anonString(s string) string {
	if p.anon == nil {
		return s
	}
	return string(p.anon.replace([]byte(s)))
}

func deviceList(hostSvc string) bool {
	return strings.HasPrefix(hostSvc, "host:devices") || strings.HasPrefix(hostSvc, "host:track-devices")
}
