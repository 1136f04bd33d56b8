package exporter

import (
	"testing"

	"go.uber.org/goleak"
)

// Gathering runs collectors in goroutines of the registry; every one of
// them must be gone when the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
