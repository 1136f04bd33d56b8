// Package testwait holds the one bound the tests use when they wait for a
// condition, and a helper that waits on one.
//
// A test waits for something to happen, never for time to pass; the
// bound only says when to give up on a condition that never holds. It is
// far above what a loaded 2-core machine needs (other builds and test
// binaries running alongside), so that a slow run is never a failure: a
// test that is correct passes well before it, and one that is wrong
// still fails, a minute later.
package testwait

import (
	"context"
	"testing"
	"time"
)

// Bound is how long a test waits for a condition before it fails.
const Bound = 60 * time.Second

// AtLeast returns d, or Bound if d is shorter: for helpers whose callers
// name their own bound.
func AtLeast(d time.Duration) time.Duration { return max(d, Bound) }

// Until polls cond every poll until it holds and returns how long that
// took; after Bound it fails the test with what and cond's last status.
func Until(t testing.TB, poll time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, status := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > Bound {
			t.Fatalf("%s: not done after %v (%s)", what, Bound, status)
		}
		time.Sleep(poll)
	}
}

// Context returns a context that ends after Bound, for a test's calls
// that must end (and would hang the test if they did not).
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Bound)
	t.Cleanup(cancel)
	return ctx
}
