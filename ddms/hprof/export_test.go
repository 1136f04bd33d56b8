package hprof

// SetMaxBuffered sets the largest segment converted from memory, for
// tests of the other path, and returns a function that restores it.
func SetMaxBuffered(n int64) (restore func()) {
	old := maxBuffered
	maxBuffered = n
	return func() { maxBuffered = old }
}
