package pertest

import (
	"math/rand/v2"
	"testing"

	"github.com/alloctrack/alloctrack/instrument"
)

var markerMethods = []string{mRunStarted, mStarted, mFinished, mFailure, mAssumption, "testIgnored", mRunFinished}

// randomRun feeds an Attributor a run laid out by the bytes of b: marker
// groups, app and runner records on several threads, reports cut
// anywhere (some overflowed), runner lines that may miss, repeat or come
// from another process, statuses, and a process that may go away. It
// returns the run and the records fed.
func randomRun(t testing.TB, b []byte) (*Run, uint64, uint64) {
	next := func() int {
		if len(b) == 0 {
			return 0
		}
		v := int(b[0])
		b = b[1:]
		return v
	}
	api := []int{19, 29}[next()%2]
	a := newDDM(api)
	var items []item
	var n, bytes uint64
	pids := []int{1, 2}
	for len(b) > 0 {
		switch op := next(); op % 8 {
		case 0, 1:
			items = append(items, mark(markerMethods[next()%len(markerMethods)])...)
		case 2, 3:
			items = append(items, app(1+next()%4, uint32(next()), uint16(next()%3), "Lx/C;", "f")...)
		case 4:
			name := []string{nameA, nameB, nameC, "x(y"}[next()%4]
			kinds := []instrument.RunnerKind{instrument.TestStarted, instrument.TestFinished, instrument.TestFailed, instrument.TestIgnored, instrument.RunStarted, instrument.RunFinished}
			a.Event(pids[next()%2], at(next()), runnerEv(kinds[next()%len(kinds)], name))
		case 5:
			rn, rb := all(items)
			n, bytes = n+rn, bytes+rb
			if err := a.Report(pids[next()%2], reportOf(t, api, items), next()%5 == 0); err != nil {
				t.Fatal(err)
			}
			items = nil
		case 6:
			kinds := []instrument.Kind{instrument.Started, instrument.Ended, instrument.RunFailed}
			ev := status(kinds[next()%3], instrument.Outcome(next()%6), []string{nameA, nameB}[next()%2])
			ev.Crashed = next()%7 == 0
			a.Status(ev)
		case 7:
			if next()%4 == 0 {
				a.Gone(pids[next()%2])
			} else {
				checkSum(t, a.Snapshot())
			}
		}
	}
	rn, rb := all(items)
	if err := a.Report(1, reportOf(t, api, items), false); err != nil {
		t.Fatal(err)
	}
	return a.Finish(), n + rn, bytes + rb
}

// Whatever the layout of markers, lines and reports, the run's total is
// every record fed, and equals the tests' figures plus between tests.
func TestTotalIsSumForRandomLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 34))
	for range 500 {
		b := make([]byte, 20+rng.IntN(400))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		r, n, bytes := randomRun(t, b)
		wantFigures(t, "total", r.Total, n, bytes)
		checkSum(t, r)
		if t.Failed() {
			t.Fatalf("layout %x", b)
		}
	}
}

func FuzzAttributor(f *testing.F) {
	f.Add([]byte{0, 1, 2, 4, 3, 0, 2, 5, 1, 0, 0, 1})
	f.Add([]byte{4, 0, 0, 1, 0, 1, 1, 2, 1, 1, 1, 0, 2, 3, 5, 0, 1, 7, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			return
		}
		r, n, bytes := randomRun(t, b)
		wantFigures(t, "total", r.Total, n, bytes)
		checkSum(t, r)
	})
}
