package sim

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"net"
	"strings"
	"sync"
)

// logcat runs the logcat command with args (tags: ANDROID_LOG_TAGS, the
// filterspecs when the line has none): its output to out, its errors
// to errOut, and returns its exit code. gone is closed when the client
// leaves; without it (logcat inside a longer line, whose output is
// collected) the command can only dump.
func (d *Device) logcat(args []string, tags string, out, errOut io.Writer, gone <-chan struct{}) int {
	o, lerr := d.parseLogcat(args, tags)
	if lerr != nil {
		text, code := lerr.text(d.cfg.API)
		io.WriteString(errOut, text)
		return code
	}
	if o.clear {
		d.logs.clear(o.bufs)
		return 0
	}
	if !o.dump && gone == nil {
		io.WriteString(errOut, "sim: logcat: following needs logcat alone on its command line (or -d)\n")
		return 1
	}
	p := &logPrinter{o: o, api: d.cfg.API, w: out, printed: map[string]bool{}}
	cur := d.logcatStart(o)
	if o.dump {
		es, _, _ := d.logs.read(cur, o.bufs, math.MaxInt)
		p.print(es)
		return 0
	}
	defer d.logs.follow()()
	for {
		es, _, wake := d.logs.read(cur, o.bufs, logcatBatch)
		done, err := p.print(es)
		if done {
			return 0
		}
		if err != nil {
			return 1 // the client is gone
		}
		if len(es) == logcatBatch {
			continue
		}
		select {
		case <-wake:
		case <-gone:
			return 0
		}
	}
}

// logcatStart places a reader: at the oldest entry held, after -t/-T's
// time, or at the last N entries of the selected buffers counted before
// tag and regex filters but after --pid, which logd applies (sheet 5).
func (d *Device) logcatStart(o *logcatOpts) logCursor {
	es, idx, cur := d.logs.snapshot(o.bufs)
	start := 0
	switch {
	case !o.since.IsZero():
		start = len(es)
		for i := range es {
			if es[i].Time.After(o.since) {
				start = i
				break
			}
		}
	case o.tail > 0:
		start = len(es)
		for n := 0; start > 0 && n < o.tail; {
			start--
			if o.pid == 0 || es[start].PID == o.pid {
				n++
			}
		}
	}
	seen := map[string]bool{}
	for i := start; i < len(es); i++ {
		if b := es[i].Buffer; !seen[b] {
			seen[b] = true
			cur[b] = idx[i]
		}
	}
	return cur
}

// logPrinter prints entries for one logcat command.
type logPrinter struct {
	o       *logcatOpts
	api     int
	w       io.Writer
	printed map[string]bool // buffers whose divider was printed
	count   int
}

// shows says whether e passes the tag filters and -e.
func (o *logcatOpts) shows(e *LogEntry) bool {
	level := o.deflt
	if l, ok := o.filters[e.Tag]; ok {
		level = l
	}
	return logPriorities[e.Priority] >= level && (o.regex == nil || o.regex.MatchString(e.Msg))
}

// print writes es in one write: a divider before a buffer's first entry
// (sheet 6: "/dev/log/NAME" on 4.4; only when several buffers are read
// before 11; before the tag filters), then the entries shown. done: -m's
// count is reached.
func (p *logPrinter) print(es []LogEntry) (done bool, err error) {
	var b bytes.Buffer
	for i := range es {
		e := &es[i]
		if p.o.pid != 0 && e.PID != p.o.pid {
			continue
		}
		if !p.printed[e.Buffer] {
			p.printed[e.Buffer] = true
			if p.api >= apiLogcat11 || len(p.o.bufs) > 1 {
				name := e.Buffer
				if p.api < apiLogd {
					name = "/dev/log/" + name
				}
				b.WriteString("--------- beginning of " + name + "\n")
			}
		}
		if !p.o.shows(e) {
			continue
		}
		p.o.format.write(&b, e)
		p.count++
		if p.o.maxCount > 0 && p.count >= p.o.maxCount {
			done = true
			break
		}
	}
	if b.Len() > 0 {
		_, err = p.w.Write(b.Bytes())
	}
	return done, err
}

