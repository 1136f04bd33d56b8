package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/instrument"
)

// logT0 is 2026-11-27 06:44:53.123756789 UTC: 07:44:53 in Berlin (+0100),
// 1795761893 seconds since the epoch. Fractions past half a millisecond
// show that logcat truncates.
var logT0 = time.Date(2026, 11, 27, 6, 44, 53, 123756789, time.UTC)

// logDevice is a device in Berlin's time zone holding three entries: a
// runner line (main), one of system_server (system) and a three-line
// exception entry ending in "\n" (main).
func logDevice(t *testing.T, api int) *Device {
	t.Helper()
	d := NewDevice(DeviceConfig{Serial: "sim-log", API: api, Props: map[string]string{"persist.sys.timezone": "Europe/Berlin"}})
	t.Cleanup(d.Close)
	d.Log(LogEntry{Time: logT0, Mono: 345*time.Second + 150756789, PID: 4321, TID: 4340, UID: 10123, Priority: 'I', Tag: "TestRunner", Msg: "run started: 1 tests"})
	d.Log(LogEntry{Time: logT0.Add(7 * time.Millisecond), Mono: 345*time.Second + 157756789, PID: 620, TID: 650, UID: 1000, Priority: 'W', Tag: "ActivityManager", Msg: "Slow operation", Buffer: "system"})
	d.Log(LogEntry{Time: logT0.Add(12 * time.Millisecond), Mono: 345*time.Second + 162756789, PID: 4321, TID: 4340, UID: 2000, Priority: 'E', Tag: "TestRunner", Msg: "----- begin exception -----\njava.lang.AssertionError: boom\n\tat x.y(Z.java:1)\n"})
	return d
}

// runLogcat runs logcat with args on d as a collected command.
func runLogcat(d *Device, args ...string) (out, errOut string, code int) {
	var o, e bytes.Buffer
	code = d.logcat(args, "", &o, &e, nil)
	return o.String(), e.String(), code
}

const (
	thrA  = "  4321  4340 I TestRunner: run started: 1 tests\n"
	thrB  = "   620   650 W ActivityManager: Slow operation\n"
	thrC1 = "  4321  4340 E TestRunner: ----- begin exception -----\n"
	thrC2 = "  4321  4340 E TestRunner: java.lang.AssertionError: boom\n"
	thrC3 = "  4321  4340 E TestRunner: \tat x.y(Z.java:1)\n"
	divM  = "--------- beginning of main\n"
	divS  = "--------- beginning of system\n"
)

// threadtime is the three entries in threadtime with the given stamps.
func threadtime(a, b, c string) string {
	return divM + a + thrA + divS + b + thrB + c + thrC1 + c + thrC2 + c + thrC3
}

const briefABC = `--------- beginning of /dev/log/main
I/TestRunner( 4321): run started: 1 tests
--------- beginning of /dev/log/system
W/ActivityManager(  620): Slow operation
E/TestRunner( 4321): ----- begin exception -----
E/TestRunner( 4321): java.lang.AssertionError: boom
E/TestRunner( 4321): 	at x.y(Z.java:1)
`

