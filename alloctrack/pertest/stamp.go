package pertest

import (
	"fmt"
	"strconv"
	"time"

	"github.com/alloctrack/alloctrack/instrument"
)

// StampTime turns a logcat stamp into a time. A stamp in seconds (-v epoch
// or -v monotonic) is that many seconds after the Unix epoch: for
// monotonic stamps (seconds since boot) compare the times only with each
// other and with dumps in the same clock. A calendar stamp is read in loc
// (the device's zone, persist.sys.timezone; time.UTC when unknown), in
// its own year (-v year) or else in year, and in its own zone when it
// prints one (-v zone). A stamp that names no valid date is an error.
func StampTime(s instrument.Stamp, year int, loc *time.Location) (time.Time, error) {
	if s.Seconds {
		return time.Unix(s.Sec, int64(s.Nanos)), nil
	}
	if loc == nil {
		loc = time.UTC
	}
	if s.Zone != "" {
		z, err := zoneOf(s.Zone)
		if err != nil {
			return time.Time{}, fmt.Errorf("pertest: logcat stamp %q: %w", s.Text, err)
		}
		loc = z
	}
	if s.Year != 0 {
		year = s.Year
	}
	t := time.Date(year, time.Month(s.Month), s.Day, s.Hour, s.Min, int(s.Sec), s.Nanos, loc)
	if s.Month < 1 || s.Month > 12 || s.Day < 1 || t.Day() != s.Day || s.Hour > 23 || s.Min > 59 || s.Sec > 60 {
		return time.Time{}, fmt.Errorf("pertest: logcat stamp %q is not a date in %d", s.Text, year)
	}
	return t, nil
}

// StampNear is StampTime in ref's location, in the year (ref's, the one
// before or the one after) that puts the stamp nearest ref: a run across
// New Year, read with a stamp that has no year, keeps its order.
func StampNear(s instrument.Stamp, ref time.Time) (time.Time, error) {
	if s.Seconds || s.Year != 0 {
		return StampTime(s, ref.Year(), ref.Location())
	}
	var best time.Time
	var err error
	for _, y := range []int{ref.Year() - 1, ref.Year(), ref.Year() + 1} {
		t, e := StampTime(s, y, ref.Location())
		if e != nil {
			err = e // 29 February exists in one year of three at most
			continue
		}
		if best.IsZero() || absDur(t.Sub(ref)) < absDur(best.Sub(ref)) {
			best = t
		}
	}
	if best.IsZero() {
		return time.Time{}, err
	}
	return best, nil
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// zoneOf reads a "+hhmm" zone.
func zoneOf(z string) (*time.Location, error) {
	if len(z) != 5 || (z[0] != '+' && z[0] != '-') {
		return nil, fmt.Errorf("zone %q is not +hhmm", z)
	}
	h, err1 := strconv.Atoi(z[1:3])
	m, err2 := strconv.Atoi(z[3:5])
	if err1 != nil || err2 != nil || m > 59 {
		return nil, fmt.Errorf("zone %q is not +hhmm", z)
	}
	off := (h*60 + m) * 60
	if z[0] == '-' {
		off = -off
	}
	return time.FixedZone(z, off), nil
}
