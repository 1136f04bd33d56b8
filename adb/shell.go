package adb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Quote makes arg one word for the device's shell (mksh on every Android
// release that has DDM): a word made only of characters that mean nothing
// to the shell is left bare, anything else is put in single quotes, inside
// which the shell interprets nothing; a single quote itself is written as
// '\” (close, an escaped quote, reopen).
func Quote(arg string) string {
	if arg != "" && strings.IndexFunc(arg, func(r rune) bool { return !shellSafe(r) }) < 0 {
		return arg
	}
	return "'" + strings.ReplaceAll(arg, "'", `'\''`) + "'"
}

// shellSafe tells whether r means nothing to the shell anywhere in a word.
// "=" (an assignment in a first word) and "~" (home at the start) are left
// out on purpose.
func shellSafe(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("_-.,:/@%+", r)
}

// ShellCommand joins argv into one shell command line, every element
// quoted with Quote. It is the only way this package builds a command for a
// device shell: the shell: service takes one string, which the device's
// shell parses, so unquoted text from a user could run commands of its own.
func ShellCommand(argv ...string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

// ErrBadName: a package or process name that Android would not accept.
var ErrBadName = errors.New("adb: not an Android package or process name")

// maxNameLen bounds a process name; Android's own limit for a package name
// is 255 characters.
const maxNameLen = 255

// CheckName checks an app's package or process name against Android's
// grammar: dot-separated segments, each a letter followed by letters,
// digits or '_' (com.example.app), optionally followed by ':' and a
// process suffix of the same form (com.example.app:remote). The error
// wraps ErrBadName and says what is wrong where.
func CheckName(name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %q: %s", ErrBadName, name, fmt.Sprintf(format, args...))
	}
	if name == "" {
		return bad("empty")
	}
	if len(name) > maxNameLen {
		return bad("%d bytes, more than %d", len(name), maxNameLen)
	}
	pkg, proc, hasProc := strings.Cut(name, ":")
	check := func(part string, off int) error {
		front := true
		for i, c := range part {
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
				front = false
			case c == '.':
				if front {
					return bad("empty segment at byte %d", off+i)
				}
				front = true
			case (c >= '0' && c <= '9') || c == '_':
				if front {
					return bad("segment starts with %q at byte %d (segments start with a letter)", c, off+i)
				}
			default:
				return bad("character %q at byte %d (only letters, digits, '_', '.' and one ':' are allowed)", c, off+i)
			}
		}
		if front {
			return bad("empty segment at byte %d", off+len(part))
		}
		return nil
	}
	if err := check(pkg, 0); err != nil {
		return err
	}
	if hasProc {
		if err := check(proc, len(pkg)+1); err != nil {
			return err
		}
	}
	return nil
}

// Process is one line of a device's process list.
type Process struct {
	PID  int
	Name string // argv[0]: for an app, its process name
}

// ParsePS reads the output of Android's ps in either flavour:
//
//	toolbox (Android 4.4 to 7.1; every process, no state column in the header):
//	USER     PID   PPID  VSIZE  RSS     WCHAN    PC         NAME
//	u0_a54    2305  180   498120 27512 ffffffff 4006ba10 S com.example.app
//
//	toybox `ps -A` (Android 8 and later):
//	USER           PID  PPID     VSZ    RSS WCHAN            ADDR S NAME
//	u0_a54        2305   180 1234567  45678 SyS_epoll_wait      0 S com.example.app
//
// The header names the PID column; the name is the rest of the line from
// the NAME column on (toolbox prints a state column its header does not
// name). Carriage returns (the pty of the legacy shell service) are
// ignored. A line that does not fit the header is an error naming it.
func ParsePS(out string) ([]Process, error) {
	lines := strings.Split(strings.ReplaceAll(out, "\r", ""), "\n")
	var header []string
	pidCol, nameCol := -1, -1
	var procs []Process
	for n, line := range lines {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if header == nil {
			for i, h := range f {
				switch h {
				case "PID":
					pidCol = i
				case "NAME", "CMD":
					nameCol = i
				}
			}
			if pidCol < 0 || nameCol != len(f)-1 {
				return nil, fmt.Errorf("%w: ps output: line %d %q is not a header with PID and, last, NAME", ErrProtocol, n+1, line)
			}
			header = f
			if !containsWord(f, "S") {
				nameCol++ // toolbox: an unnamed state column before NAME
			}
			continue
		}
		if len(f) <= nameCol {
			return nil, fmt.Errorf("%w: ps output: line %d %q has %d fields, want at least %d", ErrProtocol, n+1, line, len(f), nameCol+1)
		}
		pid, err := strconv.Atoi(f[pidCol])
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%w: ps output: line %d %q: PID %q is not a process id", ErrProtocol, n+1, line, f[pidCol])
		}
		procs = append(procs, Process{PID: pid, Name: strings.Join(f[nameCol:], " ")})
	}
	if header == nil {
		return nil, fmt.Errorf("%w: ps output %q has no header", ErrProtocol, truncate(out, 80))
	}
	return procs, nil
}

