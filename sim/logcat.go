package sim

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// API levels where logcat changes (the device sheet's facts 2 and 4-7).
const (
	apiLogd      = 21 // 5.0: -T, times for -t, the crash buffer, -b all
	apiLogcat6   = 23 // 6.0: threadtime by default, usec, errors exit 1
	apiLogcat7   = 24 // 7.0: long options, --pid, -e, -m, year/zone/epoch/monotonic/uid
	apiLogcat8   = 26 // 8.0: nsec, -v lists, quoted -v errors
	apiLogcat11  = 30 // 11: a divider always, "logcat: Unknown option"
	logcatBatch  = 256
	logcatUsage1 = "Usage: logcat [options] [filterspecs]\n"
)

// logcatUsage is the start of logcat's help (the simulator prints the
// options it knows, not the device's whole text).
const logcatUsage = logcatUsage1 + `options include:
  -s              Set default filter to silent.
  -v <format>     Sets the log print format.
  -c              clear (flush) the entire log and exit
  -d              dump the log and then exit (don't block)
  -t <count>      print only the most recent <count> lines (implies -d)
  -b <buffer>     Request alternate ring buffer.
`

// logcatOpts is a parsed logcat command line.
type logcatOpts struct {
	dump, clear bool
	tail        int       // -t/-T N: the last N entries
	since       time.Time // -t/-T time: entries strictly after it
	bufs        []string
	format      logFormat
	filters     map[string]int // tag: lowest priority shown
	deflt       int
	pid         int
	regex       *regexp.Regexp
	maxCount    int
}

// logcatError is a command line logcat refuses: what it prints on stderr
// depends on the version (sheet 7).
type logcatError struct {
	kind string // "option", "format" or "other"
	word string
}

// text is the error as the device's logcat prints it, and its exit code.
func (e *logcatError) text(api int) (string, int) {
	switch {
	case e.kind == "sim":
		return "sim: logcat: " + e.word + "\n", 1
	case api >= apiLogcat11 && e.kind == "option":
		return fmt.Sprintf("logcat: Unknown option '%s'.\n", e.word), 1
	case api >= apiLogcat11 && e.kind == "format":
		return fmt.Sprintf("logcat: Invalid parameter \"%s\" to -v.\n", e.word), 1
	case api >= apiLogcat11:
		return "logcat: " + e.word + "\n", 1
	case api < apiLogcat6 && e.kind == "option":
		return "Unrecognized Option\n" + logcatUsage, 255
	case api < apiLogcat6 && e.kind == "format":
		return "Invalid parameter to -v\n" + logcatUsage, 255
	case api < apiLogcat6:
		return e.word + "\n" + logcatUsage, 255
	case e.kind == "option":
		return "Unrecognized Option " + strings.TrimPrefix(e.word, "-") + "\n" + logcatUsage, 1
	case e.kind == "format" && api >= apiLogcat8:
		return fmt.Sprintf("Invalid parameter \"%s\" to -v\n", e.word) + logcatUsage, 1
	case e.kind == "format":
		return "Invalid parameter " + e.word + " to -v\n" + logcatUsage, 1
	}
	return e.word + "\n" + logcatUsage, 1
}

// logPriorities ranks priorities for filters; S (silent) shows nothing.
var logPriorities = map[byte]int{'V': 2, '*': 2, 'D': 3, 'I': 4, 'W': 5, 'E': 6, 'F': 7, 'S': 8}

// logBuffers are the buffers of the device's version: the crash buffer
// from 5.0, read by default with main and system (sheet 6).
func logBuffers(api int) (all, deflt []string) {
	if api < apiLogd {
		return []string{"main", "system", "radio", "events"}, []string{"main", "system"}
	}
	return []string{"main", "system", "radio", "events", "crash"}, []string{"main", "system", "crash"}
}

// logcatOption is one option of a command line: its name ("-t",
// "--pid") and its argument.
type logcatOption struct{ name, arg string }

