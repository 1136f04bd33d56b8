package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

// trackFromStart turns each fresh test process's tracker on before it
// runs anything, as a host that found it at once.
func trackFromStart(d *Device) {
	d.tests.mu.Lock()
	d.tests.onStart = func(vm *VM) {
		vm.mu.Lock()
		vm.setTrackingLocked(true)
		vm.mu.Unlock()
	}
	d.tests.mu.Unlock()
}

// reportAtStop keeps the report each test process would send just
// before am stops it (the last a host could take), by pid.
func reportAtStop(d *Device) map[int][]byte {
	reports := map[int][]byte{}
	d.tests.mu.Lock()
	d.tests.onStop = func(vm *VM) {
		vm.mu.Lock()
		reports[vm.PID()] = vm.reportLocked()
		vm.mu.Unlock()
	}
	d.tests.mu.Unlock()
	return reports
}

func parseReport(t *testing.T, b []byte) *allocreport.Report {
	t.Helper()
	r, err := allocreport.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const listenerPkg = "androidx.test.internal.runner.listener."

// listenerCall is the LogRunListener method in a record's stack, and
// whether the record is the runner's own (a frame of its listeners).
func listenerCall(r *allocreport.Report, a *allocreport.Allocation) (call string, own bool) {
	for _, f := range r.Stack(a).Frames() {
		cls := r.Classes[f.Class]
		if cls == listenerPkg+"LogRunListener" && call == "" {
			call = r.Methods[f.Method]
		}
		own = own || strings.HasPrefix(cls, listenerPkg)
	}
	return call, own
}

// attribute splits a report's records (oldest first) by the markers as
// the shared design does: the calls' sequence (runs collapsed), each
// test's records and the rest.
func attribute(r *allocreport.Report, newestFirst bool) (calls []string, tests []alloctrack.Count, between alloctrack.Count) {
	order := make([]int, len(r.Allocations))
	for i := range order {
		order[i] = i
	}
	if newestFirst {
		slices.Reverse(order)
	}
	in, last := false, ""
	for _, i := range order {
		a := &r.Allocations[i]
		call, own := listenerCall(r, a)
		if call != "" && call != last {
			calls = append(calls, call)
			switch call {
			case "testStarted":
				in = true
				tests = append(tests, alloctrack.Count{})
			case "testFinished":
				in = false
			}
		}
		if call != "" {
			last = call
		}
		if in && !own {
			tests[len(tests)-1].Allocations++
			tests[len(tests)-1].Bytes += uint64(a.Size)
			continue
		}
		between.Allocations++
		between.Bytes += uint64(a.Size)
	}
	return calls, tests, between
}

func TestInstrumentMarkersInReport(t *testing.T) {
	for _, api := range []int{19, 23, 29} {
		t.Run(fmt.Sprint("API", api), func(t *testing.T) {
			s := calcSuite()
			s.Tests[3].Allocs = []TestAlloc{{Class: "[I", Size: 40, Count: 7, Line: 9}}
			d := suiteDevice(t, api, s)
			trackFromStart(d)
			reports := reportAtStop(d)
			shellAll(t, d, "am instrument -w -r com.example.test/androidx.test.runner.AndroidJUnitRunner")
			rt, _ := d.RunTruth(-1)
			r := parseReport(t, reports[rt.PIDs[0]])
			calls, tests, between := attribute(r, api >= 24)
			want := []string{"testRunStarted", "testStarted", "testFinished", "testStarted", "testFailure", "testFinished",
				"testIgnored", "testStarted", "testAssumptionFailure", "testFinished", "testRunFinished"}
			if !slices.Equal(calls, want) {
				t.Fatalf("listener calls in the report: %v, want %v", calls, want)
			}
			ran := []int{0, 1, 3} // the ignored test has no markers of its own
			for k, i := range ran {
				if got, w := tests[k], s.Tests[i].Amount(); got != w || rt.Tests[i].Reported.Total != w || rt.Tests[i].Allocated.Total != w {
					t.Errorf("test %d: report %+v, truth allocated %+v reported %+v; want %+v", i+1, got, rt.Tests[i].Allocated.Total, rt.Tests[i].Reported.Total, w)
				}
			}
			if between != rt.Between.Total || between != rt.BetweenReported.Total || between.Allocations == 0 {
				t.Errorf("between tests: report %+v, truth %+v reported %+v", between, rt.Between.Total, rt.BetweenReported.Total)
			}
			checkMarkerFrames(t, r, api)
		})
	}
}

// checkMarkerFrames: the first testStarted records are LogRunListener's
// StringBuilder, its array and the String, then the printer's Bundle.
func checkMarkerFrames(t *testing.T, r *allocreport.Report, api int) {
	t.Helper()
	order := make([]int, len(r.Allocations))
	for i := range order {
		order[i] = i
	}
	if api >= 24 {
		slices.Reverse(order)
	}
	var got []string
	for _, i := range order {
		a := &r.Allocations[i]
		fr := r.Stack(a).Frames()
		call, own := listenerCall(r, a)
		if len(got) == 0 && call != "testStarted" {
			continue
		}
		if !own || call != "" && call != "testStarted" {
			break
		}
		got = append(got, r.Classes[a.Class]+" "+r.FrameString(fr[0]))
	}
	want := []string{
		"java.lang.StringBuilder java.lang.StringBuilder.<init>(StringBuilder.java:92)",
		"char[] java.lang.AbstractStringBuilder.<init>(AbstractStringBuilder.java:68)",
		"char[] java.util.Arrays.copyOf(Arrays.java:3260)",
		"java.lang.String java.lang.StringBuilder.toString(StringBuilder.java:413)",
		"android.os.Bundle android.os.Bundle.<init>(Bundle.java:138)",
		"java.lang.Object[] android.util.ArrayMap.allocArrays(ArrayMap.java:187)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("the first test's testStarted records:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