func containsWord(f []string, w string) bool {
	for _, s := range f {
		if s == w {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// API levels where the device's tools change (AOSP's record of the shell
// utilities per release): toybox brought pidof in Android 6.0, and its ps,
// which lists only the caller's session unless given -A, in Android 8.0.
// Before 8.0, toolbox ps lists every process and takes any other argument,
// -A included, as a process-name prefix to filter on.
const (
	APIPidof    = 23 // Android 6.0: toybox pidof
	APIToyboxPS = 26 // Android 8.0: toybox ps, needs -A
)

// psCommand is the command that lists every process on a device of the
// API level; 0 (unknown) tries toybox's form first.
func psCommand(api int) []string {
	if api > 0 && api < APIToyboxPS {
		return []string{"ps"}
	}
	return []string{"ps", "-A"}
}

// Processes lists the processes of a device with ps, in the form the
// device's API level needs (0 when unknown: `ps -A`, then plain `ps` if
// that listed nothing, as toolbox ps does when given -A).
func (c *Client) Processes(ctx context.Context, serial string, api int) ([]Process, error) {
	cmd := psCommand(api)
	out, err := c.Shell(ctx, serial, cmd...)
	if err != nil {
		return nil, err
	}
	procs, err := ParsePS(out)
	if err == nil && len(procs) == 0 && api <= 0 {
		cmd = []string{"ps"}
		if out, err = c.Shell(ctx, serial, cmd...); err != nil {
			return nil, err
		}
		procs, err = ParsePS(out)
	}
	if err != nil {
		return nil, fmt.Errorf("adb: %s: %s: %w", serial, ShellCommand(cmd...), err)
	}
	return procs, nil
}

// PIDsOf returns the pids of the processes named exactly name on a device
// (none: an empty list). From API 23 it asks pidof; before, or when pidof's
// answer is not a list of pids, it reads the whole process list. name must
// pass CheckName.
func (c *Client) PIDsOf(ctx context.Context, serial, name string, api int) ([]int, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if api >= APIPidof {
		out, err := c.Shell(ctx, serial, "pidof", name)
		if err != nil {
			return nil, err
		}
		if pids, ok := parsePids(out); ok {
			return pids, nil
		}
		// pidof missing or odd (a vendor build): the list says it all.
	}
	procs, err := c.Processes(ctx, serial, api)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range procs {
		if p.Name == name {
			pids = append(pids, p.PID)
		}
	}
	return pids, nil
}

// parsePids reads pidof's output: pids separated by spaces, or nothing.
func parsePids(out string) ([]int, bool) {
	var pids []int
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, false
		}
		pids = append(pids, pid)
	}
	return pids, true
}

// ProcessName returns the name the device's process list gives pid, for
// a process that cannot be asked itself (another debugger holds its JDWP
// stream). ErrNoProcess when the list has no such pid.
func (c *Client) ProcessName(ctx context.Context, serial string, pid, api int) (string, error) {
	procs, err := c.Processes(ctx, serial, api)
	if err != nil {
		return "", err
	}
	for _, p := range procs {
		if p.PID == pid {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("adb: %s: pid %d: %w", serial, pid, ErrNoProcess)
}

// ErrNoProcess: the device's process list has no such pid.
var ErrNoProcess = errors.New("adb: no such process")
