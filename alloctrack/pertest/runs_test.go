package pertest_test

import (
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// fakeSites is a window source over given sites.
type fakeSites []alloctrack.SiteInfo

func (f fakeSites) SiteInfo(i, _ int) alloctrack.SiteInfo { return f[i] }
func (f fakeSites) Threads() []alloctrack.ThreadDelta     { return nil }
func (f fakeSites) Release()                              {}

// site is one site of a tally: class, frames and what it allocated.
type site struct {
	class  string
	frames []alloctrack.Frame
	n, b   uint64
}

// tallyOf counts sites exactly (DDM), or as samples with estimates of
// twice as much (heapprofd) when sampled.
func tallyOf(sampled bool, sites ...site) *alloctrack.Tally {
	w := &alloctrack.Window{}
	var infos fakeSites
	if sampled {
		w.Sampling = &alloctrack.Sampling{Interval: 4096}
	}
	for i, s := range sites {
		infos = append(infos, alloctrack.SiteInfo{Class: s.class, Frames: s.frames, Heapprofd: sampled})
		c := alloctrack.Count{Allocations: s.n, Bytes: s.b}
		est := alloctrack.Estimate{Allocations: float64(2 * s.n), Bytes: float64(2 * s.b)}
		w.Sites = append(w.Sites, alloctrack.SiteDelta{Hash: alloctrack.SiteHashNames(s.class, s.frames) + uint64(i), Count: c, Estimated: est})
		w.Total = w.Total.Plus(c)
		w.Estimated = w.Estimated.Plus(est)
		if !sampled {
			w.Classes = append(w.Classes, alloctrack.ClassDelta{Class: s.class, Count: c})
		}
	}
	w.Source = infos
	t := alloctrack.NewTally()
	t.Add(w)
	return t
}

func fr(class, method, file string, line int) alloctrack.Frame {
	return alloctrack.Frame{Class: class, Method: method, File: file, Line: line}
}

var t0 = time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)

// sampleRun is a DDM run with one test of each outcome, names with
// characters XML must escape or cannot hold, and tallies.
func sampleRun() *pertest.Run {
	test := func(name, class, method string, o pertest.Outcome, secs float64, n, b uint64) pertest.Test {
		return pertest.Test{Name: name, Class: class, Method: method, Outcome: o, PID: 4242,
			Start: t0, End: t0.Add(time.Duration(secs * float64(time.Second))), DurationSeconds: secs,
			Figures: pertest.Figures{Allocations: n, Bytes: b}}
	}
	run := &pertest.Run{Serial: "emulator-5554", API: 29, Package: "com.example.app",
		Instrumentation: "com.example.app.test/androidx.test.runner.AndroidJUnitRunner", Backend: alloctrack.BackendDDM,
		Boundary: "exact: the runner's own allocations mark each test's start and end", Complete: true, Expected: 8}
	pass := test("testOpen(com.example.MainTest)", "com.example.MainTest", "testOpen", pertest.Passed, 1.25, 120, 4800)
	pass.TopClasses = []pertest.Class{{Class: "byte[]", Allocations: 20, Bytes: 4000}, {Class: "java.lang.String", Allocations: 100, Bytes: 800}}
	pass.Tally = tallyOf(false,
		site{"byte[]", []alloctrack.Frame{fr("com.example.Main", "open", "Main.java", 12), fr("com.example.MainTest", "testOpen", "MainTest.java", 30)}, 20, 4000},
		site{"java.lang.String", []alloctrack.Frame{fr("java.lang.StringBuilder", "toString", "", -1), fr("com.example.Main", "name", "Main.java", -2)}, 100, 800})
	fail := test("testSave(com.example.MainTest)", "com.example.MainTest", "testSave", pertest.Failed, 0.5, 10, 640)
	fail.Failure = "java.lang.AssertionError: expected:<1> but was:<2>\n\tat org.junit.Assert.fail(Assert.java:89)\n"
	errd := test("testLoad(com.example.MainTest)", "com.example.MainTest", "testLoad", pertest.Errored, 0.25, 3, 96)
	errd.Failure = "java.lang.IllegalStateException: no disk\n\tat com.example.Main.load(Main.java:40)\n"
	ign := test("testLater(com.example.OtherTest)", "com.example.OtherTest", "testLater", pertest.Ignored, 0, 0, 0)
	assume := test("testWifi(com.example.OtherTest)", "com.example.OtherTest", "testWifi", pertest.AssumptionFailed, 0.01, 1, 16)
	assume.Failure = "org.junit.AssumptionViolatedException: got: <false>, expected: is <true>\n"
	odd := test("test[0: <a&b> \"q\" 'x' \x01\ufffe](com.example.Param$Inner)", "com.example.Param$Inner", "test[0: <a&b> \"q\" 'x' \x01\ufffe]", pertest.Passed, 2, 7, 700)
	crash := test("testCrash(com.example.OtherTest)", "com.example.OtherTest", "testCrash", pertest.Crashed, 0.75, 50, 5000)
	crash.Partial, crash.Notes = true, []string{"its process died before the test's end was reported: what was collected is kept"}
	crash.Failure = "Process crashed while executing testCrash(com.example.OtherTest)\n"
	cut := test("testHang(com.example.OtherTest)", "com.example.OtherTest", "testHang", pertest.Unfinished, 3, 9, 900)
	cut.Partial, cut.Notes = true, []string{"the run ended before the test did"}
	run.Tests = []pertest.Test{pass, fail, errd, ign, assume, odd, crash, cut}
	run.Between = pertest.Figures{Allocations: 1000, Bytes: 64000}
	for _, t := range run.Tests {
		run.Total.Allocations += t.Allocations
		run.Total.Bytes += t.Bytes
	}
	run.Total.Allocations += run.Between.Allocations
	run.Total.Bytes += run.Between.Bytes
	return run
}
