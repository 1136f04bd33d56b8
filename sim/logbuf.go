package sim

import (
	"sync"
	"time"
)

// LogEntry is one entry of a simulated device's log buffers, as logd
// keeps it: the logcat command prints it in the layout asked for.
type LogEntry struct {
	// Time is the device's realtime clock when the entry was logged;
	// Mono is CLOCK_MONOTONIC then (time since the device booted; zero:
	// derived from Time and the device's boot time).
	Time          time.Time
	Mono          time.Duration
	PID, TID, UID int
	Priority      byte // 'V', 'D', 'I', 'W', 'E', 'F'
	Tag, Msg      string
	// Buffer is "main" (when empty), "system", "events" or "crash".
	Buffer string
}

// logBuffer holds a device's log entries, oldest first. (The logcat
// command, its bounds and followers are built on it in logcat.go.)
type logBuffer struct {
	mu      sync.Mutex
	entries []LogEntry
}

// Log appends e to the device's log buffers.
func (d *Device) Log(e LogEntry) {
	if e.Buffer == "" {
		e.Buffer = "main"
	}
	d.logs.mu.Lock()
	d.logs.entries = append(d.logs.entries, e)
	d.logs.mu.Unlock()
}

// LogEntries returns a copy of the entries the device's buffers hold.
func (d *Device) LogEntries() []LogEntry {
	d.logs.mu.Lock()
	defer d.logs.mu.Unlock()
	return append([]LogEntry(nil), d.logs.entries...)
}
