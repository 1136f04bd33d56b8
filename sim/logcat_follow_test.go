package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/instrument"
	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/testwait"
)

// lineReader sends each line read from r on its channel, without its
// "\n" (a "\r" before it is kept), and closes it at the end of r.
func lineReader(r io.Reader) <-chan string {
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		br := bufio.NewReader(r)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			ch <- strings.TrimSuffix(l, "\n")
		}
	}()
	return ch
}

// waitLine reads lines until one contains want and returns it.
func waitLine(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	deadline := time.After(testwait.Bound)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("stream ended before a line with %q", want)
			}
			if strings.Contains(l, want) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line with %q after %v", want, testwait.Bound)
		}
	}
}

// nextLine returns the next line.
func nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("stream ended")
		}
		return l
	case <-time.After(testwait.Bound):
		t.Fatalf("no line after %v", testwait.Bound)
	}
	return ""
}

// waitReaders waits until n logcat commands follow d's log.
func waitReaders(t *testing.T, d *Device, n int) {
	t.Helper()
	testwait.Until(t, 5*time.Millisecond, fmt.Sprintf("%d following logcat", n), func() (bool, string) {
		s := d.LogStats()
		return s.Readers == n, fmt.Sprintf("%d following", s.Readers)
	})
}

// TestLogcatFollowAdb runs `adb logcat` through Debian's adb server and
// the simulated adbd: the entries held come first, an entry logged after
// the command started arrives, and stopping the client ends the command
// on the device.
func TestLogcatFollowAdb(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 30)
	r.d.Log(LogEntry{PID: 4321, Priority: 'I', Tag: "TestRunner", Msg: "run started: 2 tests"})
	stdout, stop := srv.Start(t, "-s", r.serial, "logcat", "-v", "threadtime", "-s", "TestRunner")
	lines := lineReader(stdout)
	waitLine(t, lines, "run started: 2 tests")
	waitReaders(t, r.d, 1)
	r.d.Log(LogEntry{PID: 4321, TID: 4340, Priority: 'I', Tag: "TestRunner", Msg: "started: add(com.example.CalcTest)"})
	line := waitLine(t, lines, "started: add(")
	e, ok := instrument.ParseLine(line)
	if !ok || e.Layout != instrument.ThreadTime || e.PID != 4321 || e.TID != 4340 || e.Message != "started: add(com.example.CalcTest)" {
		t.Fatalf("line %q parses as %+v, %v", line, e, ok)
	}
	stop()
	waitReaders(t, r.d, 0)
	if log := r.d.ShellLog(); !strings.Contains(fmt.Sprint(log), "logcat -v threadtime -s TestRunner") {
		t.Errorf("shell log %q: no logcat command", log)
	}
}

// TestLogcatFollowShellPTY follows through the stand-in adb server's
// shell: service on Android 4.4: lines end in "\r\n" (the PTY, sheet 1),
// new entries arrive, and closing the stream ends the command.
func TestLogcatFollowShellPTY(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-follow", API: 19})
	_, addr := startHostServer(t, d)
	d.Log(LogEntry{PID: 4321, Priority: 'I', Tag: "TestRunner", Msg: "run started: 1 tests"})
	c := openService(t, addr, "sim-follow", "shell:logcat -v time")
	lines := lineReader(c)
	if l := waitLine(t, lines, "run started"); !strings.HasSuffix(l, "I/TestRunner( 4321): run started: 1 tests\r") {
		t.Fatalf("first line %q", l)
	}
	waitReaders(t, d, 1)
	d.Log(LogEntry{PID: 4321, Priority: 'E', Tag: "TestRunner", Msg: "failed: a(b.C)\nsecond line"})
	for _, want := range []string{"E/TestRunner( 4321): failed: a(b.C)\r", "E/TestRunner( 4321): second line\r"} {
		if l := waitLine(t, lines, "TestRunner"); !strings.HasSuffix(l, want) {
			t.Fatalf("line %q, want it to end %q", l, want)
		}
	}
	c.Close()
	waitReaders(t, d, 0)
}

