package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
)

// amOut prints what `am instrument` prints of statuses and the result
// (sheet 13): with -r every key then the code; without, a status's stream
// only. Keys are sorted from Android 8.0 (Instrument.java), in Bundle hash
// order before (Am.java).
type amOut struct {
	mu     sync.Mutex
	w      io.Writer
	raw    bool
	sorted bool
}

// hashOrder is the order a pre-8.0 Bundle's keys come out in.
var hashOrder = []string{"numtests", "stream", "id", "test", "class", "stack", "current", "Error"}

func (o *amOut) keys(b map[string]string) []string {
	var ks []string
	for k := range b {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	if o.sorted {
		return ks
	}
	rank := func(k string) int {
		if i := slices.Index(hashOrder, k); i >= 0 {
			return i
		}
		return len(hashOrder)
	}
	slices.SortStableFunc(ks, func(a, b string) int { return rank(a) - rank(b) })
	return ks
}

func (o *amOut) block(prefix, codeLine string, code int, b map[string]string, pretty bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s, ok := b["stream"]; ok && !o.raw {
		if pretty {
			io.WriteString(o.w, s+"\n")
		} else {
			io.WriteString(o.w, s)
		}
		return
	}
	var sb strings.Builder
	for _, k := range o.keys(b) {
		fmt.Fprintf(&sb, "%s: %s=%s\n", prefix, k, b[k])
	}
	fmt.Fprintf(&sb, "%s: %d\n", codeLine, code)
	io.WriteString(o.w, sb.String())
}

// status prints one status (Am/Instrument's instrumentationStatus).
func (o *amOut) status(code int, b map[string]string) {
	o.block("INSTRUMENTATION_STATUS", "INSTRUMENTATION_STATUS_CODE", code, b, false)
}

// result prints the run's result (instrumentationFinished).
func (o *amOut) result(code int, b map[string]string) {
	o.block("INSTRUMENTATION_RESULT", "INSTRUMENTATION_CODE", code, b, true)
}

// Status codes of the runner's status printer (sheet 13).
const (
	codeStart      = 1
	codeOK         = 0
	codeError      = -1
	codeFailure    = -2
	codeIgnored    = -3
	codeAssumption = -4
)

type failure struct{ name, trace string }

// resultPrinter is AndroidJUnitRunner's status printer
// (InstrumentationResultPrinter) and its result text (JUnit's
// TextListener), printing through am.
type resultPrinter struct {
	out       *amOut
	id        string
	numTests  int
	current   int
	lastClass string
	start     time.Time
	run       int
	failures  []failure
	bundle    map[string]string // the running test's
}

func newResultPrinter(out *amOut, id string, numTests int) *resultPrinter {
	return &resultPrinter{out: out, id: id, numTests: numTests, start: time.Now()}
}

// started sends a test's start status: the class's header in its stream
// when the class changes.
func (rp *resultPrinter) started(t *SuiteTest) {
	rp.current++
	rp.bundle = map[string]string{"id": rp.id, "numtests": strconv.Itoa(rp.numTests), "class": t.Class,
		"test": t.Method, "current": strconv.Itoa(rp.current), "stream": ""}
	if t.Class != rp.lastClass {
		rp.bundle["stream"] = "\n" + t.Class + ":"
		rp.lastClass = t.Class
	}
	rp.out.status(codeStart, rp.bundle)
	rp.bundle["stream"] = ""
}

// finished sends a test's end status for outcome o (trace: its failure's).
func (rp *resultPrinter) finished(t *SuiteTest, o pertest.Outcome, trace string) {
	code := codeOK
	switch o {
	case pertest.Passed:
		rp.bundle["stream"] = "."
	case pertest.Failed, pertest.Errored:
		code = codeFailure
		if o == pertest.Errored {
			code = codeError
		}
		rp.bundle["stack"] = trace
		rp.bundle["stream"] = "\nError in " + t.Name() + ":\n" + trace
		rp.failures = append(rp.failures, failure{t.Name(), trace})
	case pertest.AssumptionFailed:
		code = codeAssumption
		rp.bundle["stack"] = trace
	}
	rp.run++
	rp.out.status(code, rp.bundle)
}

// ignored sends an ignored test's start and end statuses.
func (rp *resultPrinter) ignored(t *SuiteTest) {
	rp.started(t)
	rp.out.status(codeIgnored, rp.bundle)
}

// crashed sends the failure of the test running when the process crashed
// (sheet 11).
func (rp *resultPrinter) crashed(t *SuiteTest, trace string) {
	rp.bundle["stack"] = trace
	rp.bundle["stream"] = "\nProcess crashed while executing " + t.Name() + ":\n" + trace
	rp.out.status(codeFailure, rp.bundle)
}

// text is JUnit's TextListener text of the run: the time, the failures,
// and OK or FAILURES!!! with the counts.
func (rp *resultPrinter) text() string {
	var b strings.Builder
	// The printer's own line end, then TextListener's header.
	fmt.Fprintf(&b, "\n\nTime: %s\n", javaNumber(time.Since(rp.start).Seconds()))
	switch n := len(rp.failures); {
	case n == 1:
		b.WriteString("There was 1 failure:\n")
	case n > 1:
		fmt.Fprintf(&b, "There were %d failures:\n", n)
	}
	for i, f := range rp.failures {
		fmt.Fprintf(&b, "%d) %s\n%s", i+1, f.name, f.trace)
	}
	if len(rp.failures) == 0 {
		s := "s"
		if rp.run == 1 {
			s = ""
		}
		fmt.Fprintf(&b, "\nOK (%d test%s)\n", rp.run, s)
	} else {
		fmt.Fprintf(&b, "\nFAILURES!!!\nTests run: %d,  Failures: %d\n", rp.run, len(rp.failures))
	}
	b.WriteString("\n")
	return b.String()
}

// javaNumber formats x as java.text.NumberFormat.getInstance() does in
// an English locale: at most 3 fraction digits (half-even), no trailing
// zeros, thousands grouped with commas.
func javaNumber(x float64) string {
	r := math.RoundToEven(x*1000) / 1000
	s := strconv.FormatFloat(r, 'f', 3, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	whole, frac, _ := strings.Cut(s, ".")
	var g []string
	for len(whole) > 3 {
		g = append([]string{whole[len(whole)-3:]}, g...)
		whole = whole[:len(whole)-3]
	}
	g = append([]string{whole}, g...)
	out := strings.Join(g, ",")
	if frac != "" {
		out += "." + frac
	}
	return out
}
