package offline

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/instrument"
)

// goneAttribution records the pids it is told ended.
type goneAttribution struct{ gone []int }

func (g *goneAttribution) Event(int, time.Time, instrument.RunnerEvent)             {}
func (g *goneAttribution) Status(instrument.Event)                                  {}
func (g *goneAttribution) Result(instrument.Result)                                 {}
func (g *goneAttribution) Report(int, *allocreport.Report, bool) error              { return nil }
func (g *goneAttribution) Dump(int, *alloctrack.Window, time.Time, time.Time) error { return nil }
func (g *goneAttribution) Gone(pid int)                                             { g.gone = append(g.gone, pid) }
func (g *goneAttribution) Finish() *pertest.Run                                     { return &pertest.Run{} }

// With heapprofd, a process of the app is told ended once: when
// heapprofd's last dump says it disconnected, or, when no such dump came
// (one with no sample is not in the trace), at the run's end if it left
// the JDWP list; a process still listed, or not the app's, is not.
func TestRunRecorderHeapprofdGone(t *testing.T) {
	const app = "com.example.app1"
	ga := &goneAttribution{}
	s := newRunState(&RunRecorder{Package: app, Heapprofd: &RunHeapprofd{}, Attributor: ga, Log: zap.NewNop()}, context.Background())
	s.pids([]int{1}, make(chan struct{})) // the first list: older processes
	s.pids([]int{1, 100, 200, 300, 400}, nil)
	for _, pid := range []int{100, 200, 300} {
		if s.resolveDump(context.Background(), pid) == nil {
			t.Fatalf("pid %d: no heapprofd target", pid)
		}
	}
	s.proc(400).state = notApp
	s.hpGone(100) // heapprofd's disconnected dump
	s.pids([]int{1, 300}, nil)
	s.mu.Lock()
	s.goneUntold()
	s.mu.Unlock()
	if want := []int{100, 200}; !slices.Equal(ga.gone, want) {
		t.Errorf("told gone %v, want %v (100 by heapprofd, 200 by the JDWP list; 300 lives, 400 is not the app's)", ga.gone, want)
	}
}
