package instrument

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// ev is the part of an Event the table tests compare.
type ev struct {
	Kind          Kind
	Outcome       Outcome
	Class, Method string
	Current, Num  int
	Stack         string
	Crashed       bool
}

func project(events []Event) []ev {
	var out []ev
	for _, e := range events {
		out = append(out, ev{e.Kind, e.Outcome, e.Class, e.Method, e.Current, e.NumTests, e.Stack, e.Crashed})
	}
	return out
}

func TestParseAm(t *testing.T) {
	const calc, slow, param = "com.example.CalcTest", "com.example.Slow$Inner", "test[0: a=b, \"x\"](y)"
	tests := []struct {
		name    string
		in      string
		want    []ev
		result  map[string]string
		code    int
		hasCode bool
	}{
		{"sorted keys, a failure", amSorted, []ev{
			{Started, NoOutcome, calc, "add", 1, 2, "", false},
			{Ended, Passed, calc, "add", 1, 2, "", false},
			{Started, NoOutcome, calc, "subtract", 2, 2, "", false},
			{Ended, Failed, calc, "subtract", 2, 2, calcStack, false},
		}, map[string]string{"stream": "\n\nTime: 0.052\nThere was 1 failure:\n1) subtract(com.example.CalcTest)\n" +
			strings.TrimSuffix(calcStack, "\n") + "\n\nFAILURES!!!\nTests run: 2,  Failures: 1\n\n"}, -1, true},
		{"hash order, CRLF, ignored, assumption", amHashOrder, []ev{
			{Started, NoOutcome, slow, "skipped", 1, 2, "", false},
			{Ended, Ignored, slow, "skipped", 1, 2, "", false},
			{Started, NoOutcome, slow, param, 2, 2, "", false},
			{InProgress, NoOutcome, "", "", 0, 0, "", false},
			{Ended, AssumptionFailed, slow, param, 2, 2, "org.junit.AssumptionViolatedException: no network\n", false},
		}, map[string]string{"stream": "\n\nTime: 1.003\n\nOK (1 test)\n\n"}, -1, true},
		{"crash", amCrash, []ev{
			{Started, NoOutcome, "com.example.CrashTest", "boom", 1, 3, "", false},
			{Ended, Failed, "com.example.CrashTest", "boom", 1, 3,
				"java.lang.IllegalStateException: boom\n\tat com.example.CrashTest.lambda$boom$0(CrashTest.java:14)\n", true},
		}, map[string]string{"shortMsg": "Process crashed."}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, err := ParseAm(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := project(run.Events); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events\n got %+v\nwant %+v", got, tt.want)
			}
			if !reflect.DeepEqual(run.Result.Values, tt.result) || run.Result.Code != tt.code || run.Result.HasCode != tt.hasCode {
				t.Errorf("result %q code %d (%v), want %q %d", run.Result.Values, run.Result.Code, run.Result.HasCode, tt.result, tt.code)
			}
		})
	}
}

func TestParseAmCrashed(t *testing.T) {
	run, err := ParseAm(strings.NewReader(amCrash))
	if err != nil || !run.Result.Crashed() {
		t.Fatalf("crashed %v, err %v", run.Result.Crashed(), err)
	}
	run, _ = ParseAm(strings.NewReader(amSorted))
	if run.Result.Crashed() {
		t.Error("a finished run reads as crashed")
	}
}

func TestParseAmMissingInstrumentation(t *testing.T) {
	run, err := ParseAm(strings.NewReader(amMissing))
	fe, ok := errors.AsType[*FailedError](err)
	if !ok || !strings.HasPrefix(fe.Msg, "Unable to find instrumentation info for: ComponentInfo{com.example.test/") {
		t.Fatalf("err %v, want a FailedError with the Error text", err)
	}
	if len(run.Events) != 1 || run.Events[0].Kind != RunFailed || run.Events[0].Values["id"] != "ActivityManagerService" {
		t.Errorf("events %+v", run.Events)
	}
	if len(run.Result.Stray) != 2 || !strings.Contains(run.Result.Stray[0], "INSTRUMENTATION_FAILED") {
		t.Errorf("stray %q", run.Result.Stray)
	}
}

