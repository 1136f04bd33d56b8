package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// The runner's listener calls, in the order of their sites.
const (
	callRunStarted = iota
	callStarted
	callFinished
	callFailure
	callAssumption
	callIgnored
	callRunFinished
	nCalls
)

var listenerCalls = [nCalls]struct{ method, notifier, fire string }{
	{"testRunStarted", "RunNotifier$1", "fireTestRunStarted"},
	{"testStarted", "RunNotifier$3", "fireTestStarted"},
	{"testFinished", "RunNotifier$7", "fireTestFinished"},
	{"testFailure", "RunNotifier$4", "fireTestFailure"},
	{"testAssumptionFailure", "RunNotifier$5", "fireTestAssumptionFailed"},
	{"testIgnored", "RunNotifier$6", "fireTestIgnored"},
	{"testRunFinished", "RunNotifier$2", "fireTestRunFinished"},
}

// Sites per listener call: LogRunListener's StringBuilder, its first
// array, the array it grows to, the String; the status printer's Bundle
// and its ArrayMap's array.
const (
	siteSB = iota
	siteArrInit
	siteArrGrow
	siteString
	siteBundle
	siteBundleArr
	sitesPerCall
)

// listenerPackage is where a runner's listeners live: androidx's or the
// older support library's.
func listenerPackage(runner string) string {
	if strings.HasPrefix(runner, "android.support.test.") {
		return "android/support/test/internal/runner/listener"
	}
	return "androidx/test/internal/runner/listener"
}

// runnerBottom are the frames below a listener's notifier: JUnit's run
// and the runner on its instrumentation thread.
func runnerBottom(runner string) []allocreport.FrameName {
	r := "L" + strings.ReplaceAll(runner, ".", "/") + ";"
	return []allocreport.FrameName{
		{Class: "Lorg/junit/runner/notification/RunNotifier$SafeNotifier;", Method: "run", File: "RunNotifier.java", Line: 72},
		{Class: "Lorg/junit/runners/ParentRunner;", Method: "run", File: "ParentRunner.java", Line: 413},
		{Class: "Lorg/junit/runner/JUnitCore;", Method: "run", File: "JUnitCore.java", Line: 137},
		{Class: "Landroidx/test/internal/runner/TestExecutor;", Method: "execute", File: "TestExecutor.java", Line: 67},
		{Class: r, Method: "onStart", File: "AndroidJUnitRunner.java", Line: 444},
		{Class: "Landroid/app/Instrumentation$InstrumentationThread;", Method: "run", File: "Instrumentation.java", Line: 2205},
	}
}

// listenerSites are the named sites of the runner's listeners, sitesPerCall
// per call, for a VM at api (arrays are char[] before Android 14, byte[]
// from then on: a model choice, see docs/test-runs.md).
func listenerSites(runner string, api int) []NamedSite {
	pkg := listenerPackage(runner)
	arr := "[C"
	if api >= 34 {
		arr = "[B"
	}
	f := func(cls, m, file string, line int16) allocreport.FrameName {
		return allocreport.FrameName{Class: cls, Method: m, File: file, Line: line}
	}
	sb, asb := "Ljava/lang/StringBuilder;", "Ljava/lang/AbstractStringBuilder;"
	var out []NamedSite
	for i, c := range listenerCalls {
		below := append([]allocreport.FrameName{
			f("Lorg/junit/runner/notification/"+c.notifier+";", "notifyListener", "RunNotifier.java", int16(100+i)),
		}, runnerBottom(runner)...)
		log := append([]allocreport.FrameName{f("L"+pkg+"/LogRunListener;", c.method, "LogRunListener.java", int16(40+5*i))}, below...)
		prn := append([]allocreport.FrameName{f("L"+pkg+"/InstrumentationResultPrinter;", c.method, "InstrumentationResultPrinter.java", int16(120+9*i))}, below...)
		bundle := []allocreport.FrameName{f("Landroid/os/Bundle;", "<init>", "Bundle.java", 138)}
		out = append(out,
			NamedSite{sb, append([]allocreport.FrameName{f(sb, "<init>", "StringBuilder.java", 92)}, log...)},
			NamedSite{arr, append([]allocreport.FrameName{f(asb, "<init>", "AbstractStringBuilder.java", 68), f(sb, "<init>", "StringBuilder.java", 92)}, log...)},
			NamedSite{arr, append([]allocreport.FrameName{f("Ljava/util/Arrays;", "copyOf", "Arrays.java", 3260), f(asb, "ensureCapacityInternal", "AbstractStringBuilder.java", 125), f(asb, "append", "AbstractStringBuilder.java", 451), f(sb, "append", "StringBuilder.java", 137)}, log...)},
			NamedSite{"Ljava/lang/String;", append([]allocreport.FrameName{f(sb, "toString", "StringBuilder.java", 413)}, log...)},
			NamedSite{"Landroid/os/Bundle;", append(bundle, prn...)},
			NamedSite{"[Ljava/lang/Object;", append([]allocreport.FrameName{f("Landroid/util/ArrayMap;", "allocArrays", "ArrayMap.java", 187), f("Landroid/os/BaseBundle;", "<init>", "BaseBundle.java", 161)}, append(bundle, prn...)...)},
		)
	}
	return out
}