// TestLogcatFormats: each layout and modifier by version, exactly (sheet
// facts 2-4 and 6), and every line parses back with instrument.ParseLine.
func TestLogcatFormats(t *testing.T) {
	for _, tc := range []struct {
		api  int
		args []string
		want string
	}{
		{19, []string{"-d"}, briefABC},
		{22, []string{"-d", "-v", "time"}, divM + "11-27 07:44:53.123 I/TestRunner( 4321): run started: 1 tests\n" +
			divS + "11-27 07:44:53.130 W/ActivityManager(  620): Slow operation\n" +
			"11-27 07:44:53.135 E/TestRunner( 4321): ----- begin exception -----\n" +
			"11-27 07:44:53.135 E/TestRunner( 4321): java.lang.AssertionError: boom\n" +
			"11-27 07:44:53.135 E/TestRunner( 4321): \tat x.y(Z.java:1)\n"},
		{23, []string{"-d"}, threadtime("11-27 07:44:53.123", "11-27 07:44:53.130", "11-27 07:44:53.135")},
		{23, []string{"-d", "-v", "usec"}, threadtime("11-27 07:44:53.123756", "11-27 07:44:53.130756", "11-27 07:44:53.135756")},
		{24, []string{"-d", "-v", "year", "-v", "zone"}, threadtime("2026-11-27 07:44:53.123 +0100", "2026-11-27 07:44:53.130 +0100", "2026-11-27 07:44:53.135 +0100")},
		{24, []string{"-d", "-v", "epoch"}, threadtime("         1795761893.123", "         1795761893.130", "         1795761893.135")},
		{24, []string{"-d", "-v", "monotonic"}, threadtime("   345.150", "   345.157", "   345.162")},
		{24, []string{"-d", "-v", "UTC"}, threadtime("11-27 06:44:53.123 +0000", "11-27 06:44:53.130 +0000", "11-27 06:44:53.135 +0000")},
		{26, []string{"-d", "-v", "nsec,year"}, threadtime("2026-11-27 07:44:53.123756789", "2026-11-27 07:44:53.130756789", "2026-11-27 07:44:53.135756789")},
		{24, []string{"-d", "-v", "uid"}, divM + "11-27 07:44:53.123 10123  4321  4340 I TestRunner: run started: 1 tests\n" +
			divS + "11-27 07:44:53.130  1000   620   650 W ActivityManager: Slow operation\n" +
			"11-27 07:44:53.135 shell  4321  4340 E TestRunner: ----- begin exception -----\n" +
			"11-27 07:44:53.135 shell  4321  4340 E TestRunner: java.lang.AssertionError: boom\n" +
			"11-27 07:44:53.135 shell  4321  4340 E TestRunner: \tat x.y(Z.java:1)\n"},
		{24, []string{"-d", "-v", "brief", "-v", "uid", "-b", "main"}, "I/TestRunner(10123: 4321): run started: 1 tests\n" +
			"E/TestRunner(shell: 4321): ----- begin exception -----\n" +
			"E/TestRunner(shell: 4321): java.lang.AssertionError: boom\n" +
			"E/TestRunner(shell: 4321): \tat x.y(Z.java:1)\n"},
		{24, []string{"-d", "-v", "long", "-b", "main"}, "[ 11-27 07:44:53.123  4321: 4340 I/TestRunner ]\nrun started: 1 tests\n\n" +
			"[ 11-27 07:44:53.135  4321: 4340 E/TestRunner ]\n----- begin exception -----\njava.lang.AssertionError: boom\n\tat x.y(Z.java:1)\n\n"},
		// From 11 the divider comes with one buffer too.
		{30, []string{"-d", "-b", "system"}, divS + "11-27 07:44:53.130" + thrB},
		{19, []string{"-d", "-v", "process", "-b", "system"}, "W(  620) Slow operation  (ActivityManager)\n"},
	} {
		d := logDevice(t, tc.api)
		out, errOut, code := runLogcat(d, tc.args...)
		if out != tc.want || errOut != "" || code != 0 {
			t.Errorf("API %d logcat %q:\n%s\nstderr %q, exit %d; want\n%s", tc.api, tc.args, out, errOut, code, tc.want)
			continue
		}
		if !strings.Contains(strings.Join(tc.args, " "), "process") { // a layout the host does not read
			checkParses(t, out)
		}
	}
}

// checkParses reads out with the host's parser: every line but the
// dividers and long's message lines is an entry of the simulated device.
func checkParses(t *testing.T, out string) {
	t.Helper()
	long := strings.HasPrefix(out, "[ ")
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if strings.HasPrefix(line, "--------- beginning of ") || (long && !strings.HasPrefix(line, "[ ")) {
			continue
		}
		e, ok := instrument.ParseLine(line)
		if !ok || (e.PID != 4321 && e.PID != 620) || (e.Tag != "TestRunner" && e.Tag != "ActivityManager") {
			t.Errorf("ParseLine(%q) = %+v, %v", line, e, ok)
		}
	}
	r := instrument.NewLogReader(strings.NewReader(out))
	n := 0
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if rec.Kind == instrument.LogEntry && rec.Runner.Kind == instrument.RunStarted {
			n++
		}
	}
	if want := strings.Count(out, "run started"); n != want {
		t.Errorf("LogReader found %d run started events, want %d, in\n%s", n, want, out)
	}
}

// thrC is the exception entry in threadtime with stamp s.
func thrC(s string) string { return s + thrC1 + s + thrC2 + s + thrC3 }