// streamMode is how a streamed command's output reaches its client.
type streamMode int

const (
	streamPTY  streamMode = iota // shell: before 7.0: "\r\n", stderr mixed in
	streamRaw                    // shell: from 7.0: stderr mixed in
	streamExec                   // exec: stdout only
	streamV2                     // shell protocol v2 frames, then the exit code
)

// legacyShellMode is how shell: (no protocol v2) streams on the device.
func (d *Device) legacyShellMode() streamMode {
	if d.cfg.API < apiShellV2 {
		return streamPTY
	}
	return streamRaw
}

// logcatLine reads a line that is one logcat command, after any exports
// and an exec, as `adb logcat` sends ("export ANDROID_LOG_TAGS=...; exec
// logcat ..."): the command's words and ANDROID_LOG_TAGS. Each command is
// logged. ok is false for any other line.
func (d *Device) logcatLine(line string) (argv []string, tags string, ok bool) {
	cmds, err := splitShell(line)
	if err != nil || len(cmds) == 0 {
		return nil, "", false
	}
	last := cmds[len(cmds)-1].argv
	if last[0] == "exec" {
		last = last[1:]
	}
	if len(last) == 0 || last[0] != "logcat" {
		return nil, "", false
	}
	for _, c := range cmds[:len(cmds)-1] {
		if c.argv[0] != "export" || c.pipe {
			return nil, "", false
		}
		for _, a := range c.argv[1:] {
			if v, ok := strings.CutPrefix(a, "ANDROID_LOG_TAGS="); ok {
				tags = v
			}
		}
	}
	for _, c := range cmds {
		d.logShellCommand(c.argv)
	}
	return last, tags, true
}

// streamShell runs line as it goes, writing output to c as it comes,
// when line is one logcat command alone (a command that may follow the
// log until the client leaves); false: the caller runs line as usual.
func (d *Device) streamShell(c net.Conn, line string, mode streamMode) bool {
	run := d.streamedRun(line)
	if run == nil {
		return false
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		io.Copy(io.Discard, c) // input is not read; its end ends the command
	}()
	var out, errOut io.Writer = c, c
	switch mode {
	case streamPTY:
		out = crlfWriter{c}
		errOut = out
	case streamExec:
		errOut = io.Discard
	case streamV2:
		out, errOut = v2Writer{c, 1}, v2Writer{c, 2}
	}
	var mu sync.Mutex // am instrument may write both streams
	out, errOut = &syncWriter{mu: &mu, w: out}, &syncWriter{mu: &mu, w: errOut}
	code := run(out, errOut, gone)
	if mode == streamV2 {
		c.Write([]byte{3, 1, 0, 0, 0, byte(code)})
	}
	c.Close()
	<-gone
	return true
}

// streamedRun returns how to run a line that prints as it runs (a
// logcat, or an am instrument, alone on its line), or nil: other lines go
// through runShellIO, whose output comes whole at the end.
func (d *Device) streamedRun(line string) func(out, errOut io.Writer, gone <-chan struct{}) int {
	if argv, env, ok := d.logcatLine(line); ok {
		return func(out, errOut io.Writer, gone <-chan struct{}) int {
			return d.logcat(argv[1:], env, out, errOut, gone)
		}
	}
	if run := d.streamedCommand(line); run != nil { // instrument.go
		return func(out, errOut io.Writer, _ <-chan struct{}) int { return run(out, errOut) }
	}
	return nil
}

// syncWriter serialises the writes of two streams sharing one connection.
type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// crlfWriter turns each "\n" into "\r\n", as the PTY of adbd before 7.0
// does (sheet 1).
type crlfWriter struct{ w io.Writer }

func (c crlfWriter) Write(b []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(b), nil
}

// v2Writer writes each write as one shell protocol v2 frame of its id.
type v2Writer struct {
	w  io.Writer
	id byte
}

func (v v2Writer) Write(b []byte) (int, error) {
	f := make([]byte, 5, 5+len(b))
	f[0] = v.id
	binary.LittleEndian.PutUint32(f[1:], uint32(len(b)))
	if _, err := v.w.Write(append(f, b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}
