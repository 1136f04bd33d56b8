package supervisor

import (
	"context"
	"slices"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"

	"go.uber.org/zap"
)

// forgetting runs the sweep that forgets gone devices and ended apps,
// every quarter of the retention (30 s at most, 1 ms at least: a
// retention under 4 ns would make a ticker of 0, which panics), until
// ctx ends.
func (d *Daemon) forgetting(ctx context.Context) {
	t := time.NewTicker(max(min(d.cfg.Retention/4, 30*time.Second), time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.sweep(now)
		}
	}
}

// sweep forgets what has been gone for Retention: devices gone from
// their adb server (with their error counts, orphan records and apps,
// once no server lists the serial), and apps exited or disconnected
// (with their counters, errors and every series). An app or device that
// comes back later starts anew.
func (d *Daemon) sweep(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, e := range d.devices {
		if e.state == "gone" && now.Sub(e.since) >= d.cfg.Retention && finished(e.done) {
			d.forgetDeviceLocked(now, key, "retention")
		}
	}
	d.forgetAppsLocked(now, func(_ appKey, state string, since time.Time) bool {
		return (state == alloctrack.StateExited || state == alloctrack.StateDisconnected) && now.Sub(since) >= d.cfg.Retention
	})
	d.trimGoneLocked()
	d.logs.prune(now)
}

// trimGoneLocked forgets the longest gone devices beyond MaxGone.
func (d *Daemon) trimGoneLocked() {
	var gone []string
	for key, e := range d.devices {
		if e.state == "gone" && finished(e.done) {
			gone = append(gone, key)
		}
	}
	if len(gone) <= d.cfg.MaxGone {
		return
	}
	slices.SortFunc(gone, func(a, b string) int { return d.devices[a].since.Compare(d.devices[b].since) })
	now := time.Now()
	for _, key := range gone[:len(gone)-d.cfg.MaxGone] {
		d.forgetDeviceLocked(now, key, "too many gone devices")
	}
}

// forgetDeviceLocked forgets a device, and once no server lists its
// serial, its error counts, orphan records and apps.
func (d *Daemon) forgetDeviceLocked(now time.Time, key, why string) {
	e := d.devices[key]
	delete(d.devices, key)
	d.log.Info("device forgotten", zap.String("adb_server", e.server), zap.String("serial", e.serial), zap.String("why", why),
		zap.Duration("gone_for", now.Sub(e.since).Round(time.Millisecond)))
	if !d.serialListedLocked(e.serial) {
		delete(d.devErrs, e.serial)
		delete(d.orphans, e.serial)
		d.forgetAppsLocked(now, func(k appKey, _ string, _ time.Time) bool { return k.serial == e.serial })
	}
}

// forgetAppsLocked forgets the apps drop picks. An app's state counts
// from its last change or its last bind, whichever came later: a process
// that started again binds the old entry, still exited, before its
// session sets a state, and the entry it took must not be forgotten
// meanwhile (the session would count into counters nobody shows).
func (d *Daemon) forgetAppsLocked(now time.Time, drop func(k appKey, state string, since time.Time) bool) {
	for k, a := range d.apps {
		state, since := a.stats.State()
		if a.bound.After(since) {
			since = a.bound
		}
		if drop(k, state, since) {
			delete(d.apps, k)
			d.log.Info("app forgotten", zap.String("serial", k.serial), zap.String("package", k.app),
				zap.String("state", state), zap.Duration("for", now.Sub(since).Round(time.Millisecond)))
		}
	}
}

// serialListedLocked tells whether a device entry of any server has serial.
func (d *Daemon) serialListedLocked(serial string) bool {
	for _, e := range d.devices {
		if e.serial == serial {
			return true
		}
	}
	return false
}

// finished tells whether a follower's done channel is closed (or there
// was none): an entry whose follower still lets go of its apps stays.
func finished(done chan struct{}) bool {
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// bound tells whether stats are still the daemon's for an app: false once
// the app was forgotten.
func (d *Daemon) bound(serial, app string, stats *alloctrack.AppStats) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.apps[appKey{serial, app}]
	return e != nil && e.stats == stats
}

// forgetDeviceLogs drops the rate-limited log entries of one device's
// followers when they end.
func (d *Daemon) forgetDeviceLogs(e *deviceEntry) {
	for _, k := range []string{factsKey(e), "track-jdwp/" + e.server + "/" + e.serial, "track-app/" + e.server + "/" + e.serial} {
		d.logs.forget(k)
	}
}