// TestLogcatOptions: -t/-T counts and times by version, counted before
// tag and regex filters but after --pid (sheet 5); dividers before the
// filters (sheet 6); -s, filterspecs, -b, --pid, -e, -m.
func TestLogcatOptions(t *testing.T) {
	const c24 = "11-27 07:44:53.135"
	for _, tc := range []struct {
		api  int
		args []string
		want string
	}{
		{19, []string{"-t", "2"}, "--------- beginning of /dev/log/system\nW/ActivityManager(  620): Slow operation\n" +
			"--------- beginning of /dev/log/main\nE/TestRunner( 4321): ----- begin exception -----\n" +
			"E/TestRunner( 4321): java.lang.AssertionError: boom\nE/TestRunner( 4321): \tat x.y(Z.java:1)\n"},
		// 4.4 reads a time as a count: atoi("11-27 ...") is 11.
		{19, []string{"-t", "11-27 07:44:53.125"}, briefABC},
		{21, []string{"-t", "11-27 07:44:53.125"}, divS + "W/ActivityManager(  620): Slow operation\n" +
			divM + "E/TestRunner( 4321): ----- begin exception -----\n" +
			"E/TestRunner( 4321): java.lang.AssertionError: boom\nE/TestRunner( 4321): \tat x.y(Z.java:1)\n"},
		// The last entry is not ActivityManager's: nothing but a divider.
		{23, []string{"-t", "1", "-s", "ActivityManager"}, divM},
		{24, []string{"-t", "2026-11-27 07:44:53.131"}, divM + thrC(c24)},
		{24, []string{"-t", "1795761893.131"}, divM + thrC(c24)},
		// Strictly after: the entry at the very time is not printed.
		{24, []string{"-t", "2026-11-27 07:44:53.130756789"}, divM + thrC(c24)},
		{24, []string{"-d", "--pid=620"}, divS + "11-27 07:44:53.130" + thrB},
		{24, []string{"-d", "--pid", "4321", "-t", "1"}, divM + thrC(c24)},
		{24, []string{"-d", "-s", "TestRunner:E"}, divM + divS + thrC(c24)},
		{24, []string{"-d", "TestRunner:i", "*:S"}, divM + "11-27 07:44:53.123" + thrA + divS + thrC(c24)},
		{24, []string{"-d", "-e", "boom"}, divM + divS + thrC(c24)},
		{24, []string{"-d", "-m", "1"}, divM + "11-27 07:44:53.123" + thrA},
		{24, []string{"-d", "-b", "main", "-b", "system", "-b", "crash"}, threadtime("11-27 07:44:53.123", "11-27 07:44:53.130", c24)},
		{24, []string{"-d", "-b", "system,crash", "-b", "radio"}, divS + "11-27 07:44:53.130" + thrB},
		{24, []string{"-dvbrief", "-bmain"}, "I/TestRunner( 4321): run started: 1 tests\n" +
			"E/TestRunner( 4321): ----- begin exception -----\nE/TestRunner( 4321): java.lang.AssertionError: boom\nE/TestRunner( 4321): \tat x.y(Z.java:1)\n"},
	} {
		d := logDevice(t, tc.api)
		out, errOut, code := runLogcat(d, tc.args...)
		if out != tc.want || errOut != "" || code != 0 {
			t.Errorf("API %d logcat %q:\n%s\nstderr %q, exit %d; want\n%s", tc.api, tc.args, out, errOut, code, tc.want)
		}
	}
}

