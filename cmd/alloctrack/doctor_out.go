package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/alloctrack/alloctrack/alloctrack/doctor"
)

// writeDoctor writes the report as a table or as JSON.
func writeDoctor(w io.Writer, format string, rep *doctorReport) error {
	if format == "json" {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	for i, d := range rep.Devices {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := writeDeviceTable(w, d); err != nil {
			return err
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func writeDeviceTable(w io.Writer, d deviceReport) error {
	fmt.Fprintf(w, "device %s: %s, Android %s (API %d)\n", d.Serial, orDash(d.Model), orDash(d.Release), d.API)
	if d.Error != "" {
		fmt.Fprintf(w, "  cannot ask it: %s\n", d.Error)
		return nil
	}
	fmt.Fprintf(w, "  build %s, ro.debuggable %s, SELinux %s\n", orDash(d.Build), orDash(d.Debuggable), orDash(d.SELinux))
	fmt.Fprintf(w, "  adbd features: %s\n", orDash(d.FeatureList()))
	fmt.Fprintf(w, "  perfetto: %s; traced %s; heapprofd %s\n", orDash(d.Perfetto), orDash(d.Traced), orDash(d.Heapprofd))
	if d.API >= doctor.APIJDWPProp {
		fmt.Fprintf(w, "  %s: %s\n", doctorJDWPProp, orDash(d.JDWPProp))
	}
	if len(d.Apps) == 0 {
		fmt.Fprintln(w, "  no debuggable or profileable app is running")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  APP\tPID\tKIND\tJDWP\tHELD\tBACKEND")
		for _, a := range d.Apps {
			writeAppRow(tw, a)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, a := range d.Apps {
			writeAppNotes(w, a)
		}
	}
	switch {
	case d.LeftError != "":
		fmt.Fprintf(w, "  left behind: not known (%s)\n", d.LeftError)
	case len(d.LeftBehind) > 0:
		fmt.Fprintf(w, "  left behind: %s\n", strings.Join(d.LeftBehind, " "))
	default:
		fmt.Fprintln(w, "  left behind: nothing")
	}
	return nil
}

func writeAppRow(w io.Writer, a appReport) {
	pid, jdwp, held := "-", "-", "-"
	if a.PID != 0 {
		pid, jdwp = fmt.Sprint(a.PID), yesNo(a.InJDWP)
	}
	if a.HeldKnown {
		held = yesNo(a.Held)
	}
	fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\n", a.Package, pid, orDash(a.Kind), jdwp, held, a.Verdict.Backend)
}

// writeAppNotes: where the kind came from, why not the version's own
// backend and what to change, and what the live checks measured.
func writeAppNotes(w io.Writer, a appReport) {
	if a.PID == 0 && a.Verdict.Reason == "" && len(a.Checks) == 0 {
		return
	}
	fmt.Fprintf(w, "  %s:\n", a.Package)
	if a.KindSource != "" {
		fmt.Fprintf(w, "    %s: %s\n", a.Kind, a.KindSource)
	}
	if a.Verdict.Reason != "" {
		fmt.Fprintf(w, "    why: %s\n    fix: %s\n", a.Verdict.Reason, a.Verdict.Fix)
	}
	for _, lc := range a.Checks {
		fmt.Fprintf(w, "    check %s: %s\n", lc.Backend, checkText(lc))
	}
}

func checkText(lc liveCheck) string {
	var b strings.Builder
	if lc.OK {
		b.WriteString("ok")
	} else {
		fmt.Fprintf(&b, "FAILED: %s", lc.Error)
	}
	switch lc.Backend {
	case doctor.BackendDDM:
		fmt.Fprintf(&b, "; %d records in one report, round trip %.1f ms", lc.Records, lc.RTTMs)
		if lc.TrackerOff != nil {
			fmt.Fprintf(&b, "; tracker off after: %s", yesNo(*lc.TrackerOff))
		}
	case doctor.BackendHeapprofd:
		fmt.Fprintf(&b, "; %d dumps, %d samples, %d trace bytes, app %s", lc.Dumps, lc.Samples, lc.TraceBytes, orDash(lc.State))
		if lc.Note != "" {
			fmt.Fprintf(&b, "; %s", lc.Note)
		}
	case doctor.BackendHeapdump:
		fmt.Fprintf(&b, "; %d bytes", lc.DumpBytes)
	}
	fmt.Fprintf(&b, " (%.1f s)", lc.Seconds)
	return b.String()
}