// splitLogcatArgs separates options from filterspecs as bionic's getopt
// does (options anywhere; "-dv brief", "-vbrief"; long options from 7.0).
func splitLogcatArgs(api int, args []string) (opts []logcatOption, specs []string, err *logcatError) {
	withArg := "bvt"
	if api >= apiLogd {
		withArg += "T"
	}
	if api >= apiLogcat7 {
		withArg += "me"
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return opts, append(specs, args[i+1:]...), nil
		case strings.HasPrefix(a, "--") && api >= apiLogcat7:
			name, arg, has := strings.Cut(a[2:], "=")
			if !slices.Contains([]string{"pid", "regex", "max-count", "format", "buffer", "clear"}, name) {
				return nil, nil, &logcatError{"option", "--" + name}
			}
			if name != "clear" && !has {
				if i+1 == len(args) {
					return nil, nil, &logcatError{"option", a}
				}
				i++
				arg = args[i]
			}
			opts = append(opts, logcatOption{"--" + name, arg})
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				c := a[j]
				if strings.IndexByte(withArg, c) < 0 {
					opts = append(opts, logcatOption{"-" + string(c), ""})
					continue
				}
				arg := a[j+1:]
				if arg == "" {
					if i+1 == len(args) {
						return nil, nil, &logcatError{"option", "-" + string(c)}
					}
					i++
					arg = args[i]
				}
				opts = append(opts, logcatOption{"-" + string(c), arg})
				break
			}
		default:
			specs = append(specs, a)
		}
	}
	return opts, specs, nil
}