// TestLogcatErrors: what each version prints on stderr, and its exit
// code, for an option or -v word it does not know (sheet 4, 5, 7).
func TestLogcatErrors(t *testing.T) {
	for _, tc := range []struct {
		api     int
		args    []string
		wantErr string
		code    int
	}{
		{19, []string{"-x"}, "Unrecognized Option\n" + logcatUsage, 255},
		{19, []string{"-T", "5"}, "Unrecognized Option\n" + logcatUsage, 255},
		{22, []string{"-v", "usec"}, "Invalid parameter to -v\n" + logcatUsage, 255},
		{21, []string{"-t", "soon"}, "-t \"soon\" not in time format\n" + logcatUsage, 255},
		{23, []string{"-x"}, "Unrecognized Option x\n" + logcatUsage, 1},
		{23, []string{"-m", "1"}, "Unrecognized Option m\n" + logcatUsage, 1},
		{23, []string{"--pid=1"}, "Unrecognized Option -\n" + logcatUsage, 1},
		{23, []string{"-v", "year"}, "Invalid parameter year to -v\n" + logcatUsage, 1},
		{23, []string{"-t", "2026-11-27 07:44:53.131"}, "-t \"2026-11-27 07:44:53.131\" not in time format\n" + logcatUsage, 1},
		{24, []string{"-t", "11-27 07:44:53"}, "-t \"11-27 07:44:53\" not in time format\n" + logcatUsage, 1},
		{25, []string{"-v", "threadtime,epoch"}, "Invalid parameter threadtime,epoch to -v\n" + logcatUsage, 1},
		{25, []string{"-v", "nsec"}, "Invalid parameter nsec to -v\n" + logcatUsage, 1},
		{26, []string{"-v", "bogus"}, "Invalid parameter \"bogus\" to -v\n" + logcatUsage, 1},
		{29, []string{"-x"}, "Unrecognized Option x\n" + logcatUsage, 1},
		{30, []string{"-x"}, "logcat: Unknown option '-x'.\n", 1},
		{30, []string{"--bogus"}, "logcat: Unknown option '--bogus'.\n", 1},
		{30, []string{"-v", "bogus"}, "logcat: Invalid parameter \"bogus\" to -v.\n", 1},
		{30, []string{"-d", "TestRunner:Q"}, "logcat: Invalid filter expression\n", 1},
		{23, []string{"-d", "-b", "system,crash"}, "Unknown buffer 'system,crash'\n" + logcatUsage, 1},
		{30, []string{"-v", "color"}, "sim: logcat: -v color is not simulated\n", 1},
	} {
		d := logDevice(t, tc.api)
		out, errOut, code := runLogcat(d, tc.args...)
		if out != "" || errOut != tc.wantErr || code != tc.code {
			t.Errorf("API %d logcat %q: stdout %q, exit %d, stderr\n%s\nwant exit %d, stderr\n%s", tc.api, tc.args, out, code, errOut, tc.code, tc.wantErr)
		}
	}
}

// TestLogcatShellPTY: before 7.0 the shell: service runs logcat on a PTY:
// "\r\n", and its errors in the same stream (sheet 1); from 7.0 "\n".
func TestLogcatShellPTY(t *testing.T) {
	d := logDevice(t, 19)
	if got, want := shellOut(t, d, "logcat -d"), strings.ReplaceAll(briefABC, "\n", "\r\n"); got != want {
		t.Errorf("API 19 shell:logcat -d = %q, want %q", got, want)
	}
	if got, want := shellOut(t, d, "logcat -x"), strings.ReplaceAll("Unrecognized Option\n"+logcatUsage, "\n", "\r\n"); got != want {
		t.Errorf("API 19 shell:logcat -x = %q, want %q", got, want)
	}
	d = logDevice(t, 24)
	if got, want := shellOut(t, d, "logcat -d -b system"), "11-27 07:44:53.130"+thrB; got != want {
		t.Errorf("API 24 shell:logcat -d = %q, want %q", got, want)
	}
}

// TestLogcatClear: -c empties the buffers asked for, and only them.
func TestLogcatClear(t *testing.T) {
	d := logDevice(t, 24)
	if out, errOut, code := runLogcat(d, "-c", "-b", "main"); out != "" || errOut != "" || code != 0 {
		t.Fatalf("logcat -c: %q %q %d", out, errOut, code)
	}
	if out, _, _ := runLogcat(d, "-d"); out != divS+"11-27 07:44:53.130"+thrB {
		t.Fatalf("after -c -b main: %q", out)
	}
	runLogcat(d, "-c")
	if out, _, _ := runLogcat(d, "-d"); out != "" {
		t.Fatalf("after -c: %q", out)
	}
	if n := len(d.LogEntries()); n != 0 {
		t.Fatalf("after -c: %d entries held", n)
	}
}

// TestLogcatCrashBuffer: FATAL EXCEPTION goes to the crash buffer, read
// by default from 5.0, which 4.4 does not have (sheet 6).
func TestLogcatCrashBuffer(t *testing.T) {
	for _, tc := range []struct {
		api  int
		want string
	}{
		{19, ""},
		{21, "--------- beginning of crash\nE/AndroidRuntime( 4321): FATAL EXCEPTION: main\nI/AndroidRuntime( 4321): Process: com.example\n"},
	} {
		d := NewDevice(DeviceConfig{Serial: "sim-crash", API: tc.api})
		t.Cleanup(d.Close)
		d.Log(LogEntry{PID: 4321, Priority: 'E', Tag: "AndroidRuntime", Msg: "FATAL EXCEPTION: main", Buffer: "crash"})
		d.Log(LogEntry{PID: 4321, Tag: "AndroidRuntime", Msg: "Process: com.example", Buffer: "crash"}) // priority I
		if out, _, _ := runLogcat(d, "-d"); out != tc.want {
			t.Errorf("API %d logcat -d = %q, want %q", tc.api, out, tc.want)
		}
	}
}
