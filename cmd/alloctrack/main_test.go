package main

import (
	"testing"

	"go.uber.org/goleak"
)

// capture runs sessions, adb look-ups and signal watchers in goroutines;
// every one of them must be gone when run returns and the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
