package supervisor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"go.uber.org/zap"
)

// deviceFacts are what the daemon reads from a device before it picks a
// backend: its API level, its model, and on ART 7 to 9 how many entries
// a full report holds.
type deviceFacts struct {
	api       int
	model     string
	reportCap int // 0: allocreport.MaxEntries
}

// readFacts reads a device's facts, retrying with capped backoff and
// jitter until they are read or ctx ends (ok false). A failed read is
// never taken for a default: while the facts are unknown the device is
// shown so, its error counted and logged, and no backend runs on it.
// Each try waits longer for its answers (the request timeout, doubled
// per try up to 8 times it), since a slow link stays slow.
func (d *Daemon) readFacts(ctx context.Context, src Source, e *deviceEntry, log *zap.Logger) (deviceFacts, bool) {
	d.setFacts(e, nil, nil)
	key := factsKey(e)
	for attempt := 0; ; attempt++ {
		timeout := d.cfg.Session.RequestTimeout << min(attempt, 3)
		f, err := d.factsOnce(ctx, src, e.serial, timeout)
		if err == nil {
			d.setFacts(e, &f, nil)
			log.Info("device facts read", zap.String("facts", alloctrack.FactsKnown), zap.Int("api_level", f.api),
				zap.String("model", f.model), zap.Int("report_cap", f.reportCap), zap.Int("tries", attempt+1))
			return f, true
		}
		if ctx.Err() != nil {
			return f, false
		}
		wait := d.backoff(attempt)
		d.setFacts(e, nil, err)
		d.countDeviceError(e.serial, alloctrack.StageFacts)
		d.logs.warn(log.With(zap.String("facts", alloctrack.FactsUnknown), zap.Duration("retry_in", wait), zap.Duration("timeout", timeout)),
			key, "device facts unknown: no backend runs on the device until they are read; retrying", err)
		if !sleepCtx(ctx, wait) {
			return f, false
		}
	}
}

// setFacts shows a device's facts: unknown (f nil, with the last error if
// any) or known.
func (d *Daemon) setFacts(e *deviceEntry, f *deviceFacts, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f == nil {
		e.facts, e.factsErr = alloctrack.FactsUnknown, ""
		if err != nil {
			e.factsErr = err.Error()
		}
		return
	}
	e.facts, e.factsErr = alloctrack.FactsKnown, ""
	e.api, e.model = f.api, f.model
}

func factsKey(e *deviceEntry) string { return "facts/" + e.server + "/" + e.serial }

// factsOnce reads every fact once, each getprop within timeout.
func (d *Daemon) factsOnce(ctx context.Context, src Source, serial string, timeout time.Duration) (f deviceFacts, err error) {
	prop := func(name string) (string, error) {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		v, err := src.Prop(pctx, serial, name)
		if err != nil {
			return "", fmt.Errorf("getprop %s: %w", name, err)
		}
		return strings.TrimSpace(v), nil
	}
	v, err := prop("ro.build.version.sdk")
	if err != nil {
		return f, err
	}
	// Every device has an API level: an empty or garbled answer is a read
	// that failed (a stream cut short), not a level.
	if f.api, err = strconv.Atoi(v); err != nil || f.api <= 0 {
		return deviceFacts{}, fmt.Errorf("getprop ro.build.version.sdk: %q is not an API level", v)
	}
	if f.model, err = prop("ro.product.model"); err != nil {
		return f, err
	}
	if f.api >= 24 && f.api <= 28 {
		f.reportCap, err = reportCap(prop)
	}
	return f, err
}

// reportCap reads how many entries a full report holds on an ART 7–9
// device: dalvik.vm.allocTrackerMax caps the records kept and
// dalvik.vm.recentAllocMax (at most that) those reported, as ART's
// AllocRecordObjectMap::SetProperties reads them (runtime/gc/
// allocation_record.cc); 0 when neither is set (65,535). A property that
// could not be read is an error, not "unset".
func reportCap(prop func(string) (string, error)) (int, error) {
	read := func(name string) (int, error) {
		v, err := prop(name)
		if err != nil {
			return 0, err
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, nil // unset, or a value ART would not take either
		}
		return n, nil
	}
	allocMax, err := read("dalvik.vm.allocTrackerMax")
	if err != nil {
		return 0, err
	}
	recent, err := read("dalvik.vm.recentAllocMax")
	if err != nil {
		return 0, err
	}
	c := allocMax
	if recent > 0 && (allocMax == 0 || recent <= allocMax) {
		c = recent
	}
	if c >= allocreport.MaxEntries {
		return 0, nil
	}
	return c, nil
}
