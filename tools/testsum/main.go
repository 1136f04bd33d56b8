// Command testsum runs `go test -json …` and prints what a reader of a
// test run needs: each package's result line, the whole output of every
// test that failed (and of tests still running when a package failed, as
// on a timeout), build errors, and at the end one line per skipped test
// with the reason its t.Skip gave, and how many there were. It exits with
// the status of the command it ran.
//
//	go run ./tools/testsum go test -json -race -count=1 ./...
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testsum go test -json [flags] [packages]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	s := newSummary(os.Stdout)
	readErr := s.read(out)
	werr := cmd.Wait()
	s.skips()
	os.Exit(exitCode(werr, readErr))
}

// exitCode is the command's exit status, or 2 if it could not be run or
// its output could not be read.
func exitCode(waitErr, readErr error) int {
	var ee *exec.ExitError
	switch {
	case errors.As(waitErr, &ee):
		return ee.ExitCode()
	case waitErr != nil:
		fmt.Fprintln(os.Stderr, "testsum:", waitErr)
		return 2
	case readErr != nil:
		fmt.Fprintln(os.Stderr, "testsum: reading go test -json:", readErr)
		return 2
	}
	return 0
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output events
}

type testKey struct{ pkg, test string }

// skip is one skipped test and the output it gave (its t.Skip reason).
type skip struct {
	testKey
	reason string
}

// summary keeps each running test's output until it ends.
type summary struct {
	w       io.Writer
	running map[testKey][]string
	order   []testKey // running tests in the order they started
	skipped []skip
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, running: map[testKey][]string{}}
}

// read consumes the JSON stream; a line that is not JSON is printed as is.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(s.w, sc.Text())
			continue
		}
		s.handle(e)
	}
	return sc.Err()
}

func (s *summary) handle(e event) {
	if e.Action == "build-output" {
		fmt.Fprint(s.w, e.Output)
		return
	}
	k := testKey{e.Package, e.Test}
	if e.Test == "" {
		s.packageEvent(e)
		return
	}
	switch e.Action {
	case "run":
		s.running[k] = nil
		s.order = append(s.order, k)
	case "output":
		s.running[k] = append(s.running[k], e.Output)
	case "fail":
		s.flush(k)
	case "skip":
		s.skipped = append(s.skipped, skip{k, skipReason(s.running[k])})
		s.drop(k)
	case "pass":
		s.drop(k)
	}
}

// packageEvent prints a package's own output (its ok/FAIL line, a
// panic, what TestMain wrote), and on failure the output of every test of
// it that never ended.
func (s *summary) packageEvent(e event) {
	switch e.Action {
	case "output":
		if e.Output != "PASS\n" {
			fmt.Fprint(s.w, e.Output)
		}
	case "fail":
		for _, k := range append([]testKey(nil), s.order...) {
			if k.pkg == e.Package {
				s.flush(k)
			}
		}
	}
}

func (s *summary) flush(k testKey) {
	for _, line := range s.running[k] {
		fmt.Fprint(s.w, line)
	}
	s.drop(k)
}

func (s *summary) drop(k testKey) {
	delete(s.running, k)
	for i, o := range s.order {
		if o == k {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// skips prints one line per skipped test and the count.
func (s *summary) skips() {
	if len(s.skipped) == 0 {
		return
	}
	fmt.Fprintln(s.w)
	for _, sk := range s.skipped {
		fmt.Fprintf(s.w, "SKIP %s %s: %s\n", sk.pkg, sk.test, sk.reason)
	}
	plural := "s"
	if len(s.skipped) == 1 {
		plural = ""
	}
	fmt.Fprintf(s.w, "%d test%s skipped\n", len(s.skipped), plural)
}
