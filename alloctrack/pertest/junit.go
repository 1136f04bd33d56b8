package pertest

import (
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// JUnit XML in the dialect Jenkins' JUnit plugin, GitLab and Maven
// Surefire read: a <testsuites> root, one <testsuite> per test class (in
// the order its first test started), one <testcase> per test with
// name = method and classname = the class, as the runner names them.
// Each testcase carries alloctrack's figures as <properties> (Jenkins
// reads properties inside a testcase; GitLab and Surefire readers skip
// them). encoding/xml escapes every name and replaces characters XML 1.0
// does not allow with U+FFFD.

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr,omitempty"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string           `xml:"name,attr"`
	Tests      int              `xml:"tests,attr"`
	Failures   int              `xml:"failures,attr"`
	Errors     int              `xml:"errors,attr"`
	Skipped    int              `xml:"skipped,attr"`
	Time       string           `xml:"time,attr"`
	Properties *junitProperties `xml:"properties"`
	Cases      []junitCase      `xml:"testcase"`
	seconds    float64
}

type junitProperties struct {
	List []junitProperty `xml:"property"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name       string           `xml:"name,attr"`
	Classname  string           `xml:"classname,attr"`
	Time       string           `xml:"time,attr"`
	Properties *junitProperties `xml:"properties"`
	Failure    *junitResult     `xml:"failure"`
	Error      *junitResult     `xml:"error"`
	Skipped    *junitResult     `xml:"skipped"`
	SystemOut  string           `xml:"system-out,omitempty"`
}

type junitResult struct {
	Message string `xml:"message,attr,omitempty"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// The names of the properties of each testcase.
const (
	PropAllocations          = "alloctrack.allocations"
	PropBytes                = "alloctrack.bytes"
	PropEstimated            = "alloctrack.estimated"
	PropSampledAllocations   = "alloctrack.sampled_allocations"
	PropSampledBytes         = "alloctrack.sampled_bytes"
	PropPartial              = "alloctrack.partial"
	PropNotes                = "alloctrack.notes"
	PropBoundaryErrorSeconds = "alloctrack.boundary_error_seconds"
	PropTopClass             = "alloctrack.top_class"
	PropTopClassBytes        = "alloctrack.top_class_bytes"
)

// WriteJUnit writes run as a JUnit XML report: one testsuite per test
// class, each test a testcase with its outcome (failed: <failure>; error,
// crashed, unfinished: <error> with the failure text and notes; ignored
// and assumption failed: <skipped>) and its figures as properties.
// Suites carry the run's package, serial, backend and boundary as
// properties.
func WriteJUnit(w io.Writer, run *Run) error {
	doc := junitSuites{Name: run.Package}
	if run.Instrumentation != "" {
		doc.Name = run.Instrumentation
	}
	index := map[string]int{}
	for i := range run.Tests {
		t := &run.Tests[i]
		class := t.Class
		if class == "" {
			class = t.Name
		}
		k, ok := index[class]
		if !ok {
			k = len(doc.Suites)
			index[class] = k
			doc.Suites = append(doc.Suites, junitSuite{Name: class, Properties: runProperties(run)})
		}
		s := &doc.Suites[k]
		c := junitCaseOf(t, class)
		s.Cases = append(s.Cases, c)
		s.Tests++
		s.seconds += t.DurationSeconds
		switch {
		case c.Failure != nil:
			s.Failures++
		case c.Error != nil:
			s.Errors++
		case c.Skipped != nil:
			s.Skipped++
		}
	}
	var total float64
	for i := range doc.Suites {
		s := &doc.Suites[i]
		s.Time = seconds(s.seconds)
		total += s.seconds
		doc.Tests += s.Tests
		doc.Failures += s.Failures
		doc.Errors += s.Errors
		doc.Skipped += s.Skipped
	}
	doc.Time = seconds(total)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("pertest: writing JUnit XML: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// runProperties are what every suite says of the run.
func runProperties(run *Run) *junitProperties {
	p := &junitProperties{}
	add := func(name, v string) {
		if v != "" {
			p.List = append(p.List, junitProperty{Name: name, Value: v})
		}
	}
	add("alloctrack.package", run.Package)
	add("alloctrack.serial", run.Serial)
	if run.API > 0 {
		add("alloctrack.api", strconv.Itoa(run.API))
	}
	add("alloctrack.backend", run.Backend)
	add("alloctrack.boundary", run.Boundary)
	if len(p.List) == 0 {
		return nil
	}
	return p
}

// junitCaseOf is test t as a testcase of class.
func junitCaseOf(t *Test, class string) junitCase {
	name := t.Method
	if name == "" {
		name = t.Name
	}
	c := junitCase{Name: name, Classname: class, Time: seconds(t.DurationSeconds), Properties: caseProperties(t)}
	text := t.Failure
	if len(t.Notes) > 0 {
		c.SystemOut = "alloctrack: " + strings.Join(t.Notes, "\nalloctrack: ")
	}
	message, typ := failureHead(text)
	switch t.Outcome {
	case Failed:
		c.Failure = &junitResult{Message: message, Type: typ, Text: text}
	case Errored:
		c.Error = &junitResult{Message: message, Type: typ, Text: text}
	case Crashed, Unfinished:
		why := "the test's process crashed"
		if t.Outcome == Unfinished {
			why = "the test did not finish"
		}
		if len(t.Notes) > 0 {
			why += ": " + strings.Join(t.Notes, "; ")
		}
		if text == "" {
			text = why
		}
		c.Error = &junitResult{Message: why, Type: string(t.Outcome), Text: text}
	case Ignored:
		c.Skipped = &junitResult{Message: "ignored"}
	case AssumptionFailed:
		c.Skipped = &junitResult{Message: "assumption failed: " + message, Text: text}
	}
	return c
}

// caseProperties are a test's figures.
func caseProperties(t *Test) *junitProperties {
	p := &junitProperties{}
	add := func(name, v string) { p.List = append(p.List, junitProperty{Name: name, Value: v}) }
	add(PropAllocations, strconv.FormatUint(t.Allocations, 10))
	add(PropBytes, strconv.FormatUint(t.Bytes, 10))
	add(PropEstimated, strconv.FormatBool(t.Estimated))
	if t.Estimated {
		add(PropSampledAllocations, strconv.FormatUint(t.SampledAllocations, 10))
		add(PropSampledBytes, strconv.FormatUint(t.SampledBytes, 10))
	}
	add(PropPartial, strconv.FormatBool(t.Partial))
	if len(t.Notes) > 0 {
		add(PropNotes, strings.Join(t.Notes, "; "))
	}
	add(PropBoundaryErrorSeconds, strconv.FormatFloat(t.BoundaryErrorSeconds, 'f', -1, 64))
	if len(t.TopClasses) > 0 {
		add(PropTopClass, t.TopClasses[0].Class)
		add(PropTopClassBytes, strconv.FormatUint(t.TopClasses[0].Bytes, 10))
	}
	return p
}

// failureHead returns a failure's first line (the message) and, when
// that line starts with an exception's class name, the class.
func failureHead(text string) (message, typ string) {
	message, _, _ = strings.Cut(strings.TrimLeft(text, "\n"), "\n")
	message = strings.TrimSpace(message)
	head, _, _ := strings.Cut(message, ":")
	if head != "" && !strings.ContainsAny(head, " \t()") && strings.Contains(head, ".") {
		typ = head
	}
	return message, typ
}

// seconds formats a duration in seconds as JUnit XML's time attribute.
func seconds(s float64) string { return strconv.FormatFloat(s, 'f', 3, 64) }
