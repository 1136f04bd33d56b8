package supervisor

import (
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// An app exited for longer than the retention whose process starts again
// binds its old entry before its session sets a state; a sweep then must
// not forget the entry the session took (it would count, for the rest of
// the session, into counters no snapshot shows). Once the retention has
// passed since that bind with the app still ended, it is forgotten.
func TestSweepKeepsAppJustBound(t *testing.T) {
	d := NewDaemon(DaemonConfig{Retention: time.Hour}, nil, nil)
	const serial, app = "sim-1", "com.example.app1"
	_, st := d.bind(serial, app)
	st.Update(func(s *alloctrack.AppStatus) { s.State, s.Since = alloctrack.StateExited, time.Now().Add(-2*time.Hour) })
	_, again := d.bind(serial, app) // the new process's session
	d.sweep(time.Now())
	if !d.bound(serial, app, again) {
		t.Fatalf("an app bound a moment ago was forgotten: its session counts into nothing")
	}
	d.sweep(time.Now().Add(2 * time.Hour))
	if d.bound(serial, app, again) {
		t.Errorf("an app exited and unbound for twice the retention was kept")
	}
}