// testProc is a process of a test run: the target's fresh VM, its
// instrumentation thread, and the sites its runner and tests allocate at.
type testProc struct {
	d     *Device
	vm    *VM
	truth *segTruth
	suite *Suite
	tid   int            // the instrumentation thread ("Instr: RUNNER")
	sites map[[2]int]int // (test, alloc) -> named site
	api   int
	wide  bool // arrays of 2-byte chars
}

// instrTIDOffset places the instrumentation thread after the threads a
// process starts first.
const instrTIDOffset = 17

// newPID returns a pid no process of the device has, above every pid it
// had: a fresh process's.
func (d *Device) newPID() int {
	d.tests.mu.Lock()
	defer d.tests.mu.Unlock()
	next := max(d.tests.nextPID, 20000)
	for _, vm := range d.VMs() {
		next = max(next, vm.PID())
	}
	d.mu.Lock()
	for pid := range d.procs {
		next = max(next, pid)
	}
	d.mu.Unlock()
	d.tests.nextPID = next + 11
	return d.tests.nextPID
}

// forceStop kills every process of pkg, as am force-stop does.
func (d *Device) forceStop(pkg string) {
	for _, vm := range d.VMs() {
		if vm.ProcessName() == pkg {
			vm.Kill()
			d.RemoveVM(vm.PID())
		}
	}
}

// startTestProc starts a fresh process of s's target running s's runner.
func (d *Device) startTestProc(s *Suite) *testProc {
	api := d.cfg.API
	named := listenerSites(s.Runner, api)
	p := &testProc{d: d, suite: s, api: api, wide: api < 34, sites: map[[2]int]int{}}
	for i := range s.Tests {
		t := &s.Tests[i]
		for j, a := range t.Allocs {
			p.sites[[2]int{i, j}] = len(named)
			named = append(named, testSite(t, a))
		}
	}
	pid := d.newPID()
	p.tid = pid + instrTIDOffset
	p.vm = NewVM(AppConfig{PID: pid, Package: s.Target, Workload: Workload{Rate: 0, Sites: 8, Seed: uint64(pid)},
		MaxEntries: RecentRecords(api, d.Props()), Sites: named}, api)
	p.truth = newSegTruth(p.vm)
	p.truth.suite = s
	p.vm.mu.Lock()
	p.vm.run = p.truth
	p.vm.mu.Unlock()
	d.tests.mu.Lock()
	hook := d.tests.onStart
	d.tests.mu.Unlock()
	if hook != nil {
		hook(p.vm)
	}
	d.AddVM(p.vm)
	return p
}

// reuseTestProc takes the target's running process (am instrument
// --no-restart) if this simulator started it for s's runner, or nil.
func (d *Device) reuseTestProc(s *Suite) *testProc {
	for _, vm := range d.VMs() {
		vm.mu.Lock()
		t := vm.run
		vm.mu.Unlock()
		if vm.ProcessName() != s.Target || !vm.Alive() || t == nil || t.suite != s {
			continue
		}
		p := &testProc{d: d, suite: s, api: d.cfg.API, wide: d.cfg.API < 34, sites: map[[2]int]int{}, vm: vm, truth: t, tid: vm.PID() + instrTIDOffset}
		n := nCalls * sitesPerCall
		for i := range s.Tests {
			for j := range s.Tests[i].Allocs {
				p.sites[[2]int{i, j}] = n
				n++
			}
		}
		return p
	}
	return nil
}

// stop force-stops the process. Its VM's tracker ring is freed (a run's
// processes stay referenced by its truth).
func (p *testProc) stop() {
	p.d.tests.mu.Lock()
	hook := p.d.tests.onStop
	p.d.tests.mu.Unlock()
	if hook != nil {
		hook(p.vm)
	}
	p.vm.Kill()
	p.d.RemoveVM(p.vm.PID())
	p.vm.mu.Lock()
	p.vm.ring, p.vm.head, p.vm.n = make([]record, 1), 0, 0
	p.vm.mu.Unlock()
}

