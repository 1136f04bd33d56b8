package sim

import (
	"slices"
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
	Priority      byte // 'V', 'D', 'I', 'W', 'E', 'F' (zero: 'I')
	Tag, Msg      string
	// Buffer is "main" (when empty), "system", "events", "radio" or
	// "crash".
	Buffer string
}

// DefaultLogBufferSize bounds each of a device's log buffers when
// DeviceConfig.LogBufferSize is zero: logd's default of 256 KiB per
// buffer (and the kernel logger's on Android 4.4).
const DefaultLogBufferSize = 256 << 10

// logEntryHeader is what an entry costs in a buffer besides its payload
// (priority, tag and message, each string with its NUL): the 28 bytes of
// logger_entry_v4. logd counts a little differently by version; the
// simulator takes this one rule.
const logEntryHeader = 28

// logSize is what e takes of its buffer's bound.
func logSize(e *LogEntry) int {
	return logEntryHeader + 1 + len(e.Tag) + 1 + len(e.Msg) + 1
}

// LogStats says what became of the entries logged on a device.
type LogStats struct {
	// Logged counts the entries ever logged, Pruned those dropped (the
	// oldest of their buffer) to keep a buffer within its bound.
	Logged, Pruned int
	// Lost counts the entries a following logcat had not read yet when
	// they were pruned: lines missing from its output (the gap), summed
	// over every logcat that followed.
	Lost int
	// Readers is how many logcat commands follow the buffers now.
	Readers int
}

// seqEntry is an entry with its place in the order of logging.
type seqEntry struct {
	LogEntry
	seq uint64
}

// logRing is one buffer: its entries, oldest first; base is the index (in
// the buffer's own count since boot) of entries[0].
type logRing struct {
	entries []seqEntry
	base    int
	size    int
	// prunedTo is the index up to which entries were pruned (not
	// cleared): a reader before it lost those in between.
	prunedTo int
}

func (r *logRing) end() int { return r.base + len(r.entries) }

// logBuffer is logd's buffers of a device: each bounded on its own, with
// followers woken by each new entry.
type logBuffer struct {
	mu    sync.Mutex
	rings map[string]*logRing
	seq   uint64
	wake  chan struct{} // closed and replaced on each entry
	stats LogStats
}

// Log appends e to its buffer (main when e.Buffer is empty), pruning the
// buffer's oldest entries beyond the device's bound, and wakes every
// following logcat. A zero Time is now, a zero TID the PID, a zero
// Priority 'I'.
func (d *Device) Log(e LogEntry) {
	if e.Buffer == "" {
		e.Buffer = "main"
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if e.Mono == 0 {
		e.Mono = max(e.Time.Sub(d.boot), 0)
	}
	if e.TID == 0 {
		e.TID = e.PID
	}
	if e.Priority == 0 {
		e.Priority = 'I'
	}
	limit := d.cfg.LogBufferSize
	if limit <= 0 {
		limit = DefaultLogBufferSize
	}
	b := &d.logs
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.ring(e.Buffer)
	b.seq++
	r.entries = append(r.entries, seqEntry{e, b.seq})
	r.size += logSize(&e)
	b.stats.Logged++
	for r.size > limit && len(r.entries) > 1 {
		r.size -= logSize(&r.entries[0].LogEntry)
		r.entries[0] = seqEntry{}
		r.entries = r.entries[1:]
		r.base++
		r.prunedTo = r.base
		b.stats.Pruned++
	}
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
}

// ring returns the buffer named name, made on first use. b.mu is held.
func (b *logBuffer) ring(name string) *logRing {
	if b.rings == nil {
		b.rings = map[string]*logRing{}
	}
	r := b.rings[name]
	if r == nil {
		r = &logRing{}
		b.rings[name] = r
	}
	return r
}

// LogEntries returns a copy of the entries the device's buffers hold, in
// the order they were logged.
func (d *Device) LogEntries() []LogEntry {
	d.logs.mu.Lock()
	defer d.logs.mu.Unlock()
	var all []seqEntry
	for _, r := range d.logs.rings {
		all = append(all, r.entries...)
	}
	slices.SortFunc(all, func(a, b seqEntry) int { return cmpSeq(a.seq, b.seq) })
	out := make([]LogEntry, len(all))
	for i, e := range all {
		out[i] = e.LogEntry
	}
	return out
}

// LogStats returns what became of the device's log entries so far.
func (d *Device) LogStats() LogStats {
	d.logs.mu.Lock()
	defer d.logs.mu.Unlock()
	return d.logs.stats
}

// LogcatGap is how many entries following logcat commands lost to full
// buffers (LogStats().Lost).
func (d *Device) LogcatGap() int { return d.LogStats().Lost }

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// logCursor is where a reader is in each buffer it reads: the index of
// the next entry.
type logCursor map[string]int

// clear empties the named buffers (logcat -c).
func (b *logBuffer) clear(names []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range names {
		r := b.ring(n)
		r.base = r.end()
		r.entries, r.size = nil, 0
	}
}

// snapshot returns the entries the named buffers hold, in logging order,
// each with its index in its buffer, and a cursor past them all.
func (b *logBuffer) snapshot(names []string) (es []seqEntry, idx []int, end logCursor) {
	b.mu.Lock()
	defer b.mu.Unlock()
	end = logCursor{}
	for _, n := range names {
		r := b.ring(n)
		es = append(es, r.entries...)
		end[n] = r.end()
	}
	slices.SortFunc(es, func(a, b seqEntry) int { return cmpSeq(a.seq, b.seq) })
	pos := map[string]int{}
	for _, n := range names {
		pos[n] = b.ring(n).base
	}
	for _, e := range es {
		idx = append(idx, pos[e.Buffer])
		pos[e.Buffer]++
	}
	return es, idx, end
}

// read returns up to limit entries after cur in the named buffers, in
// logging order, and moves cur past them. Entries pruned before cur read
// them are skipped and counted as lost. wake is closed by the next entry
// logged after this read.
func (b *logBuffer) read(cur logCursor, names []string, limit int) (es []LogEntry, lost int, wake <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var all []seqEntry
	for _, n := range names {
		r := b.ring(n)
		if cur[n] < r.prunedTo {
			lost += r.prunedTo - cur[n]
		}
		cur[n] = min(max(cur[n], r.base), r.end())
		from := cur[n] - r.base
		all = append(all, r.entries[from:from+min(limit, len(r.entries)-from)]...)
	}
	slices.SortFunc(all, func(a, b seqEntry) int { return cmpSeq(a.seq, b.seq) })
	all = all[:min(limit, len(all))]
	for _, e := range all {
		cur[e.Buffer]++
		es = append(es, e.LogEntry)
	}
	b.stats.Lost += lost
	if b.wake == nil {
		b.wake = make(chan struct{})
	}
	return es, lost, b.wake
}

// follow counts a following reader until the returned func is called.
func (b *logBuffer) follow() (done func()) {
	b.mu.Lock()
	b.stats.Readers++
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.stats.Readers--
		b.mu.Unlock()
	}
}
