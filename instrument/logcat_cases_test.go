package instrument

import "strings"

// The text of each case is what logcat prints of AndroidX Test's runner,
// as docs/test-runs.md describes it (facts 1, 2, 3, 4, 6 and 8 of the
// device sheet).

func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// logBrief: Android 4.4, default brief layout over a PTY ("\r\n"), runner
// 1.5 or older (exception in three entries, the trace one entry whose
// lines each get the header).
var logBrief = crlf(`--------- beginning of /dev/log/main
I/TestRunner( 4321): run started: 3 tests
I/TestRunner( 4321): started: add(com.example.CalcTest)
I/art     ( 4321): Background sticky concurrent mark sweep GC freed 1(16B)
I/TestRunner( 4321): finished: add(com.example.CalcTest)
I/TestRunner( 4321): started: subtract(com.example.CalcTest)
E/TestRunner( 4321): failed: subtract(com.example.CalcTest)
E/TestRunner( 4321): ----- begin exception -----
E/TestRunner( 4321): java.lang.AssertionError: expected:<4> but was:<5>
E/TestRunner( 4321): 	at org.junit.Assert.fail(Assert.java:89)
E/TestRunner( 4321): ----- end exception -----
I/TestRunner( 4321): finished: subtract(com.example.CalcTest)
I/TestRunner( 4321): ignored: skipped(com.example.CalcTest)
I/TestRunner( 4321): run finished: 2 tests, 1 failed, 1 ignored
`)

// logTime: Android 5.1, -v time, "\r\n"; parameterised names.
var logTime = crlf(`--------- beginning of main
--------- beginning of system
11-27 06:44:53.123 I/TestRunner( 4321): run started: 1 tests
11-27 06:44:53.130 I/TestRunner( 4321): started: test[0: a(b)](com.example.ParamTest$Inner)
11-27 06:44:53.131 E/TestRunner( 4321): assumption failed: test[0: a(b)](com.example.ParamTest$Inner)
11-27 06:44:53.135 I/TestRunner( 4321): finished: test[0: a(b)](com.example.ParamTest$Inner)
11-27 06:44:53.140 I/TestRunner( 4321): run finished: 1 tests, 0 failed, 0 ignored
`)

// logThreadTime: Android 10, default threadtime, runner 1.6 or newer (one
// entry holds the marker and the trace; the header repeats per line), a
// line of another process under the same tag, and a class-level failure.
const logThreadTime = `--------- beginning of main
11-27 06:44:53.123  4321  4340 I TestRunner: run started: 2 tests
11-27 06:44:53.130  4321  4340 I TestRunner: started: add(com.example.CalcTest)
11-27 06:44:53.131  9999  9999 I TestRunner: started: other(com.other.Test)
11-27 06:44:53.135  4321  4340 E TestRunner: failed: add(com.example.CalcTest)
11-27 06:44:53.135  4321  4340 E TestRunner: ----- begin exception -----
11-27 06:44:53.135  4321  4340 E TestRunner: java.lang.AssertionError: expected:<4> but was:<5>
11-27 06:44:53.135  4321  4340 E TestRunner: 	at org.junit.Assert.fail(Assert.java:89)
11-27 06:44:53.136  4321  4340 E TestRunner: ----- end exception -----
11-27 06:44:53.140  4321  4340 I TestRunner: finished: add(com.example.CalcTest)
11-27 06:44:53.141  4321  4340 E TestRunner: failed: com.example.SetupTest
11-27 06:44:53.150  4321  4340 I TestRunner: run finished: 1 tests, 2 failed, 0 ignored
`

// logModifiers: Android 8.0 and later with -v modifiers.
const logModifiers = `2026-11-27 06:44:53.123456 +0100 10123  4321  4340 I TestRunner: run started: 1 tests
11-27 06:44:53.123456789  4321  4340 I TestRunner: started: add(com.example.CalcTest)
         1795765493.140  4321  4340 I TestRunner: finished: add(com.example.CalcTest)
   345.150 shell  4321  4340 I TestRunner: run finished: 1 tests, 0 failed, 0 ignored
`

// logLong15: -v long, runner 1.5 or older: three entries for the
// exception, each followed by a blank line.
const logLong15 = `--------- beginning of main
[ 11-27 06:44:53.123  4321: 4340 I/TestRunner ]
started: add(com.example.CalcTest)

[ 11-27 06:44:53.135  4321: 4340 E/TestRunner ]
failed: add(com.example.CalcTest)

[ 11-27 06:44:53.135  4321: 4340 E/TestRunner ]
----- begin exception -----

[ 11-27 06:44:53.135  4321: 4340 E/TestRunner ]
java.lang.AssertionError: expected:<4> but was:<5>
	at org.junit.Assert.fail(Assert.java:89)


[ 11-27 06:44:53.136  4321: 4340 E/TestRunner ]
----- end exception -----

[ 11-27 06:44:53.140  4321: 4340 I/TestRunner ]
finished: add(com.example.CalcTest)

`

// logLong16: -v long, runner 1.6 or newer: one entry holds the marker and
// the trace (which ends with "\n").
const logLong16 = `[ 11-27 06:44:53.135  4321: 4340 E/TestRunner ]
failed: add(com.example.CalcTest)

[ 11-27 06:44:53.135  4321: 4340 E/TestRunner ]
----- begin exception -----
java.lang.AssertionError: expected:<4> but was:<5>
	at org.junit.Assert.fail(Assert.java:89)


[ 11-27 06:44:53.136  4321: 4340 E/TestRunner ]
----- end exception -----

`

var logSeeds = []string{logBrief, logTime, logThreadTime, logModifiers, logLong15, logLong16}
