package instrument

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// summary is a record in one short line, for comparing whole streams.
func summary(rec Record) string {
	switch {
	case rec.Kind == Divider:
		return "divider " + rec.Buffer
	case rec.Kind == NotLogcat:
		return "text " + rec.Text
	case rec.Runner.Kind == NotRunner:
		return fmt.Sprintf("log %s %d", rec.Entry.Tag, rec.Entry.PID)
	case rec.Runner.Kind == RunStarted || rec.Runner.Kind == RunFinished:
		r := rec.Runner
		return fmt.Sprintf("%s %d %d %d", r.Kind, r.Tests, r.Failed, r.Ignored)
	case rec.Runner.Kind == Exception:
		r := rec.Runner
		return fmt.Sprintf("exception %s#%s %q %v", r.Class, r.Method, r.Trace, r.Unterminated)
	}
	return fmt.Sprintf("%s %s#%s", rec.Runner.Kind, rec.Runner.Class, rec.Runner.Method)
}

func readLog(t *testing.T, r *LogReader) ([]string, []error) {
	t.Helper()
	var out []string
	var errs []error
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, errs
		}
		if _, ok := errors.AsType[*SyntaxError](err); err != nil && !ok {
			t.Fatalf("after %q: %v", out, err)
		}
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, summary(rec))
	}
}

const trace = "java.lang.AssertionError: expected:<4> but was:<5>\n\tat org.junit.Assert.fail(Assert.java:89)"

func TestLogReaderRunner(t *testing.T) {
	exc := fmt.Sprintf("exception com.example.CalcTest#%%s %q false", trace)
	const calc = "com.example.CalcTest#"
	param := "com.example.ParamTest$Inner#test[0: a(b)]"
	tests := []struct {
		name string
		in   string
		pid  int
		want []string
	}{
		{"brief, runner 1.5", logBrief, 0, []string{"divider /dev/log/main", "run started 3 0 0",
			"started " + calc + "add", "log art 4321", "finished " + calc + "add", "started " + calc + "subtract",
			"failed " + calc + "subtract", "in exception #", "in exception #", "in exception #",
			fmt.Sprintf(exc, "subtract"), "finished " + calc + "subtract", "ignored " + calc + "skipped",
			"run finished 2 1 1"}},
		{"time", logTime, 0, []string{"divider main", "divider system", "run started 1 0 0", "started " + param,
			"assumption failed " + param, "finished " + param, "run finished 1 0 0"}},
		{"threadtime, runner 1.6, pid", logThreadTime, 4321, []string{"divider main", "run started 2 0 0",
			"started " + calc + "add", "log TestRunner 9999", "failed " + calc + "add",
			"in exception #", "in exception #", "in exception #", fmt.Sprintf(exc, "add"),
			"finished " + calc + "add", "failed com.example.SetupTest#", "run finished 1 2 0"}},
		{"modifiers", logModifiers, 0, []string{"run started 1 0 0", "started " + calc + "add",
			"finished " + calc + "add", "run finished 1 0 0"}},
		{"long, runner 1.5", logLong15, 0, []string{"divider main", "started " + calc + "add",
			"failed " + calc + "add", "in exception #", "in exception #", fmt.Sprintf(exc, "add"),
			"finished " + calc + "add"}},
		{"long, runner 1.6", logLong16, 0, []string{"failed " + calc + "add", "in exception #",
			fmt.Sprintf(exc, "add")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewLogReader(strings.NewReader(tt.in))
			r.PID = tt.pid
			got, errs := readLog(t, r)
			if errs != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q (errors %v)\nwant %q", got, errs, tt.want)
			}
			r = NewLogReader(iotest.OneByteReader(strings.NewReader(tt.in)))
			r.PID = tt.pid
			if one, _ := readLog(t, r); !reflect.DeepEqual(one, got) {
				t.Errorf("one byte at a time: %q", one)
			}
		})
	}
}

