package sim

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// API levels where a device's shell changes, as AOSP records its shell
// utilities per release.
const (
	// apiPidof: Android 6.0 moved most tools to toybox, pidof among them;
	// Android 4.4 and 5.x have none.
	apiPidof = 23
	// apiShellV2: Android 7.0's adbd runs shell: commands without a pty
	// (and speaks shell protocol v2); before, output lines end in "\r\n".
	apiShellV2 = 24
	// apiToyboxPS: Android 8.0 replaced toolbox ps with toybox ps, which
	// lists only the caller's own processes unless given -A (or -e).
	// Toolbox ps lists every process and takes any other word, -A too, as a
	// prefix of the names to show.
	apiToyboxPS = 26
)

// lastStatus marks where $? stood in a word, until the status is known.
const lastStatus = "\x00$?\x00"

// errShellSyntax is a command line the simulated shell cannot parse.
var errShellSyntax = errors.New("syntax error")

// parseShell splits a command line into the words of its commands (see
// splitShell).
func parseShell(line string) ([][]string, error) {
	cmds, err := splitShell(line)
	var argvs [][]string
	for _, c := range cmds {
		argvs = append(argvs, c.argv)
	}
	return argvs, err
}

// shellCmd is one command of a line: its words, and whether its output
// goes to the next command's input ('|').
type shellCmd struct {
	argv []string
	pipe bool
}

// splitShell splits a command line as sh does, as far as the simulator
// needs: commands are separated by an unquoted ';', '&', '|', '&&', '||'
// or newline (and run one after the other: enough to show that a word
// meant as an argument ran as a command), and a single '|' sends a
// command's output to the next one's input; words are split at unquoted
// blanks; '…' keeps everything literally, "…" everything but a
// backslash before \ " $ or `, and a backslash outside quotes escapes the
// next character. $? (outside '…') stands for the exit status of the
// command before; runShellIO puts it in (lastStatus marks the place).
func splitShell(line string) ([]shellCmd, error) {
	var cmds []shellCmd
	var words []string
	var w strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	endCmd := func(pipe bool) {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, shellCmd{words, pipe})
			words = nil
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch c {
		case ' ', '\t':
			endWord()
		case '|':
			pipe := i+1 >= len(line) || line[i+1] != '|'
			if !pipe {
				i++ // ||
			}
			endCmd(pipe)
		case ';', '&', '\n':
			endCmd(false)
		case '\\':
			if i+1 < len(line) {
				i++
				if line[i] != '\n' {
					w.WriteByte(line[i])
					inWord = true
				}
			}
		case '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("%w: unterminated '", errShellSyntax)
			}
			w.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(line) {
					return nil, fmt.Errorf("%w: unterminated \"", errShellSyntax)
				}
				if line[i] == '"' {
					break
				}
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\\\"$`", line[i+1]) >= 0 {
					i++
				} else if strings.HasPrefix(line[i:], "$?") {
					w.WriteString(lastStatus)
					i++
					continue
				}
				w.WriteByte(line[i])
			}
		case '$':
			if strings.HasPrefix(line[i:], "$?") {
				w.WriteString(lastStatus)
				inWord = true
				i++
				continue
			}
			w.WriteByte(c)
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	endCmd(false)
	return cmds, nil
}

// AddProcess adds a process that is not a debuggable VM (a service, an
// app built for release): ps and pidof show it, track-jdwp does not.
func (d *Device) AddProcess(pid int, name string) {
	d.mu.Lock()
	d.procs[pid] = name
	d.mu.Unlock()
}

// ShellLog returns the commands the device's shell ran, oldest first (up
// to 256), each as its words after the shell's parsing.
func (d *Device) ShellLog() [][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([][]string, len(d.shellLog))
	for i, c := range d.shellLog {
		out[i] = slices.Clone(c)
	}
	return out
}

// Reboots counts the reboot commands the shell ran (it only counts them).
func (d *Device) Reboots() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reboots
}

