//go:build race

package e2e

// The daemon under test is built with the race detector too when the tests
// run with it, so a data race in the daemon fails its exit-status check.
func init() { raceEnabled = true }