func TestParseEntry(t *testing.T) {
	st := func(text string, y, mo, d, h, mi int, s int64, ns, dig int, zone string) Stamp {
		return Stamp{Text: text, Year: y, Month: mo, Day: d, Hour: h, Min: mi, Sec: s, Nanos: ns, Digits: dig, Zone: zone}
	}
	secs := func(text string, s int64, ns, dig int) Stamp {
		return Stamp{Text: text, Seconds: true, Sec: s, Nanos: ns, Digits: dig}
	}
	ms := st("11-27 06:44:53.123", 0, 11, 27, 6, 44, 53, 123000000, 3, "")
	tests := []struct {
		line string
		want Entry
	}{
		{"I/TestRunner( 4321): started: a(b.C)", Entry{Layout: Brief, PID: 4321, Priority: 'I', Tag: "TestRunner", Message: "started: a(b.C)"}},
		{"D/art     (  612): ", Entry{Layout: Brief, PID: 612, Priority: 'D', Tag: "art"}},
		{"?/x( 1): m", Entry{Layout: Brief, PID: 1, Priority: '?', Tag: "x", Message: "m"}},
		{"I/TestRunner(10123: 4321): x", Entry{Layout: Brief, UID: "10123", PID: 4321, Priority: 'I', Tag: "TestRunner", Message: "x"}},
		{"11-27 06:44:53.123 E/TestRunner( 4321): y", Entry{Layout: Time, Stamp: ms, PID: 4321, Priority: 'E', Tag: "TestRunner", Message: "y"}},
		{"11-27 06:44:53.123  4321  4340 I TestRunner: a: b", Entry{Layout: ThreadTime, Stamp: ms, PID: 4321, TID: 4340, Priority: 'I', Tag: "TestRunner", Message: "a: b"}},
		{"11-27 06:44:53.123   612   612 W Tag with space: m", Entry{Layout: ThreadTime, Stamp: ms, PID: 612, TID: 612, Priority: 'W', Tag: "Tag with space", Message: "m"}},
		{"11-27 06:44:53.123   612   613 V x       :", Entry{Layout: ThreadTime, Stamp: ms, PID: 612, TID: 613, Priority: 'V', Tag: "x"}},
		{"2026-11-27 06:44:53.123456 +0100 10123  4321  4340 I T: m", Entry{Layout: ThreadTime,
			Stamp: st("2026-11-27 06:44:53.123456 +0100", 2026, 11, 27, 6, 44, 53, 123456000, 6, "+0100"), UID: "10123", PID: 4321, TID: 4340, Priority: 'I', Tag: "T", Message: "m"}},
		{"11-27 06:44:53.123456789 root     1     1 F init: m", Entry{Layout: ThreadTime,
			Stamp: st("11-27 06:44:53.123456789", 0, 11, 27, 6, 44, 53, 123456789, 9, ""), UID: "root", PID: 1, TID: 1, Priority: 'F', Tag: "init", Message: "m"}},
		{"         1795765493.140  4321  4340 I T: m", Entry{Layout: ThreadTime, Stamp: secs("1795765493.140", 1795765493, 140000000, 3), PID: 4321, TID: 4340, Priority: 'I', Tag: "T", Message: "m"}},
		{"[ 11-27 06:44:53.123  4321: 4340 I/TestRunner ]", Entry{Layout: Long, Stamp: ms, PID: 4321, TID: 4340, Priority: 'I', Tag: "TestRunner"}},
		{"[ 11-27 06:44:53.123 10123: 4321: 4340 D/ab       ]", Entry{Layout: Long, Stamp: ms, UID: "10123", PID: 4321, TID: 4340, Priority: 'D', Tag: "ab"}},
	}
	for _, tt := range tests {
		got, ok := ParseLine(tt.line)
		if !ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q:\n got %+v %v\nwant %+v", tt.line, got, ok, tt.want)
		}
	}
	for _, bad := range []string{"", "- waiting for device -", "11-27 06:44:53.12  4321  4340 I T: m",
		"X/Tag( 1): m", "\x1b[38;5;40mI/T( 1): m", "11-27 06:44:53.123  4321 I T: m", "[ 11-27 06:44:53.123 4321 I/T ]"} {
		if e, ok := ParseLine(bad); ok {
			t.Errorf("%q read as %+v", bad, e)
		}
	}
}

