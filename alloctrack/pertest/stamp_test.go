package pertest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/instrument"
)

func stampOf(t *testing.T, line string) instrument.Stamp {
	t.Helper()
	e, ok := instrument.ParseLine(line)
	if !ok {
		t.Fatalf("not logcat: %q", line)
	}
	return e.Stamp
}

func TestStampTime(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	cases := []struct {
		line string
		want time.Time
	}{
		{"11-27 10:00:01.234  1234  1234 I TestRunner: started: a(b)", time.Date(2026, 11, 27, 10, 0, 1, 234e6, berlin)},
		{"2025-11-27 10:00:01.234567  1234  1234 I TestRunner: started: a(b)", time.Date(2025, 11, 27, 10, 0, 1, 234567e3, berlin)},
		{"11-27 10:00:01.234 +0530  1234  1234 I TestRunner: started: a(b)", time.Date(2026, 11, 27, 10, 0, 1, 234e6, time.FixedZone("", 5*3600+1800))},
		{"1764237601.123456789  1234  1234 I TestRunner: started: a(b)", time.Unix(1764237601, 123456789)},
		{"     12.500  1234  1234 I TestRunner: started: a(b)", time.Unix(12, 5e8)},
	}
	for _, c := range cases {
		got, err := StampTime(stampOf(t, c.line), 2026, berlin)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("%q: %v, %v; want %v", c.line, got, err, c.want)
		}
	}
	if _, err := StampTime(stampOf(t, "02-30 10:00:01.234  1  1 I T: x"), 2026, nil); err == nil {
		t.Error("30 February was taken")
	}
}

// A stamp with no year is put in the year nearest the reference: a run
// across New Year keeps its order.
func TestStampNear(t *testing.T) {
	ref := time.Date(2027, 1, 1, 0, 0, 5, 0, time.UTC)
	got, err := StampNear(stampOf(t, "12-31 23:59:58.000  1  1 I TestRunner: x"), ref)
	if err != nil || !got.Equal(time.Date(2026, 12, 31, 23, 59, 58, 0, time.UTC)) {
		t.Errorf("%v %v", got, err)
	}
	got, err = StampNear(stampOf(t, "06-01 10:00:00.000  1  1 I TestRunner: x"), time.Date(2026, 6, 1, 10, 0, 1, 0, time.UTC))
	if err != nil || got.Year() != 2026 {
		t.Errorf("%v %v", got, err)
	}
}

// A run written as tests.json reads back the same (tallies aside); a
// file of another kind is refused.
func TestJSONRoundTrip(t *testing.T) {
	a := newDDM(29)
	a.Event(1, at(0), runStarted(1))
	feedTests(a, 1, 0, "t[0](a.B)")
	_ = a.Report(1, reportOf(t, 29, script(mark(mRunStarted), mark(mStarted), app(2, 3, 1, "Lx/A;", "a"), mark(mFinished))), false)
	run := a.Finish()
	path := filepath.Join(t.TempDir(), FileName)
	if err := Write(path, run); err != nil {
		t.Fatal(err)
	}
	back, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want := *run
	want.BetweenTally = nil
	want.Tests = append([]Test(nil), run.Tests...)
	for i := range want.Tests {
		want.Tests[i].Tally = nil
	}
	if !reflect.DeepEqual(*back, want) {
		t.Errorf("read back\n%+v\nwant\n%+v", *back, want)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "\n  \"tests\": [") {
		t.Errorf("not indented: %.200s", b)
	}
	for _, bad := range []string{`{"serial":"x"}`, `{"tests":[],"backend":"ddm","x":1}`, `[1]`, ``} {
		if _, err := Unmarshal([]byte(bad)); err == nil {
			t.Errorf("%q taken for a run", bad)
		}
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none.json")); err == nil {
		t.Error("a missing file was read")
	}
}