// TestLogcatShellV2: shell protocol v2 carries logcat's output, its
// errors apart, and its exit code.
func TestLogcatShellV2(t *testing.T) {
	d := logDevice(t, 30)
	for _, tc := range []struct {
		cmd  string
		want []byte
	}{
		{"logcat -d -b system", v2Frames(1, divS+"11-27 07:44:53.130"+thrB, 0)},
		{"logcat -x", v2Frames(2, "logcat: Unknown option '-x'.\n", 1)},
	} {
		c, err := d.OpenService("shell,v2,raw:" + tc.cmd)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != string(tc.want) {
			t.Errorf("shell,v2 %s: %q, %v; want %q", tc.cmd, got, err, tc.want)
		}
	}
}

func v2Frames(id byte, data string, code byte) []byte {
	n := len(data)
	b := append([]byte{id, byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}, data...)
	return append(b, 3, 1, 0, 0, 0, code)
}

// TestLogcatLostToFullBuffer: a buffer keeps its newest entries within
// its bound, and a following logcat that falls behind (its client reads
// nothing for a while) loses the entries pruned before it read them:
// every entry is either printed or counted in the gap, and the printed
// ones show the jump.
func TestLogcatLostToFullBuffer(t *testing.T) {
	d := NewDevice(DeviceConfig{Serial: "sim-full", API: 30, LogBufferSize: 4096})
	t.Cleanup(d.Close)
	msg := func(i int) string { return fmt.Sprintf("line %05d %s", i, strings.Repeat("x", 60)) }
	const n = 20000
	c, err := d.OpenService("shell:logcat -v brief")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitReaders(t, d, 1)
	for i := range n {
		d.Log(LogEntry{PID: 4321, Priority: 'I', Tag: "T", Msg: msg(i)})
	}
	held := len(d.LogEntries())
	if size := held * logSize(&LogEntry{Tag: "T", Msg: msg(0)}); held < 2 || size > 4096 {
		t.Fatalf("the buffer holds %d entries (%d bytes), bound 4096", held, size)
	}
	var got []int
	lines := lineReader(c)
	for len(got) == 0 || got[len(got)-1] != n-1 {
		l := waitLine(t, lines, "line ")
		i, err := strconv.Atoi(strings.Fields(strings.SplitN(l, "line ", 2)[1])[0])
		if err != nil {
			t.Fatalf("line %q", l)
		}
		got = append(got, i)
	}
	missing := 0
	for k, i := range got {
		if k > 0 && i <= got[k-1] {
			t.Fatalf("line %d after %d", i, got[k-1])
		}
		if k > 0 {
			missing += i - got[k-1] - 1
		}
	}
	missing += got[0]
	st := d.LogStats()
	if st.Logged != n || st.Pruned != n-held || st.Lost == 0 || st.Lost != missing || d.LogcatGap() != st.Lost {
		t.Fatalf("stats %+v, gap %d; %d lines printed, %d missing, %d held", st, d.LogcatGap(), len(got), missing, held)
	}
	t.Logf("%d entries logged into a 4 KiB buffer: %d printed, %d lost (the gap)", n, len(got), st.Lost)
	c.Close()
	waitReaders(t, d, 0)
}

// TestLogcatFollowTail: -T N (5.0+) prints the last N entries and goes on
// following (sheet 5), on Android 5.0's PTY.
func TestLogcatFollowTail(t *testing.T) {
	d := logDevice(t, 21)
	c, err := d.OpenService("shell:logcat -T 1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lines := lineReader(c)
	for _, want := range []string{"--------- beginning of main\r", "E/TestRunner( 4321): ----- begin exception -----\r"} {
		if l := nextLine(t, lines); l != want {
			t.Fatalf("line %q, want %q", l, want)
		}
	}
	waitReaders(t, d, 1)
	d.Log(LogEntry{PID: 4321, Priority: 'I', Tag: "TestRunner", Msg: "run finished: 1 tests, 1 failed, 0 ignored"})
	if l := waitLine(t, lines, "run finished"); l != "I/TestRunner( 4321): run finished: 1 tests, 1 failed, 0 ignored\r" {
		t.Fatalf("line %q", l)
	}
	c.Close()
	waitReaders(t, d, 0)
}