// psEntry is one process as ps shows it.
type psEntry struct {
	pid, ppid int
	user      string
	name      string
	args      []string // argv; nil: just the name
}

// processes lists the device's processes: a few of the system's, the
// added ones, and the VMs, by pid.
func (d *Device) processes() []psEntry {
	out := []psEntry{
		{1, 0, "root", "init", nil},
		{2, 0, "root", "kthreadd", nil},
		{310, 1, "root", "zygote", nil},
		{620, 310, "system", "system_server", nil},
		{930, 310, "u0_a15", "com.android.systemui", nil},
	}
	d.mu.Lock()
	for pid, name := range d.procs {
		out = append(out, psEntry{pid, 310, "u0_a90", name, nil})
	}
	for pid, p := range d.perfettos {
		out = append(out, psEntry{pid, 1, "shell", "perfetto", p.args})
	}
	d.mu.Unlock()
	for _, vm := range d.VMs() {
		user := fmt.Sprintf("u0_a%d", vm.PID()%100)
		if uid := vm.Config().UserID; uid >= 10000 {
			user = fmt.Sprintf("u%d_a%d", uid/100000, uid%100000-10000)
		}
		// argv[0] is set when the app is named, as APNM is sent.
		out = append(out, psEntry{vm.PID(), 310, user, vm.AppName(), nil})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// runShell runs a command line with the few commands the simulator knows,
// as the device's API level has them. Every command run is logged.
// Unknown ones print mksh's error and exit 127.
// Standard output and error come in one stream, each command's in the
// order the commands ran (as on the pty of adbd's shell: service).
func (d *Device) runShell(line string) (out []byte, code int) {
	var merged []byte
	_, _, code = d.runShellSeq(line, nil, &merged)
	return merged, code
}

// runShellIO runs a command line as runShell does, with standard input
// (read only by the commands that need it) and errors apart.
func (d *Device) runShellIO(line string, in *shellInput) (out, errOut []byte, code int) {
	return d.runShellSeq(line, in, nil)
}

// runShellSeq is runShellIO that also appends, if merged is not nil, each
// command's output and then its errors to merged as the commands run.
func (d *Device) runShellSeq(line string, in *shellInput, merged *[]byte) (out, errOut []byte, code int) {
	cmds, err := splitShell(line)
	if err != nil {
		e := []byte(fmt.Sprintf("/system/bin/sh: %v\n", err))
		if merged != nil {
			*merged = append(*merged, e...)
		}
		return nil, e, 1
	}
	var piped *shellInput // the output of the command before, through '|'
	for _, c := range cmds {
		for i, a := range c.argv {
			c.argv[i] = strings.ReplaceAll(a, lastStatus, strconv.Itoa(code))
		}
		d.logShellCommand(c.argv)
		cin := in
		if piped != nil {
			cin = piped
		}
		o, e, status := d.runCommandIO(c.argv, cin)
		code = status
		errOut = append(errOut, e...)
		piped = nil
		if c.pipe {
			piped = &shellInput{done: true, data: o}
			o = nil
		}
		out = append(out, o...)
		if merged != nil {
			*merged = append(append(*merged, o...), e...)
		}
	}
	return out, errOut, code
}

// logShellCommand adds argv to the shell's log (ShellLog).
func (d *Device) logShellCommand(argv []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.shellLog) == maxTrace {
		d.shellLog = slices.Delete(d.shellLog, 0, 1)
	}
	d.shellLog = append(d.shellLog, argv)
}

func (d *Device) runCommandIO(f []string, in *shellInput) (out, errOut []byte, code int) {
	switch f[0] {
	case "perfetto":
		return d.perfettoCommand(f, in)
	case "kill":
		if d.cfg.API >= apiPidof {
			return d.killCommand(f[1:])
		}
	case "run-as":
		return d.runAs(f, in)
	case "ls": // toolbox's before Android 6.0, toybox's after
		return d.fileCommand(f)
	case "tail", "cat":
		if d.cfg.API >= apiPerfetto {
			return d.fileCommand(f)
		}
	case "head":
		if d.cfg.API >= apiPerfetto {
			return headCommand(f, in)
		}
	case "sh":
		if len(f) == 3 && f[1] == "-c" { // mksh runs its argument as a line
			return d.runShellIO(f[2], in)
		}
	case "rm":
		return d.fileCommand(f)
	case "am":
		if len(f) > 1 && f[1] == "instrument" { // instrument.go
			var o, e bytes.Buffer
			code := d.amInstrument(f, &o, &e)
			return o.Bytes(), e.Bytes(), code
		}
		if len(f) == 3 && f[1] == "force-stop" {
			d.forceStop(f[2]) // testproc.go
			return nil, nil, 0
		}
		return d.amCommand(f)
	case "pm":
		return d.pmCommand(f) // suite.go
	case "dumpsys":
		return d.dumpsysCommand(f)
	case "logcat": // alone on its line it streams (logcatrun.go)
		var o, e bytes.Buffer
		code := d.logcat(f[1:], "", &o, &e, nil)
		return o.Bytes(), e.Bytes(), code
	}
	o, code := d.runCommand(f)
	if code == 127 || (f[0] == "ps" && code != 0) {
		return nil, o, code // the shell's and ps's complaints go to stderr
	}
	return o, nil, code
}

func (d *Device) runCommand(f []string) (out []byte, code int) {
	api := d.cfg.API
	switch f[0] {
	case "echo":
		return []byte(strings.Join(f[1:], " ") + "\n"), 0
	case "getprop":
		time.Sleep(d.getpropStall()) // the simulated slow link
		props := d.Props()
		if len(f) > 1 {
			return []byte(props[f[1]] + "\n"), 0
		}
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "[%s]: [%s]\n", k, props[k])
		}
		return []byte(b.String()), 0
	case "reboot":
		d.mu.Lock()
		d.reboots++
		d.mu.Unlock()
		return nil, 0
	case "getenforce":
		// SELinux enforces on every release the simulator models
		// (docs/doctor.md).
		return []byte("Enforcing\n"), 0
	case "pidof":
		if api < apiPidof {
			break
		}
		var pids []string
		for _, p := range d.processes() {
			if slices.Contains(f[1:], p.name) {
				pids = append(pids, strconv.Itoa(p.pid))
			}
		}
		if len(pids) == 0 {
			return nil, 1
		}
		return []byte(strings.Join(pids, " ") + "\n"), 0
	case "ps":
		if api < apiToyboxPS {
			return d.toolboxPS(f[1:])
		}
		return d.toyboxPS(f[1:])
	}
	if api < apiPidof {
		return []byte(fmt.Sprintf("/system/bin/sh: %s: not found\n", f[0])), 127
	}
	return []byte(fmt.Sprintf("/system/bin/sh: %s: inaccessible or not found\n", f[0])), 127
}