func TestParseAmCutOff(t *testing.T) {
	run, err := ParseAm(strings.NewReader(amCut))
	if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "subtract(com.example.CalcTest) was running") {
		t.Fatalf("err %v, want ErrIncomplete naming the running test", err)
	}
	if len(run.Events) != 3 || run.Events[1].Outcome != Passed {
		t.Errorf("kept %+v, want the 3 events before the cut", project(run.Events))
	}
	_, err = ParseAm(strings.NewReader(""))
	if !errors.Is(err, ErrIncomplete) {
		t.Errorf("empty output: %v", err)
	}
}

func TestParseAmOneByte(t *testing.T) {
	for _, in := range amSeeds {
		want, werr := ParseAm(strings.NewReader(in))
		got, gerr := ParseAm(iotest.OneByteReader(strings.NewReader(in)))
		if !reflect.DeepEqual(got, want) || errors.Is(werr, ErrIncomplete) != errors.Is(gerr, ErrIncomplete) {
			t.Errorf("one byte at a time: %+v, %v; want %+v, %v", got, gerr, want, werr)
		}
	}
}

func TestParseAmRejects(t *testing.T) {
	for _, tt := range []struct{ in, what string }{
		{"INSTRUMENTATION_STATUS: novalue\n", "line 1: no key=value"},
		{"INSTRUMENTATION_STATUS: =x\n", "line 1: no key=value"},
		{"INSTRUMENTATION_STATUS: a=b\nINSTRUMENTATION_STATUS_CODE: one\n", "line 2: code \"one\" is not a number"},
		{"INSTRUMENTATION_CODE: \n", "line 1: code"},
		{strings.Repeat("x", MaxLine+1) + "\n", "line 1: line longer than"},
		{"INSTRUMENTATION_STATUS: a=b\n" + strings.Repeat(strings.Repeat("y", 1<<16)+"\n", MaxValue>>16+1), "value of \"a\" longer than"},
	} {
		_, err := ParseAm(strings.NewReader(tt.in))
		if _, ok := errors.AsType[*SyntaxError](err); !ok || !strings.Contains(err.Error(), tt.what) {
			t.Errorf("%.40q: err %v, want a SyntaxError with %q", tt.in, err, tt.what)
		}
	}
}

func TestAmReaderStream(t *testing.T) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pr.Close() }) // unblocks the writer if the test stops early
	a := NewAmReader(pr)
	go func() {
		io.WriteString(pw, amSorted[:strings.Index(amSorted, "INSTRUMENTATION_STATUS_CODE: 0")+len("INSTRUMENTATION_STATUS_CODE: 1\n")])
	}()
	e, err := a.Next()
	if err != nil || e.Kind != Started {
		t.Fatalf("first event %+v %v", e, err)
	}
	e, err = a.Next() // the writer has not closed: an event must come before the end of input
	if err != nil || e.Kind != Ended {
		t.Fatalf("second event %+v %v", e, err)
	}
	pw.Close()
}

func FuzzParseInstrument(f *testing.F) {
	for _, s := range amSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		run, err := ParseAm(strings.NewReader(string(b)))
		_, syntax := errors.AsType[*SyntaxError](err)
		_, failed := errors.AsType[*FailedError](err)
		if err != nil && !syntax && !failed && !errors.Is(err, ErrIncomplete) {
			t.Fatalf("unexpected error %v", err)
		}
		for _, e := range run.Events {
			if k, o := kindOf(e.Code); e.Kind != RunFailed && (k != e.Kind || o != e.Outcome) {
				t.Fatalf("code %d read as %v %v", e.Code, e.Kind, e.Outcome)
			}
		}
		if err == nil && !run.Result.HasCode {
			t.Fatal("no error without INSTRUMENTATION_CODE")
		}
	})
}
