package sim

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// logFormat is how logcat prints entries: a layout (-v brief, time, ...)
// and its modifiers, in the device's time zone (sheet facts 3 and 4).
type logFormat struct {
	layout                                   string
	usec, nsec, year, zone, epoch, mono, uid bool
	loc                                      *time.Location
}

// logLayouts are the eight layouts of every version (sheet 4).
var logLayouts = []string{"brief", "process", "tag", "thread", "raw", "time", "threadtime", "long"}

// stamp is an entry's time as printed: local time of the device (month
// first, the year with -v year), or seconds of the realtime clock (-v
// epoch, right-aligned in 19) or of CLOCK_MONOTONIC (-v monotonic, in 6);
// a fraction of 3, 6 (-v usec) or 9 (-v nsec) digits, truncated; and the
// zone with -v zone, for local time only.
func (f *logFormat) stamp(e *LogEntry) string {
	var b strings.Builder
	nanos := e.Time.Nanosecond()
	var t time.Time
	switch {
	case f.epoch:
		fmt.Fprintf(&b, "%19d", e.Time.Unix())
	case f.mono:
		fmt.Fprintf(&b, "%6d", int64(e.Mono/time.Second))
		nanos = int(e.Mono % time.Second)
	default:
		t = e.Time.In(f.loc)
		if f.year {
			fmt.Fprintf(&b, "%04d-", t.Year())
		}
		fmt.Fprintf(&b, "%02d-%02d %02d:%02d:%02d", t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second())
	}
	switch {
	case f.nsec:
		fmt.Fprintf(&b, ".%09d", nanos)
	case f.usec:
		fmt.Fprintf(&b, ".%06d", nanos/1e3)
	default:
		fmt.Fprintf(&b, ".%03d", nanos/1e6)
	}
	if f.zone && !t.IsZero() {
		b.WriteString(t.Format(" -0700"))
	}
	return b.String()
}

// uidNames are the ids whose name fits logcat's 5 columns.
var uidNames = map[int]string{0: "root", 1001: "radio", 1007: "log", 1013: "media", 1021: "gps", 2000: "shell"}

// uidField is the uid column of -v uid (sheet 4): its name if it fits 5
// characters, else the number, right-aligned in 5, then sep.
func (f *logFormat) uidField(uid int, sep byte) string {
	if !f.uid {
		return ""
	}
	s, ok := uidNames[uid]
	if !ok {
		s = strconv.Itoa(uid)
	}
	return fmt.Sprintf("%5s%c", s, sep)
}

func logPriority(p byte) byte {
	if strings.IndexByte("VDIWEFS", p) >= 0 {
		return p
	}
	return '?'
}

// write appends e as logcat prints it (sheet 3): the layout's header
// before each line of the message (a trailing "\n" adds no line), or in
// long one header, the message and a blank line.
func (f *logFormat) write(b *bytes.Buffer, e *LogEntry) {
	p := logPriority(e.Priority)
	msg := strings.TrimSuffix(e.Msg, "\n")
	var prefix, suffix string
	switch f.layout {
	case "long":
		fmt.Fprintf(b, "[ %s %s%5d:%5d %c/%-8s ]\n%s\n\n", f.stamp(e), f.uidField(e.UID, ':'), e.PID, e.TID, p, e.Tag, msg)
		return
	case "brief":
		prefix = fmt.Sprintf("%c/%-8s(%s%5d): ", p, e.Tag, f.uidField(e.UID, ':'), e.PID)
	case "time":
		prefix = fmt.Sprintf("%s %c/%-8s(%s%5d): ", f.stamp(e), p, e.Tag, f.uidField(e.UID, ':'), e.PID)
	case "threadtime":
		prefix = fmt.Sprintf("%s %s%5d %5d %c %-8s: ", f.stamp(e), f.uidField(e.UID, ' '), e.PID, e.TID, p, e.Tag)
	case "process":
		prefix = fmt.Sprintf("%c(%s%5d) ", p, f.uidField(e.UID, ':'), e.PID)
		suffix = "  (" + e.Tag + ")"
	case "thread":
		prefix = fmt.Sprintf("%c(%s%5d:%5d) ", p, f.uidField(e.UID, ':'), e.PID, e.TID)
	case "tag":
		prefix = fmt.Sprintf("%c/%-8s: ", p, e.Tag)
	}
	for _, line := range strings.Split(msg, "\n") {
		b.WriteString(prefix)
		b.WriteString(line)
		b.WriteString(suffix)
		b.WriteByte('\n')
	}
}
