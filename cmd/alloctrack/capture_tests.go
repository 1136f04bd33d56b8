package main

import (
	"context"
	"fmt"
	"io"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// runTests is `capture --tests`: record a run someone else starts, from
// its logcat lines and the app's fresh processes, until the run finished
// (and no process of the app is left) or --duration.
func (c *captureCmd) runTests(stdout, stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "alloctrack capture: "+format+"\n", args...)
		return code
	}
	if *c.pkg == "" || *c.pid != 0 {
		return fail(exitUsage, "--tests records the app under test: give --package (not --pid)")
	}
	spec, code, msg := c.testRun.spec(*c.out)
	if code != exitOK {
		return fail(code, "%s", msg)
	}
	spec.cfg, spec.timeout, spec.top, spec.gate, spec.existing = c.session.ddmConfig(), *c.duration, *c.top, c.gate, true
	spec.cfg.Fill()
	if *c.budget != "" {
		var err error
		if spec.budget, err = offline.ReadBudget(*c.budget); err != nil {
			return fail(exitUsage, "%v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code, msg = spec.attach(ctx, c.log, *c.adbAddr, *c.serial, *c.wait, stderr)
	if spec.log != nil {
		defer spec.log.Sync()
	}
	if code != exitOK {
		return fail(code, "%s", msg)
	}
	api, serial := spec.api, spec.serial
	if b := *c.session.backend; b != alloctrack.BackendAuto && (b == alloctrack.BackendHeapprofd) != (api >= alloctrack.APIHeapprofd) {
		return fail(exitUsage, "--tests --backend %s: %s runs API %d; test runs use DDM up to Android 11 (API 30) and heapprofd from Android 12 (API 31)", b, serial, api)
	}
	spec.hpInterval = *c.session.hpInterval
	spec.pkg = *c.pkg
	return spec.record(ctx, "alloctrack capture", stdout, stderr)
}
