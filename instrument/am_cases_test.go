package instrument

// The text of each case is what `am instrument -w -r` prints, as
// docs/test-runs.md describes it (facts 11, 13 and 14 of the device sheet).

// amSorted: Android 8.0+ (keys sorted), one test passes, one fails.
const amSorted = `INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=1
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=2
INSTRUMENTATION_STATUS: stream=
com.example.CalcTest:
INSTRUMENTATION_STATUS: test=add
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=1
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=2
INSTRUMENTATION_STATUS: stream=.
INSTRUMENTATION_STATUS: test=add
INSTRUMENTATION_STATUS_CODE: 0
INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=2
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=2
INSTRUMENTATION_STATUS: stream=
INSTRUMENTATION_STATUS: test=subtract
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=2
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=2
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
INSTRUMENTATION_RESULT: stream=

Time: 0.052
There was 1 failure:
1) subtract(com.example.CalcTest)
java.lang.AssertionError: expected:<4> but was:<5>
	at org.junit.Assert.fail(Assert.java:89)
	at com.example.CalcTest.subtract(CalcTest.java:21)

FAILURES!!!
Tests run: 2,  Failures: 1


INSTRUMENTATION_CODE: -1
`

const calcStack = "java.lang.AssertionError: expected:<4> but was:<5>\n" +
	"\tat org.junit.Assert.fail(Assert.java:89)\n" +
	"\tat com.example.CalcTest.subtract(CalcTest.java:21)\n"

// amHashOrder: Android 6.0 (keys in Bundle hash order, "\r\n" from the
// PTY): an ignored test, an assumption failure, an in-progress status.
const amHashOrder = "INSTRUMENTATION_STATUS: numtests=2\r\n" +
	"INSTRUMENTATION_STATUS: stream=\r\n" +
	"com.example.Slow$Inner:\r\n" +
	"INSTRUMENTATION_STATUS: id=AndroidJUnitRunner\r\n" +
	"INSTRUMENTATION_STATUS: test=skipped\r\n" +
	"INSTRUMENTATION_STATUS: class=com.example.Slow$Inner\r\n" +
	"INSTRUMENTATION_STATUS: current=1\r\n" +
	"INSTRUMENTATION_STATUS_CODE: 1\r\n" +
	"INSTRUMENTATION_STATUS: numtests=2\r\n" +
	"INSTRUMENTATION_STATUS: stream=\r\n" +
	"INSTRUMENTATION_STATUS: id=AndroidJUnitRunner\r\n" +
	"INSTRUMENTATION_STATUS: test=skipped\r\n" +
	"INSTRUMENTATION_STATUS: class=com.example.Slow$Inner\r\n" +
	"INSTRUMENTATION_STATUS: current=1\r\n" +
	"INSTRUMENTATION_STATUS_CODE: -3\r\n" +
	"INSTRUMENTATION_STATUS: numtests=2\r\n" +
	"INSTRUMENTATION_STATUS: stream=\r\n" +
	"INSTRUMENTATION_STATUS: id=AndroidJUnitRunner\r\n" +
	"INSTRUMENTATION_STATUS: test=test[0: a=b, \"x\"](y)\r\n" +
	"INSTRUMENTATION_STATUS: class=com.example.Slow$Inner\r\n" +
	"INSTRUMENTATION_STATUS: current=2\r\n" +
	"INSTRUMENTATION_STATUS_CODE: 1\r\n" +
	"INSTRUMENTATION_STATUS: stream=working\r\n" +
	"INSTRUMENTATION_STATUS_CODE: 2\r\n" +
	"INSTRUMENTATION_STATUS: numtests=2\r\n" +
	"INSTRUMENTATION_STATUS: stream=\r\n" +
	"INSTRUMENTATION_STATUS: id=AndroidJUnitRunner\r\n" +
	"INSTRUMENTATION_STATUS: test=test[0: a=b, \"x\"](y)\r\n" +
	"INSTRUMENTATION_STATUS: class=com.example.Slow$Inner\r\n" +
	"INSTRUMENTATION_STATUS: stack=org.junit.AssumptionViolatedException: no network\r\n" +
	"\r\n" +
	"INSTRUMENTATION_STATUS: current=2\r\n" +
	"INSTRUMENTATION_STATUS_CODE: -4\r\n" +
	"INSTRUMENTATION_RESULT: stream=\r\n" +
	"\r\n" +
	"Time: 1.003\r\n" +
	"\r\n" +
	"OK (1 test)\r\n" +
	"\r\n" +
	"\r\n" +
	"INSTRUMENTATION_CODE: -1\r\n"

// amCrash: the test's process crashes (fact 11).
const amCrash = `INSTRUMENTATION_STATUS: class=com.example.CrashTest
INSTRUMENTATION_STATUS: current=1
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=3
INSTRUMENTATION_STATUS: stream=
com.example.CrashTest:
INSTRUMENTATION_STATUS: test=boom
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.example.CrashTest
INSTRUMENTATION_STATUS: current=1
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=3
INSTRUMENTATION_STATUS: stack=java.lang.IllegalStateException: boom
	at com.example.CrashTest.lambda$boom$0(CrashTest.java:14)

INSTRUMENTATION_STATUS: stream=
Process crashed while executing boom(com.example.CrashTest):
java.lang.IllegalStateException: boom
	at com.example.CrashTest.lambda$boom$0(CrashTest.java:14)

INSTRUMENTATION_STATUS: test=boom
INSTRUMENTATION_STATUS_CODE: -2
INSTRUMENTATION_RESULT: shortMsg=Process crashed.
INSTRUMENTATION_CODE: 0
`

// amMissing: the instrumentation is not installed (fact 14); on a pre-7.0
// PTY the stderr exception arrives merged into the same stream.
const amMissing = "INSTRUMENTATION_STATUS: id=ActivityManagerService\r\n" +
	"INSTRUMENTATION_STATUS: Error=Unable to find instrumentation info for: ComponentInfo{com.example.test/androidx.test.runner.AndroidJUnitRunner}\r\n" +
	"INSTRUMENTATION_STATUS_CODE: -1\r\n" +
	"android.util.AndroidException: INSTRUMENTATION_FAILED: com.example.test/androidx.test.runner.AndroidJUnitRunner\r\n" +
	"\tat com.android.commands.am.Am.runInstrument(Am.java:1093)\r\n"

// amCut: the device went away during the second test.
const amCut = `INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=1
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=2
INSTRUMENTATION_STATUS: stream=
com.example.CalcTest:
INSTRUMENTATION_STATUS: test=add
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=1
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=2
INSTRUMENTATION_STATUS: stream=.
INSTRUMENTATION_STATUS: test=add
INSTRUMENTATION_STATUS_CODE: 0
INSTRUMENTATION_STATUS: class=com.example.CalcTest
INSTRUMENTATION_STATUS: current=2
INSTRUMENTATION_STATUS: id=AndroidJUnitRunner
INSTRUMENTATION_STATUS: numtests=2
INSTRUMENTATION_STATUS: stream=
INSTRUMENTATION_STATUS: test=subtract
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.exa`

var amSeeds = []string{amSorted, amHashOrder, amCrash, amMissing, amCut}
