package alloctrack

import (
	"maps"
	"sync"
	"time"
)

// AppStats is what one app's session reports about itself. It is safe for
// concurrent use; Snapshot copies it.
type AppStats struct {
	mu sync.Mutex
	s  AppStatus
}

// NewAppStats returns stats for the app with pid on a device.
func NewAppStats(serial string, pid int) *AppStats {
	return &AppStats{s: AppStatus{Serial: serial, PID: pid, State: StateConnecting, Errors: map[string]uint64{}, RTT: NewHistogram(RTTBuckets), Answer: NewHistogram(RTTBuckets), Since: time.Now()}}
}

// Update changes the status under the stats' lock.
func (a *AppStats) Update(f func(s *AppStatus)) {
	a.mu.Lock()
	f(&a.s)
	a.mu.Unlock()
}

// SetState records a state change.
func (a *AppStats) SetState(state string) {
	a.Update(func(s *AppStatus) {
		if s.State != state {
			s.State, s.Since = state, time.Now()
		}
		s.Tracking = state == StateTracking
	})
}

// SetStateIf records a state change only while pid is still the app's
// newest process, so that a session of a newer process is not overruled.
func (a *AppStats) SetStateIf(pid int, state string) {
	a.Update(func(s *AppStatus) {
		if s.PID == pid && s.State != state {
			s.State, s.Since = state, time.Now()
			s.Tracking = false
		}
	})
}

// State returns the app's state and since when it holds.
func (a *AppStats) State() (string, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.s.State, a.s.Since
}

// CountError counts an error at a stage.
func (a *AppStats) CountError(stage string) {
	a.Update(func(s *AppStatus) { s.Errors[stage]++ })
}

// Snapshot returns a copy.
func (a *AppStats) Snapshot() AppStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.s
	s.Errors = maps.Clone(a.s.Errors)
	s.RTT = a.s.RTT.clone()
	s.Answer = a.s.Answer.clone()
	return s
}