// toolboxPS is ps of Android 4.4 to 7.1: every process; a number selects
// one pid, any other word that is not an option is a name prefix (so
// "ps -A" shows only the header).
func (d *Device) toolboxPS(args []string) ([]byte, int) {
	pidFilter, nameFilter := 0, ""
	for _, a := range args {
		switch {
		case slices.Contains([]string{"-t", "-x", "-P", "-p", "-c", "-n", "-Z", "--abi"}, a):
			// Options that add columns or threads: not simulated.
		case a != "" && a[0] >= '0' && a[0] <= '9':
			pidFilter, _ = strconv.Atoi(a)
		default:
			nameFilter = a
		}
	}
	var b strings.Builder
	b.WriteString("USER     PID   PPID  VSIZE  RSS     WCHAN    PC         NAME\n")
	for _, p := range d.processes() {
		if (pidFilter != 0 && p.pid != pidFilter) || !strings.HasPrefix(p.name, nameFilter) {
			continue
		}
		fmt.Fprintf(&b, "%-9s %-5d %-5d %-6d %-5d %08x %08x %s %s\n", p.user, p.pid, p.ppid, 498120, 27512, 0xffffffff, 0x4006ba10, "S", p.name)
	}
	return []byte(b.String()), 0
}

// toyboxPS is ps of Android 8 and later: without -A (or -e) only the
// shell's own processes.
func (d *Device) toyboxPS(args []string) ([]byte, int) {
	all := false
	var cols []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-A", "-e":
			all = true
		case "-o":
			if i+1 == len(args) {
				return []byte("ps: Missing argument to -o (see \"ps --help\")\n"), 1
			}
			i++
			for _, c := range strings.Split(args[i], ",") {
				c = strings.ToUpper(c)
				if !slices.Contains([]string{"PID", "PPID", "USER", "NAME", "ARGS", "CMDLINE"}, c) {
					return []byte(fmt.Sprintf("ps: bad -o %s\n", strings.ToLower(c))), 1
				}
				cols = append(cols, c)
			}
		default:
			return []byte(fmt.Sprintf("ps: Unknown option '%s' (see \"ps --help\")\n", strings.TrimLeft(a, "-"))), 1
		}
	}
	procs := d.processes()
	if !all {
		sh := procs[len(procs)-1].pid + 1
		procs = []psEntry{{sh, 1, "shell", "sh", nil}, {sh + 1, sh, "shell", "ps", nil}}
	}
	if len(cols) > 0 {
		var b strings.Builder
		for i, c := range cols {
			if i > 0 {
				b.WriteByte(' ')
			}
			if c == "PID" || c == "PPID" {
				fmt.Fprintf(&b, "%5s", c)
			} else {
				fmt.Fprintf(&b, "%-10s", c)
			}
		}
		b.WriteString("\n")
		for _, p := range procs {
			for i, c := range cols {
				if i > 0 {
					b.WriteByte(' ')
				}
				switch c {
				case "PID":
					fmt.Fprintf(&b, "%5d", p.pid)
				case "PPID":
					fmt.Fprintf(&b, "%5d", p.ppid)
				case "USER":
					fmt.Fprintf(&b, "%-10s", p.user)
				case "NAME":
					fmt.Fprintf(&b, "%-10s", p.name)
				default:
					args := p.args
					if len(args) == 0 {
						args = []string{p.name}
					}
					b.WriteString(strings.Join(args, " "))
				}
			}
			b.WriteString("\n")
		}
		return []byte(b.String()), 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %5s %5s %7s %6s %-16s %10s %s %s\n", "USER", "PID", "PPID", "VSZ", "RSS", "WCHAN", "ADDR", "S", "NAME")
	for _, p := range procs {
		fmt.Fprintf(&b, "%-10s %5d %5d %7d %6d %-16s %10s %s %s\n", p.user, p.pid, p.ppid, 1234567, 45678, "SyS_epoll_wait", "0", "S", p.name)
	}
	return []byte(b.String()), 0
}

// headCommand runs head -c N on its input, as toybox's head does (-c
// takes a number of at least 0; toybox toys/posix/head.c): only that
// form, which the heapprofd trace read uses.
func headCommand(argv []string, in *shellInput) (out, errOut []byte, code int) {
	if len(argv) != 3 || argv[1] != "-c" {
		return nil, []byte("head: sim: only head -c N, reading its input\n"), 1
	}
	n, err := strconv.ParseInt(argv[2], 10, 64)
	if err != nil || n < 0 {
		return nil, []byte(fmt.Sprintf("head: -c %s: not a number of at least 0\n", argv[2])), 1
	}
	var b []byte
	if in != nil {
		b = in.read()
	}
	return slices.Clone(b[:min(int64(len(b)), n)]), nil, 0
}
