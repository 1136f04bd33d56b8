package sim

import (
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/instrument"
	"github.com/alloctrack/alloctrack/internal/testwait"
)

const calcTrace = "java.lang.AssertionError: expected:<4> but was:<5>\n" +
	"\tat org.junit.Assert.fail(Assert.java:89)\n" +
	"\tat com.example.CalcTest.subtract(CalcTest.java:21)\n"

// calcSuite: a pass, a failure, an ignored test and an assumption failure
// whose name holds parentheses, quotes and a comma.
func calcSuite() Suite {
	return Suite{TestPackage: "com.example.test", Runner: AndroidJUnitRunner, RunnerVersion: "1.6", Target: "com.example",
		StartDelay: -1,
		Tests: []SuiteTest{
			{Class: "com.example.CalcTest", Method: "add", Allocs: []TestAlloc{{Class: "[B", Size: 64, Count: 3, Line: 20}}},
			{Class: "com.example.CalcTest", Method: "subtract", Outcome: pertest.Failed, Trace: calcTrace,
				Allocs: []TestAlloc{{Class: "Ljava/util/ArrayList;", Size: 24, Count: 5, Line: 30}}},
			{Class: "com.example.OtherTest", Method: "skip", Outcome: pertest.Ignored},
			{Class: "com.example.OtherTest", Method: `net[0: a(b), "c"]`, Outcome: pertest.AssumptionFailed,
				Trace: "org.junit.AssumptionViolatedException: no network\n"},
		}}
}

// The statuses of calcSuite, keys sorted (Android 8.0+, sheet 13).
const calcSorted = `INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=1
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=4
INSTRUMENTATION_STATUS: stream=
com.example.CalcTest:
INSTRUMENTATION_STATUS: test=add
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=1
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=4
INSTRUMENTATION_STATUS: stream=.
INSTRUMENTATION_STATUS: test=add
INSTRUMENTATION_STATUS_CODE: 0
INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=2
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=4
INSTRUMENTATION_STATUS: stream=
INSTRUMENTATION_STATUS: test=subtract
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=2
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=4
INSTRUMENTATION_STATUS: stack=java.lang.AssertionError: expected:<4> but was:<5>
	at org.junit.Assert.fail(Assert.java:89)
	at com.example.CalcTest.subtract(CalcTest.java:21)

INSTRUMENTATION_STATUS: stream=
Error in subtract(com.example.CalcTest):
java.lang.AssertionError: expected:<4> but was:<5>
	at org.junit.Assert.fail(Assert.java:89)
	at com.example.CalcTest.subtract(CalcTest.java:21)

INSTRUMENTATION_STATUS: test=subtract
INSTRUMENTATION_STATUS_CODE: -2
INSTRUMENTATION_STATUS: class=com.example.OtherTest
INSTRUMENTATION_STATUS: current=3
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=4
INSTRUMENTATION_STATUS: stream=
com.example.OtherTest:
INSTRUMENTATION_STATUS: test=skip
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.example.OtherTest
INSTRUMENTATION_STATUS: current=3
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=4
INSTRUMENTATION_STATUS: stream=
INSTRUMENTATION_STATUS: test=skip
INSTRUMENTATION_STATUS_CODE: -3
INSTRUMENTATION_STATUS: class=com.example.OtherTest
INSTRUMENTATION_STATUS: current=4
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=4
INSTRUMENTATION_STATUS: stream=
INSTRUMENTATION_STATUS: test=net[0: a(b), "c"]
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.example.OtherTest
INSTRUMENTATION_STATUS: current=4
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=4
INSTRUMENTATION_STATUS: stack=org.junit.AssumptionViolatedException: no network

INSTRUMENTATION_STATUS: stream=
INSTRUMENTATION_STATUS: test=net[0: a(b), "c"]
INSTRUMENTATION_STATUS_CODE: -4
INSTRUMENTATION_RESULT: stream=

Time: T
There was 1 failure:
1) subtract(com.example.CalcTest)
java.lang.AssertionError: expected:<4> but was:<5>
	at org.junit.Assert.fail(Assert.java:89)
	at com.example.CalcTest.subtract(CalcTest.java:21)

FAILURES!!!
Tests run: 3,  Failures: 1


INSTRUMENTATION_CODE: -1
`

