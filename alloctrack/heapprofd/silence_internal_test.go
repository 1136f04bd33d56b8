package heapprofd

import (
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// TestSilenceChecksBackOff: a target silent through a session is checked
// again after Silence, then twice as long each time, up to Rotate; one
// that sent samples may be checked in its next silent session, with the
// wait it had; a session does not end for a target before its check is
// due, nor before it ran Silence.
func TestSilenceChecksBackOff(t *testing.T) {
	s := &Session{Config: Config{Silence: 10 * time.Second, Rotate: 60 * time.Second}}
	tg := &Target{Stats: alloctrack.NewAppStats("s", 1)}
	s.all = []*Target{tg}
	now := time.Unix(1000, 0)
	for _, want := range []time.Duration{10, 20, 40, 60, 60} {
		s.checked(tg, now)
		if got := tg.checkAt.Sub(now); got != want*time.Second {
			t.Errorf("next check after %v, want %v", got, want*time.Second)
		}
	}
	s.began = now
	if n := s.silent(now.Add(59 * time.Second)); len(n) != 0 {
		t.Errorf("a target whose check is not due ended the session")
	}
	if n := s.silent(now.Add(60 * time.Second)); len(n) != 1 {
		t.Errorf("a target whose check is due did not end the session")
	}
	s.began = now.Add(55 * time.Second)
	if n := s.silent(now.Add(60 * time.Second)); len(n) != 0 {
		t.Errorf("a session that ran less than Silence ended")
	}
	tg.dumps = 1
	s.checked(tg, now)
	s.began, tg.dumps = now, 0 // the next session
	if n := s.silent(now.Add(10 * time.Second)); len(n) != 1 {
		t.Errorf("a target that sent samples, then none through a whole session, did not end it")
	}
	s.checked(tg, now)
	if got := tg.checkAt.Sub(now); got != 60*time.Second {
		t.Errorf("after samples, then a check, next check after %v, want 60s (the wait does not start over)", got)
	}
}
