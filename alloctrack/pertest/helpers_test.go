package pertest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
)

// item is one allocation of a scripted report, in allocation order.
type item struct {
	marker string // a LogRunListener method: the record is a marker
	own    bool   // a record of another class of the listener package
	size   uint32
	thread uint16
	class  string
	fn     string // the app method that allocated it
}

const (
	instrThread = 1
	lrl         = "Landroidx/test/internal/runner/listener/LogRunListener;"
	lrlSupport  = "Landroid/support/test/internal/runner/listener/LogRunListener;"
	printer     = "Landroidx/test/internal/runner/listener/InstrumentationResultPrinter;"
)

// mark is the marker group LogRunListener.method allocates: the
// StringBuilder, its grown char[] and the String, on the instrumentation
// thread (the char[] deep in StringBuilder's frames), then the status
// printer's Bundle (the runner's own too).
func mark(method string) []item {
	return []item{
		{marker: method, size: 16, thread: instrThread, class: "Ljava/lang/StringBuilder;"},
		{marker: method, size: 56, thread: instrThread, class: "[C"},
		{marker: method, size: 40, thread: instrThread, class: "Ljava/lang/String;"},
		{own: true, size: 32, thread: instrThread, class: "Landroid/os/Bundle;"},
	}
}

// app is n allocations of size bytes of class by fn on thread.
func app(n int, size uint32, thread uint16, class, fn string) []item {
	out := make([]item, n)
	for i := range out {
		out[i] = item{size: size, thread: thread, class: class, fn: fn}
	}
	return out
}

func script(parts ...[]item) []item { return slices.Concat(parts...) }

// frames of an item, top first.
func (it item) frames() []allocreport.FrameName {
	switch {
	case it.marker != "" && it.class == "[C":
		return []allocreport.FrameName{
			{Class: "Ljava/lang/AbstractStringBuilder;", Method: "enlargeBuffer", File: "AbstractStringBuilder.java", Line: 94},
			{Class: "Ljava/lang/AbstractStringBuilder;", Method: "append0", File: "AbstractStringBuilder.java", Line: 145},
			{Class: "Ljava/lang/StringBuilder;", Method: "append", File: "StringBuilder.java", Line: 216},
			{Class: lrl, Method: it.marker, File: "LogRunListener.java", Line: 51},
			{Class: "Lorg/junit/runner/notification/RunNotifier$3;", Method: "notifyListener", File: "RunNotifier.java", Line: 121},
		}
	case it.marker != "":
		return []allocreport.FrameName{
			{Class: lrl, Method: it.marker, File: "LogRunListener.java", Line: 51},
			{Class: "Lorg/junit/runner/notification/RunNotifier$3;", Method: "notifyListener", File: "RunNotifier.java", Line: 121},
		}
	case it.own:
		return []allocreport.FrameName{
			{Class: "Landroid/os/Bundle;", Method: "<init>", File: "Bundle.java", Line: 80},
			{Class: printer, Method: "testStarted", File: "InstrumentationResultPrinter.java", Line: 124},
		}
	}
	return []allocreport.FrameName{
		{Class: "Lcom/example/Work;", Method: it.fn, File: "Work.java", Line: 7},
		{Class: "Lcom/example/WorkTest;", Method: "test", File: "WorkTest.java", Line: 20},
	}
}

// reportOf builds the report a VM of api sends for items (given in
// allocation order): oldest first before API 24, newest first from it.
func reportOf(t testing.TB, api int, items []item) *allocreport.Report {
	t.Helper()
	return reportCut(t, api, items, 0)
}

// reportCut is reportOf with every stack cut to depth frames (0: none),
// as a VM recording depth frames does.
func reportCut(t testing.TB, api int, items []item, depth int) *allocreport.Report {
	t.Helper()
	b := allocreport.NewBuilder()
	order := slices.Clone(items)
	if api >= 24 {
		slices.Reverse(order)
	}
	for _, it := range order {
		fr := it.frames()
		if depth > 0 && len(fr) > depth {
			fr = fr[:depth]
		}
		b.Add(it.size, it.thread, it.class, fr)
	}
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// count is the allocations and bytes of the app records of items.
func count(items []item) (n, bytes uint64) {
	for _, it := range items {
		if it.marker == "" && !it.own {
			n++
			bytes += uint64(it.size)
		}
	}
	return n, bytes
}

// all is the allocations and bytes of every record of items.
func all(items []item) (n, bytes uint64) {
	for _, it := range items {
		n++
		bytes += uint64(it.size)
	}
	return n, bytes
}

var t0 = time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func runnerEv(kind instrument.RunnerKind, name string) instrument.RunnerEvent {
	ev := instrument.RunnerEvent{Kind: kind, Name: name}
	ev.Class, ev.Method, _ = instrument.SplitName(name)
	return ev
}

func runStarted(n int) instrument.RunnerEvent {
	return instrument.RunnerEvent{Kind: instrument.RunStarted, Tests: n}
}

func runFinished(n int) instrument.RunnerEvent {
	return instrument.RunnerEvent{Kind: instrument.RunFinished, Tests: n}
}

// feedTests feeds started:/finished: of names to pid, 100 ms apart.
func feedTests(a *Attributor, pid int, ms int, names ...string) int {
	for _, n := range names {
		a.Event(pid, at(ms), runnerEv(instrument.TestStarted, n))
		a.Event(pid, at(ms+50), runnerEv(instrument.TestFinished, n))
		ms += 100
	}
	return ms
}

func test(t testing.TB, r *Run, name string) *Test {
	t.Helper()
	for i := range r.Tests {
		if r.Tests[i].Name == name {
			return &r.Tests[i]
		}
	}
	t.Fatalf("no test %q in %v", name, names(r))
	return nil
}

func names(r *Run) []string {
	var out []string
	for _, t := range r.Tests {
		out = append(out, t.Name)
	}
	return out
}

func wantFigures(t testing.TB, what string, f Figures, n, bytes uint64) {
	t.Helper()
	if f.Allocations != n || f.Bytes != bytes {
		t.Errorf("%s: %d allocations, %d bytes; want %d, %d", what, f.Allocations, f.Bytes, n, bytes)
	}
}

// checkSum fails unless Total is the tests' and Between's sum.
func checkSum(t testing.TB, r *Run) {
	t.Helper()
	n, b := r.Between.Allocations+r.DroppedSum.Allocations, r.Between.Bytes+r.DroppedSum.Bytes
	for _, tt := range r.Tests {
		n += tt.Allocations
		b += tt.Bytes
	}
	if n != r.Total.Allocations || b != r.Total.Bytes {
		t.Errorf("tests + between = %d, %d; total %d, %d", n, b, r.Total.Allocations, r.Total.Bytes)
	}
	for _, p := range r.Problems {
		if strings.HasPrefix(p, "internal") {
			t.Error(p)
		}
	}
}

func hasNote(t *Test, prefix string) bool {
	for _, n := range t.Notes {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

func hasProblem(r *Run, sub string) bool {
	for _, p := range r.Problems {
		if strings.Contains(p, sub) {
			return true
		}
	}
	return false
}

func newDDM(api int) *Attributor {
	return New(Config{Serial: "emulator-5554", Package: "com.example", API: api, Backend: alloctrack.BackendDDM, Top: 3})
}

func (it item) String() string {
	if it.marker != "" {
		return "M:" + it.marker
	}
	return fmt.Sprintf("%s/%d", it.fn, it.size)
}
