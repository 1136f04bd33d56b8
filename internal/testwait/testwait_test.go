package testwait

import (
	"testing"
	"time"
)

func TestAtLeast(t *testing.T) {
	if got := AtLeast(time.Second); got != Bound {
		t.Errorf("AtLeast(1s) = %v, want %v", got, Bound)
	}
	if got := AtLeast(3 * Bound); got != 3*Bound {
		t.Errorf("AtLeast(3 Bound) = %v", got)
	}
}

func TestUntilPollsUntilTheConditionHolds(t *testing.T) {
	n := 0
	Until(t, time.Millisecond, "three polls", func() (bool, string) {
		n++
		return n == 3, ""
	})
	if n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
}