// parseLogcat reads a logcat command line as the device's version does.
func (d *Device) parseLogcat(args []string, tags string) (*logcatOpts, *logcatError) {
	api := d.cfg.API
	opts, specs, lerr := splitLogcatArgs(api, args)
	if lerr != nil {
		return nil, lerr
	}
	if len(specs) == 0 {
		specs = strings.Fields(tags)
	}
	o := &logcatOpts{filters: map[string]int{}, deflt: logPriorities['V']}
	o.format = logFormat{layout: "brief", loc: d.timeZone()}
	if api >= apiLogcat6 {
		o.format.layout = "threadtime" // sheet 2
	}
	for _, op := range opts {
		if err := d.logcatOption(o, op); err != nil {
			return nil, err
		}
	}
	if len(o.bufs) == 0 {
		_, o.bufs = logBuffers(api)
	}
	for _, s := range specs {
		if err := o.filterSpec(s); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// logcatOption applies one option to o.
func (d *Device) logcatOption(o *logcatOpts, op logcatOption) *logcatError {
	api := d.cfg.API
	if (op.name == "-T" && api < apiLogd) || ((op.name == "-m" || op.name == "-e") && api < apiLogcat7) {
		return &logcatError{"option", op.name}
	}
	switch op.name {
	case "-d":
		o.dump = true
	case "-c", "--clear":
		o.clear = true
	case "-s":
		o.deflt = logPriorities['S']
	case "-v", "--format":
		return o.setFormat(api, op.arg)
	case "-b", "--buffer":
		names := []string{op.arg}
		if api >= apiLogcat7 { // a list from 7.0 (not on the sheet)
			names = strings.Split(op.arg, ",")
		}
		for _, n := range names {
			if err := o.addBuffer(api, n); err != nil {
				return err
			}
		}
	case "-t", "-T":
		o.dump = o.dump || op.name == "-t"
		return d.tailArg(o, op)
	case "--pid":
		n, err := strconv.Atoi(op.arg)
		if err != nil || n <= 0 {
			return &logcatError{"other", fmt.Sprintf("--pid %q is not a process id", op.arg)}
		}
		o.pid = n
	case "-m", "--max-count":
		n, err := strconv.Atoi(op.arg)
		if err != nil || n <= 0 {
			return &logcatError{"other", fmt.Sprintf("-m %q is not a count", op.arg)}
		}
		o.maxCount = n
	case "-e", "--regex":
		re, err := regexp.Compile(op.arg)
		if err != nil {
			return &logcatError{"other", fmt.Sprintf("-e %q is not a regular expression", op.arg)}
		}
		o.regex = re
	case "-g", "-G", "-S", "-f", "-r", "-n", "-B", "-p", "-P", "-L", "-D", "-Q":
		return &logcatError{"sim", "option " + op.name + " is not simulated"}
	default:
		return &logcatError{"option", op.name}
	}
	return nil
}

// timeZone is the device's zone for local times (persist.sys.timezone;
// UTC when unset or unknown here).
func (d *Device) timeZone() *time.Location {
	if loc, err := time.LoadLocation(d.Props()["persist.sys.timezone"]); err == nil {
		return loc
	}
	return time.UTC
}

// setFormat reads one -v argument: one word up to 7.x, a comma list from
// 8.0 (sheet 4).
func (o *logcatOpts) setFormat(api int, arg string) *logcatError {
	words := []string{arg}
	if api >= apiLogcat8 {
		words = strings.Split(arg, ",")
	}
	for _, w := range words {
		if err := o.formatWord(api, strings.TrimSpace(w)); err != nil {
			return err
		}
	}
	return nil
}

func (o *logcatOpts) formatWord(api int, w string) *logcatError {
	f := &o.format
	flags := map[string]*bool{}
	if api >= apiLogcat6 {
		flags["usec"] = &f.usec
	}
	if api >= apiLogcat7 {
		flags["year"], flags["epoch"], flags["monotonic"], flags["uid"] = &f.year, &f.epoch, &f.mono, &f.uid
	}
	if api >= apiLogcat8 {
		flags["nsec"] = &f.nsec
	}
	switch {
	case slices.Contains(logLayouts, w):
		f.layout = w
	case flags[w] != nil:
		*flags[w] = true
	case api >= apiLogcat7 && w == "zone":
		f.zone = !f.zone // a toggle, as a zone name is
	case slices.Contains([]string{"color", "printable"}, w) && api >= apiLogcat6,
		slices.Contains([]string{"colour", "descriptive"}, w) && api >= apiLogcat8:
		return &logcatError{"sim", "-v " + w + " is not simulated"}
	case api >= apiLogcat7 && w != "" && w != "Local":
		loc, err := time.LoadLocation(w)
		if err != nil {
			return &logcatError{"format", w}
		}
		f.loc, f.zone = loc, !f.zone
	default:
		return &logcatError{"format", w}
	}
	return nil
}

// addBuffer adds a -b buffer ("all": every buffer of the version).
func (o *logcatOpts) addBuffer(api int, name string) *logcatError {
	all, _ := logBuffers(api)
	switch {
	case name == "all" && api >= apiLogd:
		o.bufs = all
	case slices.Contains(all, name):
		if !slices.Contains(o.bufs, name) {
			o.bufs = append(o.bufs, name)
		}
	default:
		return &logcatError{"other", fmt.Sprintf("Unknown buffer '%s'", name)}
	}
	return nil
}

// filterSpec reads TAG[:P] (P one of V D I W E F S, any case; * for V);
// TAG "*" sets the default.
func (o *logcatOpts) filterSpec(s string) *logcatError {
	tag, p, has := strings.Cut(s, ":")
	level := logPriorities['V']
	if has {
		l, ok := 0, false
		if len(p) == 1 {
			l, ok = logPriorities[strings.ToUpper(p)[0]]
		}
		if !ok {
			return &logcatError{"other", "Invalid filter expression"}
		}
		level = l
	}
	if tag == "*" {
		o.deflt = level
	} else {
		o.filters[tag] = level
	}
	return nil
}

// tailArg reads -t/-T: a count, or from 5.0 a time (sheet 5).
func (d *Device) tailArg(o *logcatOpts, op logcatOption) *logcatError {
	api, s := d.cfg.API, op.arg
	if api < apiLogd { // atoi: the leading digits, or 0
		digits := s[:len(s)-len(strings.TrimLeft(s, "0123456789"))]
		o.tail, _ = strconv.Atoi(digits)
		return nil
	}
	if strings.Trim(s, "0123456789") == "" {
		o.tail, _ = strconv.Atoi(s)
		return nil
	}
	loc := o.format.loc
	if t, ok := parseLogcatTime(api, s, loc, time.Now().In(loc).Year()); ok {
		o.since = t
		return nil
	}
	return &logcatError{"other", fmt.Sprintf("%s \"%s\" not in time format", op.name, s)}
}

var (
	logcatMonthTime = regexp.MustCompile(`^(?:(\d{4})-)?(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,9})$`)
	logcatSecsTime  = regexp.MustCompile(`^(\d+)\.(\d{1,9})$`)
)

// parseLogcatTime reads MM-DD hh:mm:ss.mmm (5.0+), YYYY-MM-DD
// hh:mm:ss.mmm and sss.mmm (7.0+) in loc; the fraction is required.
func parseLogcatTime(api int, s string, loc *time.Location, year int) (time.Time, bool) {
	frac := func(f string) int {
		n, _ := strconv.Atoi(f + strings.Repeat("0", 9-len(f)))
		return n
	}
	if m := logcatMonthTime.FindStringSubmatch(s); m != nil && (m[1] == "" || api >= apiLogcat7) {
		if m[1] != "" {
			year = atoiSim(m[1])
		}
		return time.Date(year, time.Month(atoiSim(m[2])), atoiSim(m[3]), atoiSim(m[4]), atoiSim(m[5]), atoiSim(m[6]), frac(m[7]), loc), true
	}
	if m := logcatSecsTime.FindStringSubmatch(s); m != nil && api >= apiLogcat7 {
		sec, err := strconv.ParseInt(m[1], 10, 64)
		return time.Unix(sec, int64(frac(m[2]))), err == nil
	}
	return time.Time{}, false
}

func atoiSim(s string) int { n, _ := strconv.Atoi(s); return n }
