package main

import (
	"bytes"
	"strings"
	"testing"
)

// A stream as `go test -json` writes it: a passing test, a skipped one, a
// failing one, and a package that timed out with a test still running.
const stream = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestOK"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"    ok_test.go:9: chatter\n"}
{"Action":"pass","Package":"p","Test":"TestOK"}
{"Action":"run","Package":"p","Test":"TestSkip"}
{"Action":"output","Package":"p","Test":"TestSkip","Output":"=== RUN   TestSkip\n"}
{"Action":"output","Package":"p","Test":"TestSkip","Output":"    skip_test.go:12: no prometheus installed\n"}
{"Action":"output","Package":"p","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestSkip"}
{"Action":"run","Package":"p","Test":"TestBad"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"    bad_test.go:3: got 1, want 2\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestBad"}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}
{"Action":"fail","Package":"p"}
{"Action":"run","Package":"q","Test":"TestHang"}
{"Action":"output","Package":"q","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"q","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"q","Output":"ok  \tq\t0.01s\n"}
{"Action":"fail","Package":"q"}
{"Action":"output","Package":"r","Output":"PASS\n"}
{"Action":"output","Package":"r","Output":"ok  \tr\t0.01s\n"}
{"Action":"pass","Package":"r"}
not json
`

func TestSummary(t *testing.T) {
	var b bytes.Buffer
	s := newSummary(&b)
	if err := s.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	s.skips()
	got := b.String()
	for _, want := range []string{
		"    bad_test.go:3: got 1, want 2\n--- FAIL: TestBad",
		"FAIL\tp\t0.01s\n",
		"panic: test timed out after 1s\n",
		"=== RUN   TestHang\n",
		"ok  \tr\t0.01s\n",
		"not json\n",
		"SKIP p TestSkip: skip_test.go:12: no prometheus installed\n1 test skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"chatter", "PASS\n"} {
		if strings.Contains(got, not) {
			t.Errorf("output has %q:\n%s", not, got)
		}
	}
}

func TestSkipReasonEmpty(t *testing.T) {
	if r := skipReason([]string{"=== RUN   TestX\n", "--- SKIP: TestX (0.00s)\n"}); r != "(no reason given)" {
		t.Errorf("skipReason = %q", r)
	}
}