func TestSplitName(t *testing.T) {
	for _, tt := range []struct{ name, class, method string }{
		{"add(com.example.CalcTest)", "com.example.CalcTest", "add"},
		{"test[0](pkg.Cls)", "pkg.Cls", "test[0]"},
		{"test[0: f(1) = 2](pkg.Cls$Inner)", "pkg.Cls$Inner", "test[0: f(1) = 2]"},
		{"weird ) name(pkg.Cls)", "pkg.Cls", "weird ) name"},
		{"(pkg.Cls)", "pkg.Cls", ""},
		{"pkg.Cls", "pkg.Cls", ""},
	} {
		c, m, ok := SplitName(tt.name)
		if !ok || c != tt.class || m != tt.method {
			t.Errorf("SplitName(%q) = %q, %q, %v", tt.name, c, m, ok)
		}
	}
	for _, bad := range []string{"", "a()", "a(b", "a)", "noopen)"} {
		if c, m, ok := SplitName(bad); ok {
			t.Errorf("SplitName(%q) = %q, %q", bad, c, m)
		}
	}
}

func TestLogReaderMalformed(t *testing.T) {
	in := "I/TestRunner( 1): run started: many tests\n" +
		"I/TestRunner( 1): started: a(b\n" +
		"I/TestRunner( 1): run finished: 1 tests\n" +
		"I/TestRunner( 1): something else the runner never says\n" +
		"I/TestRunner( 1): started: ok(pkg.C)\n"
	got, errs := readLog(t, NewLogReader(strings.NewReader(in)))
	want := []string{"log TestRunner 1", "log TestRunner 1", "log TestRunner 1", "log TestRunner 1", "started pkg.C#ok"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	var lines []string
	for _, err := range errs {
		lines = append(lines, err.Error())
	}
	wantErrs := []string{
		`instrument: logcat line 1: run started: not "N tests"`,
		`instrument: logcat line 2: started: test name "a(b" is not method(Class)`,
		`instrument: logcat line 3: run finished: not "N tests, F failed, I ignored"`,
	}
	if !reflect.DeepEqual(lines, wantErrs) {
		t.Errorf("errors %q\nwant %q", lines, wantErrs)
	}
}

func TestLogReaderUnterminatedException(t *testing.T) {
	in := "E/TestRunner( 1): failed: a(pkg.C)\n" +
		"E/TestRunner( 1): ----- begin exception -----\n" +
		"E/TestRunner( 1): java.lang.Error\n" +
		"I/TestRunner( 1): started: b(pkg.C)\n"
	in += "E/TestRunner( 1): ----- begin exception -----\n" +
		"E/TestRunner( 1): java.lang.Error: second\n" +
		"E/TestRunner( 1): failed: c(pkg.C)\n"
	got, _ := readLog(t, NewLogReader(strings.NewReader(in)))
	want := []string{"failed pkg.C#a", "in exception #", "in exception #",
		`exception pkg.C#a "java.lang.Error" true`, "started pkg.C#b",
		"in exception #", "in exception #", `exception # "java.lang.Error: second" true`, "failed pkg.C#c"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestLogReaderNotLogcat(t *testing.T) {
	in := "- waiting for device -\r\r\nerror: device offline\n"
	got, errs := readLog(t, NewLogReader(strings.NewReader(in)))
	if want := []string{"text - waiting for device -", "text error: device offline"}; errs != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %q %v, want %q", got, errs, want)
	}
	_, err := NewLogReader(strings.NewReader(strings.Repeat("x", MaxLine+1))).Next()
	if _, ok := errors.AsType[*SyntaxError](err); !ok {
		t.Errorf("a line past MaxLine: %v", err)
	}
}

func FuzzParseLogcat(f *testing.F) {
	for _, s := range logSeeds {
		f.Add([]byte(s), 0)
	}
	f.Add([]byte(logThreadTime), 4321)
	f.Fuzz(func(t *testing.T, b []byte, pid int) {
		r := NewLogReader(strings.NewReader(string(b)))
		r.PID = pid
		for range len(b) + 2 {
			rec, err := r.Next()
			if err == io.EOF {
				return
			}
			if _, ok := errors.AsType[*SyntaxError](err); err != nil && !ok {
				t.Fatalf("unexpected error %v", err)
			}
			if rec.Runner.Kind != NotRunner && (rec.Entry.Tag != RunnerTag || (pid != 0 && rec.Entry.PID != pid)) {
				t.Fatalf("runner event from %+v", rec.Entry)
			}
		}
		t.Fatal("more records than lines")
	})
}
