package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// runCheck judges the new runs against the store's baseline of their key:
// the budget's relative rules over all runs, its absolute limits on each
// new run. Runs of another device or app than any baseline are refused.
func (c *baselineCmd) runCheck(stdout, stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "alloctrack baseline check: "+format+"\n", args...)
		return code
	}
	bud, err := offline.ReadBudget(*c.budget)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	build, err := readAppBuild(*c.apk)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	key, err := newRunsKey(*c.newRuns, build)
	if errors.Is(err, offline.ErrBaselineMismatch) {
		return fail(exitInsufficient, "%v; not judged (exit status %d)", err, exitInsufficient)
	} else if err != nil {
		return fail(exitUsage, "%v", err)
	}
	base, err := offline.BaselineFor(*c.checkStore, key)
	if errors.Is(err, offline.ErrBaselineMismatch) {
		return fail(exitInsufficient, "%v; not judged (exit status %d)", err, exitInsufficient)
	} else if err != nil {
		return fail(exitFailure, "%v", err)
	}
	fmt.Fprintf(stdout, "baseline: %d runs of %s\n", len(base), key)
	code := exitOK
	if bud.HasRelative() {
		if code, err = judgeRelative(stdout, bud, base, *c.newRuns); err != nil {
			if errors.Is(err, offline.ErrInsufficient) {
				return fail(exitInsufficient, "%v; not judged", err)
			}
			return fail(exitFailure, "%v", err)
		}
	}
	abs, err := judgeAbsolute(stdout, bud, *c.newRuns)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	if code == exitOK {
		code = abs
	}
	return code
}

// newRunsKey is the key of the new runs, which must all share it; with
// build (--apk), the app's version is the APK's.
func newRunsKey(runs []string, build *offline.AppBuild) (offline.BaselineKey, error) {
	var key offline.BaselineKey
	for i, r := range runs {
		k, err := offline.RunKey(r)
		if build != nil {
			k, err = offline.RunKeyAPK(r, *build)
		}
		if err != nil {
			return key, err
		}
		if i > 0 {
			if d := key.Differs(k); d != nil {
				return key, fmt.Errorf("the new runs are of different devices or apps: %s and %s differ in %s", runs[0], r, strings.Join(d, ", "))
			}
		}
		key = k
	}
	return key, nil
}

// judgeRelative prints each relative verdict; the status is 3 for a
// breach, 5 for a rule that matched nothing and is not optional.
func judgeRelative(stdout io.Writer, bud *offline.Budget, base, nw []string) (int, error) {
	vs, err := bud.JudgeRelative(base, nw)
	if err != nil {
		return exitFailure, err
	}
	code := exitOK
	breaches := 0
	for _, v := range vs {
		fmt.Fprintln(stdout, v)
		switch {
		case v.Breach:
			breaches++
			code = exitBudget
		case v.Unmatched != nil && !v.Unmatched.Optional && code == exitOK:
			code = exitUnmatched
		}
	}
	fmt.Fprintf(stdout, "relative: %d breaches in %d comparisons of %d baseline and %d new runs\n", breaches, len(vs), len(base), len(nw))
	return code, nil
}

// judgeAbsolute measures each new run against the budget's absolute
// limits and prints what exceeds them; the status is 3 if anything does.
func judgeAbsolute(stdout io.Writer, bud *offline.Budget, runs []string) (int, error) {
	code := exitOK
	for _, r := range runs {
		var ms []offline.Measurement
		if bud.HasTestLimits() && offline.TestRunPath(r) != "" {
			tr, err := offline.ReadTestRun(r)
			if err != nil {
				return exitFailure, err
			}
			ms = append(ms, bud.MeasureTests(tr)...)
		}
		if bud.HasAbsoluteAllocationLimits() {
			in, err := offline.ReadInput(r)
			if err != nil {
				return exitFailure, err
			}
			t := alloctrack.NewTally()
			if err := in.AddTo(t); err != nil {
				return exitFailure, err
			}
			var d time.Duration
			if in.Summary != nil {
				d = time.Duration(in.Summary.DurationSeconds * float64(time.Second))
			}
			m, err := bud.Measure(t, d)
			if err != nil {
				return exitFailure, err
			}
			ms = append(ms, m...)
		}
		for _, m := range ms {
			if m.Unmatched == nil && m.Partial == nil && m.Exceeded() {
				fmt.Fprintf(stdout, "%s: over budget: %s\n", r, m)
				code = exitBudget
			}
		}
	}
	return code, nil
}