// The first test's statuses in Bundle hash order (before 8.0), through a
// pre-7.0 pty.
const calcHashOrderStart = "INSTRUMENTATION_STATUS: numtests=4\r\n" +
	"INSTRUMENTATION_STATUS: stream=\r\n" +
	"com.example.CalcTest:\r\n" +
	"INSTRUMENTATION_STATUS: id=AndroidJUnitRunner\r\n" +
	"INSTRUMENTATION_STATUS: test=add\r\n" +
	"INSTRUMENTATION_STATUS: class=com.example.CalcTest\r\n" +
	"INSTRUMENTATION_STATUS: current=1\r\n" +
	"INSTRUMENTATION_STATUS_CODE: 1\r\n" +
	"INSTRUMENTATION_STATUS: numtests=4\r\n" +
	"INSTRUMENTATION_STATUS: stream=.\r\n" +
	"INSTRUMENTATION_STATUS: id=AndroidJUnitRunner\r\n" +
	"INSTRUMENTATION_STATUS: test=add\r\n" +
	"INSTRUMENTATION_STATUS: class=com.example.CalcTest\r\n" +
	"INSTRUMENTATION_STATUS: current=1\r\n" +
	"INSTRUMENTATION_STATUS_CODE: 0\r\n" +
	"INSTRUMENTATION_STATUS: numtests=4\r\n" +
	"INSTRUMENTATION_STATUS: stream=\r\n" +
	"INSTRUMENTATION_STATUS: id=AndroidJUnitRunner\r\n" +
	"INSTRUMENTATION_STATUS: test=subtract\r\n" +
	"INSTRUMENTATION_STATUS: class=com.example.CalcTest\r\n" +
	"INSTRUMENTATION_STATUS: current=2\r\n" +
	"INSTRUMENTATION_STATUS_CODE: 1\r\n" +
	"INSTRUMENTATION_STATUS: numtests=4\r\n" +
	"INSTRUMENTATION_STATUS: stream=\r\n" +
	"Error in subtract(com.example.CalcTest):\r\n"

var timeLine = regexp.MustCompile(`Time: [0-9.,]+`)

func suiteDevice(t *testing.T, api int, suites ...Suite) *Device {
	t.Helper()
	d := NewDevice(DeviceConfig{Serial: "sim-runner", API: api})
	t.Cleanup(d.Close)
	for _, s := range suites {
		if err := d.InstallSuite(s); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// shellAll runs cmd through the device's shell: service and reads the
// whole output.
func shellAll(t *testing.T, d *Device, cmd string) string {
	t.Helper()
	c, err := d.OpenService("shell:" + cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(testwait.AtLeast(60 * time.Second)))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("%s: %v after %q", cmd, err, b)
	}
	return string(b)
}

func TestAmInstrumentOutputSorted(t *testing.T) {
	d := suiteDevice(t, 30, calcSuite())
	out := shellAll(t, d, "am instrument -w -r com.example.test/androidx.test.runner.AndroidJUnitRunner")
	if got := timeLine.ReplaceAllString(out, "Time: T"); got != calcSorted {
		t.Fatalf("am instrument -w -r on API 30 printed\n%s\nwant\n%s", got, calcSorted)
	}
	run, err := instrument.ParseAm(strings.NewReader(out))
	if err != nil || len(run.Events) != 8 || run.Result.Code != -1 {
		t.Fatalf("ParseAm: %d events, code %d, %v", len(run.Events), run.Result.Code, err)
	}
	want := []instrument.Outcome{instrument.Passed, instrument.Failed, instrument.Ignored, instrument.AssumptionFailed}
	for i, o := range want {
		if ev := run.Events[2*i+1]; ev.Outcome != o {
			t.Errorf("test %d: outcome %v, want %v", i+1, ev.Outcome, o)
		}
	}
}

func TestAmInstrumentOutputHashOrder(t *testing.T) {
	d := suiteDevice(t, 23, calcSuite())
	out := shellAll(t, d, "am instrument -w -r com.example.test/.runner.Missing")
	if !strings.Contains(out, "INSTRUMENTATION_STATUS: id=ActivityManagerService\r\nINSTRUMENTATION_STATUS: Error=Unable to find instrumentation info for: ComponentInfo{com.example.test/com.example.test.runner.Missing}\r\nINSTRUMENTATION_STATUS_CODE: -1\r\nandroid.util.AndroidException: INSTRUMENTATION_FAILED: com.example.test/com.example.test.runner.Missing\r\n") {
		t.Fatalf("a missing instrumentation on API 23 printed\n%q", out)
	}
	out = shellAll(t, d, "am instrument -w -r com.example.test/androidx.test.runner.AndroidJUnitRunner")
	if !strings.HasPrefix(out, calcHashOrderStart) {
		t.Fatalf("am instrument -w -r on API 23 printed\n%q\nwant it to start with\n%q", out, calcHashOrderStart)
	}
	if !strings.HasSuffix(out, "Tests run: 3,  Failures: 1\r\n\r\n\r\nINSTRUMENTATION_CODE: -1\r\n") {
		t.Fatalf("the result on API 23 ends %q", out[max(0, len(out)-120):])
	}
}
