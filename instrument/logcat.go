package instrument

import (
	"regexp"
	"strconv"
	"strings"
)

// Layout is the logcat -v format a line was printed in.
type Layout int

const (
	Brief Layout = iota + 1
	Time
	ThreadTime
	Long
)

func (l Layout) String() string {
	return [...]string{"", "brief", "time", "threadtime", "long"}[l]
}

// Stamp is a logcat timestamp as the device printed it: local time of the
// device (no zone unless -v zone), or seconds (-v epoch or -v monotonic;
// the text does not say which: the caller knows what it asked for).
type Stamp struct {
	Text    string // as printed, without padding
	Seconds bool   // -v epoch or -v monotonic: Sec counts seconds
	Year    int    // 0 unless -v year
	Month   int
	Day     int
	Hour    int
	Min     int
	Sec     int64
	Nanos   int    // the fraction, in nanoseconds
	Digits  int    // digits of the fraction: 3 (ms), 6 (-v usec) or 9 (-v nsec)
	Zone    string // "+hhmm" with -v zone, else ""
}

// Entry is one logcat entry: one line, or in the long layout a header and
// the message lines after it.
type Entry struct {
	Layout   Layout
	Stamp    Stamp  // zero in brief
	UID      string // with -v uid: a number or a name of up to 5 characters
	PID      int
	TID      int // 0 in brief and time
	Priority byte
	Tag      string
	Message  string
	Line     int // the line it starts on
}

const (
	prio    = `([VDIWEFAS?])`
	zone    = `(?: ([+-]\d{4}))?`
	clockRe = `^(?:(\d{4})-)?(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{9}|\d{6}|\d{3})` + zone
	secsRe  = `^ *(\d+)\.(\d{9}|\d{6}|\d{3})` + zone
)

var (
	clockStamp = regexp.MustCompile(clockRe)
	secsStamp  = regexp.MustCompile(secsRe)
	// P/tag(pid): message, or P/tag(uid: pid): with -v uid.
	briefRe = regexp.MustCompile(`^` + prio + `/(.*?)\( *(?:(\S+?): *)?(\d+)\):(?: (.*))?$`)
	// uid pid tid P tag: message; uid only with -v uid.
	threadRe = regexp.MustCompile(`^ +(?:(\S+) +)?(\d+) +(\d+) ` + prio + ` (.*)$`)
	// [ stamp uid: pid: tid P/tag ]
	longRe = regexp.MustCompile(`^ +(?:(\S+?): *)?(\d+): *(\d+) ` + prio + `/(.*?) *\]$`)
)

// parseStamp reads a timestamp at the start of s and returns the rest.
func parseStamp(s string) (Stamp, string, bool) {
	if m := clockStamp.FindStringSubmatch(s); m != nil {
		st := Stamp{Text: m[0], Year: atoi(m[1]), Month: atoi(m[2]), Day: atoi(m[3]),
			Hour: atoi(m[4]), Min: atoi(m[5]), Sec: int64(atoi(m[6])), Zone: m[8]}
		st.Nanos, st.Digits = fraction(m[7])
		return st, s[len(m[0]):], true
	}
	if m := secsStamp.FindStringSubmatch(s); m != nil {
		sec, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return Stamp{}, s, false
		}
		st := Stamp{Text: strings.TrimLeft(m[0], " "), Seconds: true, Sec: sec, Zone: m[3]}
		st.Nanos, st.Digits = fraction(m[2])
		return st, s[len(m[0]):], true
	}
	return Stamp{}, s, false
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func fraction(f string) (nanos, digits int) {
	n := atoi(f)
	for i := len(f); i < 9; i++ {
		n *= 10
	}
	return n, len(f)
}

// ParseLine reads one logcat line of brief, time or threadtime, or the
// header of a long entry (whose message comes on the next lines and is
// left empty here). It reports false for a line in no layout.
func ParseLine(line string) (Entry, bool) {
	if e, ok := parseBrief(line); ok {
		e.Layout = Brief
		return e, true
	}
	if strings.HasPrefix(line, "[ ") {
		return parseLongHeader(line[2:])
	}
	st, rest, ok := parseStamp(line)
	if !ok || !strings.HasPrefix(rest, " ") {
		return Entry{}, false
	}
	if e, ok := parseBrief(rest[1:]); ok {
		e.Layout, e.Stamp = Time, st
		return e, true
	}
	e, ok := parseThreadTime(rest)
	e.Stamp = st
	return e, ok
}

func parseBrief(s string) (Entry, bool) {
	m := briefRe.FindStringSubmatch(s)
	if m == nil {
		return Entry{}, false
	}
	return Entry{Priority: m[1][0], Tag: strings.TrimRight(m[2], " "), UID: m[3], PID: atoi(m[4]), Message: m[5]}, true
}

func parseThreadTime(s string) (Entry, bool) {
	m := threadRe.FindStringSubmatch(s)
	if m == nil {
		return Entry{}, false
	}
	tag, msg, ok := strings.Cut(m[5], ": ")
	if !ok {
		if tag, ok = strings.CutSuffix(m[5], ":"); !ok {
			return Entry{}, false
		}
	}
	return Entry{Layout: ThreadTime, UID: m[1], PID: atoi(m[2]), TID: atoi(m[3]), Priority: m[4][0],
		Tag: strings.TrimRight(tag, " "), Message: msg}, true
}

func parseLongHeader(s string) (Entry, bool) {
	st, rest, ok := parseStamp(s)
	if !ok {
		return Entry{}, false
	}
	m := longRe.FindStringSubmatch(rest)
	if m == nil {
		return Entry{}, false
	}
	return Entry{Layout: Long, Stamp: st, UID: m[1], PID: atoi(m[2]), TID: atoi(m[3]), Priority: m[4][0], Tag: m[5]}, true
}
