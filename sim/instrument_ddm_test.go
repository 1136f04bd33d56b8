package sim

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/pertest"
	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/ddms/allocreport"
	"github.com/alloctrack/alloctrack/internal/testwait"
	"github.com/alloctrack/alloctrack/jdwp"
)

// readUntil reads a service stream until its bytes hold s.
func readUntil(t *testing.T, c interface{ Read([]byte) (int, error) }, s string) string {
	t.Helper()
	var got []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(got), s) {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %q: %v after %q", s, err, got)
		}
		got = append(got, buf[:n]...)
	}
	return string(got)
}

// TestInstrumentReportInDelay: with -e delay_msec the host has the time
// to take the last test's report over JDWP before am stops the process
// (sheet 10, 12), and the report's markers give every test exactly, as
// RunTruth's Reported says.
func TestInstrumentReportInDelay(t *testing.T) {
	s := calcSuite()
	s.Tests[3].Allocs = []TestAlloc{{Class: "[I", Size: 40, Count: 7, Line: 9}}
	d := suiteDevice(t, 29, s)
	trackFromStart(d)
	c, err := d.OpenService("shell,v2,raw:am instrument -w -r -e delay_msec 1000 com.example.test/androidx.test.runner.AndroidJUnitRunner")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(testwait.AtLeast(30 * time.Second)))
	readUntil(t, c, "INSTRUMENTATION_STATUS_CODE: -4\n") // the last test's end
	pid := d.PIDs()[0]
	jc, err := d.OpenService("jdwp:" + strconv.Itoa(pid))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, testwait.Bound)
	conn, err := jdwp.Open(ctx, jc, jdwp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, err := ddms.NewClient(conn).Allocations(ctx)
	if err != nil {
		t.Fatalf("REAL in the delay: %v", err)
	}
	r, err := allocreport.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	_, tests, _ := attribute(r, true)
	rt, _ := d.RunTruth(-1)
	for k, i := range []int{0, 1, 3} {
		tt := rt.Tests[i]
		if tests[k] != tt.Reported.Total || tt.Reported.Total != s.Tests[i].Amount() {
			t.Errorf("%s: the report gives %+v, truth reported %+v, the suite %+v", tt.Name, tests[k], tt.Reported.Total, s.Tests[i].Amount())
		}
	}
	if rt.Tests[2].Outcome != pertest.Ignored || rt.Done {
		t.Errorf("ignored test %+v, run done %v before its delay ended", rt.Tests[2], rt.Done)
	}
	readUntil(t, c, "INSTRUMENTATION_CODE: -1\n")
	if d.VM(pid) != nil {
		t.Errorf("process %d still listed after the run", pid)
	}
}