func (p *testProc) alive() bool { return p.vm.Alive() }

// log logs one entry of the instrumentation thread.
func (p *testProc) log(prio byte, tag, msg string) time.Time {
	return p.logBuf(prio, tag, msg, "main", p.tid)
}

// logLost logs one runner entry of the instrumentation thread, unless
// lost (SuiteTest.LoseStarted, LoseFinished): then logcat never shows it.
func (p *testProc) logLost(lost bool, msg string) time.Time {
	if lost {
		return time.Now()
	}
	return p.log('I', tagRunner, msg)
}

// logBuf logs one entry to buffer buf and returns its time.
func (p *testProc) logBuf(prio byte, tag, msg, buf string, tid int) time.Time {
	pid, now := p.vm.PID(), time.Now()
	p.d.Log(LogEntry{Time: now, PID: pid, TID: tid, UID: 10000 + pid%100, Priority: prio, Tag: tag, Msg: msg, Buffer: buf})
	return now
}

// reportThread is the instrumentation thread as a report names it: its
// VM thread id before Android 7.0, its tid (cut to 16 bits) from then on.
func (p *testProc) reportThread() uint16 {
	if p.api < 24 {
		return 13
	}
	return uint16(p.tid)
}

// arrBytes is the size of an array of n chars (or bytes from Android 14).
func (p *testProc) arrBytes(n int) uint32 {
	if p.wide {
		n *= 2
	}
	return uint32(16+n+7) &^ 7
}

// listener makes LogRunListener's allocations for call: "prefix" + name
// built in a StringBuilder (its array grown as the text needs), then the
// String. It returns the text.
func (p *testProc) listener(call int, text string) string {
	base := call * sitesPerCall
	th := p.reportThread()
	p.vm.AllocateAt(base+siteSB, 24, 1, th)
	p.vm.AllocateAt(base+siteArrInit, p.arrBytes(16), 1, th)
	for c := 16; c < len(text); {
		c = c*2 + 2
		p.vm.AllocateAt(base+siteArrGrow, p.arrBytes(c), 1, th)
	}
	p.vm.AllocateAt(base+siteString, p.arrBytes(len(text)), 1, th)
	return text
}

// printer makes the status printer's allocations for call: a Bundle and
// its map's array.
func (p *testProc) printer(call int) {
	base := call * sitesPerCall
	th := p.reportThread()
	p.vm.AllocateAt(base+siteBundle, 32, 1, th)
	p.vm.AllocateAt(base+siteBundleArr, 48, 1, th)
}

// body runs test i's body, steps of it from first to last (exclusive),
// spread over its duration; false if the process died meanwhile.
func (p *testProc) body(i int, first, last int) bool {
	t := &p.suite.Tests[i]
	steps := stepsOf(t)
	th := p.reportThread()
	for k := first; k < last; k++ {
		if !p.alive() {
			return false
		}
		for j, a := range t.Allocs {
			n := a.Count*(k+1)/steps - a.Count*k/steps
			p.vm.AllocateAt(p.sites[[2]int{i, j}], a.Size, n, th)
		}
		if !p.sleep(t.Duration / time.Duration(steps)) {
			return false
		}
	}
	return p.alive()
}

func stepsOf(t *SuiteTest) int {
	if t.Steps <= 0 {
		return 4
	}
	return t.Steps
}

// sleep waits d on the device, false if the process died meanwhile.
func (p *testProc) sleep(d time.Duration) bool {
	if d <= 0 {
		return p.alive()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.vm.killed:
		return false
	}
}

// AllocateAt makes n allocations of size bytes each at named site i
// (AppConfig.Sites), on the thread a report shows as thread, now.
func (vm *VM) AllocateAt(i int, size uint32, n int, thread uint16) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if !vm.alive || n <= 0 {
		return
	}
	si := vm.prog.work + i
	if i < 0 || si >= len(vm.prog.sites) {
		panic(fmt.Sprintf("sim: AllocateAt: no named site %d", i))
	}
	vm.advanceLocked(time.Now())
	vm.stats.Allocations += uint64(n)
	sampling := vm.hp != nil && vm.hp.on
	for range n {
		vm.recordLocked(uint32(si), size, thread, sampling, vm.last)
	}
}
