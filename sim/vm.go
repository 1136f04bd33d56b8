package sim

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/jdwp"
)

// PreInitialized is the app name a VM reports before its app is named.
const PreInitialized = alloctrack.PreInitialized

// AppConfig describes a simulated app process.
type AppConfig struct {
	PID     int
	Package string // package and process name
	API     int    // Android API level; the device's when zero
	UserID  uint32
	// Depth is the number of frames recorded per allocation: 16 by
	// default; up to 128 on API 24+, always 16 before.
	Depth int
	// MaxEntries is how many of the newest records a report holds
	// (65,535 by default, as ART 7+).
	MaxEntries int
	// NameAfter keeps the app "<pre-initialized>" for this long after the
	// VM starts; then it is named and an APNM goes to a connected client.
	NameAfter time.Duration
	// WaitingForDebugger makes the VM send WAIT after each handshake.
	WaitingForDebugger bool
	Workload           Workload
	// NotDebuggable makes an app built for release: not in track-jdwp, its
	// JDWP refused; ps still lists it. Heapprofd profiles it only if it is
	// Profileable (<profileable android:shell="true"/>).
	NotDebuggable bool
	Profileable   bool
	// BrokenUnwind gives the app the Android 12/13 ART bug: heapprofd
	// cannot unwind its Java frames, and every stack ends in one unnamed
	// frame.
	BrokenUnwind bool
	// LeakEvery leaks every LeakEvery-th destroyed Activity (with its
	// Fragment and icon) in a static list; 0 means 3, -1 never.
	LeakEvery int
	// Sites are named allocation sites beyond the workload's, allocated
	// only by AllocateAt (site i of them is AllocateAt's site i).
	Sites []NamedSite
}

// Faults are misbehaviours injected into one VM. Counts apply to the next
// that many REAL requests; -1 means every one.
type Faults struct {
	// Latency delays the handling of every request by this much after it
	// arrived, as a slow link does (requests sent together are delayed
	// together).
	Latency time.Duration
	// DebuggerAttached makes the VM behave as one another debugger
	// (Android Studio) holds: below API 28 it accepts and at once closes
	// every new JDWP connection; on API 28 to 33 it leaves the handshake
	// unanswered until the holder leaves (see ServeJDWP).
	DebuggerAttached bool
	// APNMBeforeEcho makes a VM of API 21 to 30 send an APNM (its current
	// name) before echoing the handshake of the next connections, as ART 5
	// to 11 may when it publishes a chunk while a connection is set up.
	APNMBeforeEcho bool
	// HangREAL: REAL requests never answered.
	HangREAL int
	// HangREAQ: REAQ requests never answered, as by a VM too slow to
	// answer in time (the adbconnection thread still moving a report).
	HangREAQ int
	// DropREAL: REAL replies cut in the middle, then the connection closed.
	DropREAL int
	// CorruptREAL: reports with an out-of-range class index.
	CorruptREAL int
	// TruncateREAL: reports cut short inside well-formed packets.
	TruncateREAL int
	// ForeignProfiler: a heapprofd session not the daemon's (Android
	// Studio, another host) profiles the app, so heapprofd rejects the
	// next session of ours that sets up or connects it: that session gets
	// no dump of it, and only its stop lists it (rejected_concurrent). A
	// session that holds the app already keeps it.
	ForeignProfiler bool
	// HeapprofdOverrun and HeapprofdGuardrail: the next that many heapprofd
	// dumps say the shared-memory buffer overran, or a guardrail was hit,
	// and end the app's profile in that session.
	HeapprofdOverrun   int
	HeapprofdGuardrail int
	// HeapDump makes the app's heap dumps (am dumpheap) go wrong
	// (dumpheap.go).
	HeapDump DumpFault
}

// Stats count what a VM was sent.
type Stats struct {
	Connections int // JDWP connections served (handshake done)
	Refused     int // connections closed at once (second debugger, bad handshake)
	// Queued are connections a held VM (API 28 to 33) left unread now;
	// Stale those it took after the holder left, to find their client
	// gone (each costs a real VM an EPIPE, and an fd meanwhile).
	Queued, Stale int
	Chunks        map[string]int // DDM requests by chunk type
	NonDDM        int            // JDWP commands that were not DDM: should stay 0
	Crashed       bool           // a Dalvik VM died of a REAL after REAE 1 then REAE 0
	Enables       int            // REAE 1 received
	Disables      int            // REAE 0 received
	ReportsSent   int            // REAL replies sent whole
	TrackingOn    bool
	Allocations   uint64 // every allocation made, tracked or not
	RecordsKept   int    // records now in the tracker
	WindowsEnded  int
	// AllocationsAtFirstEnable and AllocationsAtLastReport are Allocations
	// when tracking was first turned on and when the last whole report was
	// built: what was allocated between them is what a client could have
	// seen (a coverage measurement's denominator).
	AllocationsAtFirstEnable uint64
	AllocationsAtLastReport  uint64
	Enabled                  bool // tracking was ever turned on
}

type record struct {
	site   uint32
	size   uint32
	thread uint16
	seg    int32 // the test run's segment it was made in (instrument.go)
}

// VM is a simulated app process: ART's JDWP/DDM behaviour for the
// allocation tracker, a seeded workload, and the ground truth of what it
// allocated while tracking was on.
type VM struct {
	cfg   AppConfig
	prog  *program
	start time.Time

	mu           sync.Mutex
	alive        bool
	named        bool
	attached     bool // ActivityThread.attach ran: "<pre-initialized>" from here until named
	staleWaiting int  // queued connections whose clients left while the VM was held
	// dalvikRingFreed: Dalvik (API < 21) turned tracking off after it was
	// on, which frees its ring; a REAL now crashes the app.
	dalvikRingFreed bool
	client          net.Conn
	wmu             sync.Mutex // serialises writes to client
	faults          Faults
	stats           Stats
	rng             *rand.Rand
	zipf            *rand.Zipf
	last            time.Time // generated up to here
	carry           float64
	paused          bool
	tracking        bool
	ring            []record
	head            int // next write position in ring
	n               int // records in ring
	truth           *truthAcc
	reported        *truthAcc
	windows         []Truth
	total           *truthAcc
	closedReported  *truthAcc // Reported of every closed window
	// unconfirmed is the last report sent on the connection until the
	// client's next REAL or REAQ shows it arrived (the daemon asks
	// nothing more of a session before a report's reply is in); inDoubt
	// holds the reports still unconfirmed when their connection ended:
	// the client may or may not have received them.
	unconfirmed *alloctrack.Count
	inDoubt     []alloctrack.Count
	killed      chan struct{}
	trace       []string // the newest requests, oldest first
	vmPacketID  uint32   // id of the VM's next packet of its own (WAIT, APNM)

	hps        *hpStacks          // heapprofd call stacks (Android 12+)
	hp         *hpSampler         // while a heapprofd session profiles the VM
	hpAlloc    []alloctrack.Count // per site: allocated while sampled, up to the newest dump
	hpSampled  []alloctrack.Count // per site: samples in dumps
	hpDumps    int
	hpDropped  int
	hpInterval uint64
	hpSessions uint64

	// The Java heap a dump shows (heap.go): one allocation in keepEvery
	// is kept; every recreateEvery allocations the Activity is recreated,
	// every LeakEvery-th destroyed one leaked.
	heap      *simHeap
	heapZipf  *rand.Zipf
	heapOwed  int
	heapSince int
	dumps     int
	// fileWriter writes a file on the VM's device (set by Device.AddVM):
	// where HPDU puts a dump.
	fileWriter func(path string, b []byte)
	// run is the truth of the test run this process serves
	// (instrument.go), nil for other processes.
	run *segTruth
}

// recreateEvery is how many allocations an Activity of a simulated app
// lives.
const recreateEvery = 20000

const maxTrace = 256

// Trace returns the newest requests the VM was sent (up to 256), oldest
// first: chunk types, with REAE shown as "REAE 1" or "REAE 0", and
// non-DDM commands as "JDWP set/cmd".
func (vm *VM) Trace() []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return append([]string(nil), vm.trace...)
}

func (vm *VM) traceLocked(s string) {
	if len(vm.trace) == maxTrace {
		copy(vm.trace, vm.trace[1:])
		vm.trace = vm.trace[:maxTrace-1]
	}
	vm.trace = append(vm.trace, s)
}

// NewVM returns a running VM. api is the device's API level, used when the
// config has none.
func NewVM(cfg AppConfig, api int) *VM {
	if cfg.API == 0 {
		cfg.API = api
	}
	if cfg.API == 0 {
		cfg.API = 30
	}
	switch {
	case cfg.API < 24 || cfg.Depth <= 0:
		cfg.Depth = 16
	case cfg.Depth > 128:
		cfg.Depth = 128
	}
	// Dalvik keeps 65,536 records, and a full report's u16 count wraps to
	// 0 (vm/AllocTracker.cpp); ART reports at most 65,535.
	ring := allocreport.MaxEntries
	if cfg.API < 21 {
		ring = DalvikRecords
	}
	if cfg.MaxEntries <= 0 || cfg.MaxEntries > ring {
		cfg.MaxEntries = ring
	}
	if cfg.Package == "" {
		cfg.Package = "com.example.app"
	}
	prog := newProgram(cfg.Workload, cfg.Package, cfg.Sites...)
	cfg.Workload = prog.w
	rng := rand.New(rand.NewPCG(prog.w.Seed, uint64(cfg.PID)))
	vm := &VM{
		cfg:            cfg,
		prog:           prog,
		start:          time.Now(),
		alive:          true,
		named:          cfg.NameAfter <= 0,
		attached:       cfg.NameAfter <= 0,
		rng:            rng,
		zipf:           rand.NewZipf(rng, prog.w.Skew, 1, uint64(prog.work-1)),
		ring:           make([]record, cfg.MaxEntries),
		truth:          newTruthAcc(len(prog.sites)),
		reported:       newTruthAcc(len(prog.sites)),
		total:          newTruthAcc(len(prog.sites)),
		closedReported: newTruthAcc(len(prog.sites)),
		killed:         make(chan struct{}),
		stats:          Stats{Chunks: map[string]int{}},
	}
	vm.last = vm.start
	vm.heap = newSimHeap(prog, cfg.Package, cfg.API, prog.w.Seed^uint64(cfg.PID))
	vm.heapZipf = rand.NewZipf(vm.heap.rng, prog.w.Skew, 1, uint64(prog.work-1))
	if cfg.API >= APIHeapprofdJava {
		vm.hps = prog.heapprofdStacks(cfg.Package, cfg.BrokenUnwind)
		vm.hpAlloc = make([]alloctrack.Count, len(prog.sites))
		vm.hpSampled = make([]alloctrack.Count, len(prog.sites))
	}
	if cfg.NameAfter > 0 {
		// A starting app: HELO says "" until ActivityThread.attach, which
		// sends APNM("<pre-initialized>"); binding the application sends
		// the real name.
		time.AfterFunc(cfg.NameAfter/2, vm.attach)
		time.AfterFunc(cfg.NameAfter, vm.name)
	}
	return vm
}

// PID is the process id.
func (vm *VM) PID() int { return vm.cfg.PID }

// Config returns the VM's configuration with defaults filled in.
func (vm *VM) Config() AppConfig { return vm.cfg }

// ProcessName is the package name, as ps shows it.
func (vm *VM) ProcessName() string { return vm.cfg.Package }

// AppName is the name HELO reports now.
func (vm *VM) AppName() string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if !vm.named {
		return PreInitialized
	}
	return vm.cfg.Package
}

// Alive tells whether the process runs.
func (vm *VM) Alive() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.alive
}

// Connected tells whether a JDWP client is connected: while one is, the
// VM refuses another.
func (vm *VM) Connected() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.client != nil
}

// Tracking tells whether allocation tracking is on.
func (vm *VM) Tracking() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.tracking
}

// SetFaults replaces the VM's faults.
func (vm *VM) SetFaults(f Faults) {
	vm.mu.Lock()
	vm.faults = f
	vm.freedLocked()
	vm.mu.Unlock()
}

// Faults returns the VM's current faults (counts left).
func (vm *VM) Faults() Faults {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.faults
}

// Stats returns what the VM was sent so far.
func (vm *VM) Stats() Stats {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	s := vm.stats
	s.Chunks = make(map[string]int, len(vm.stats.Chunks))
	for k, v := range vm.stats.Chunks {
		s.Chunks[k] = v
	}
	s.TrackingOn = vm.tracking
	s.RecordsKept = vm.n
	return s
}

// Pause stops (true) or resumes (false) the workload's timed allocations.
func (vm *VM) Pause(p bool) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.advanceLocked(time.Now())
	vm.paused = p
}

// Allocate makes n allocations now, on top of the timed workload.
func (vm *VM) Allocate(n int) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.advanceLocked(time.Now())
	vm.allocLocked(n)
}

// Kill ends the process: its JDWP connection closes and it stops
// allocating. The device must be told separately (Device.RemoveVM).
func (vm *VM) Kill() {
	vm.mu.Lock()
	if !vm.alive {
		vm.mu.Unlock()
		return
	}
	vm.alive = false
	c := vm.client
	close(vm.killed)
	vm.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// dropClient closes the current JDWP connection, if any.
func (vm *VM) dropClient() {
	vm.mu.Lock()
	c := vm.client
	vm.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// attach is ActivityThread.attach: the app is "<pre-initialized>" now,
// and a connected client is told so (from Android 10 as the package name
// too).
func (vm *VM) attach() {
	vm.mu.Lock()
	if vm.attached || !vm.alive {
		vm.mu.Unlock()
		return
	}
	vm.attached = true
	c := vm.client
	vm.mu.Unlock()
	if c != nil {
		a := &ddms.AppName{Name: PreInitialized, UserID: vm.cfg.UserID}
		if vm.cfg.API >= 29 {
			a.PackageName, a.Optional = PreInitialized, 2
		}
		vm.writeChunk(c, vm.nextPacketID(), false, ddms.APNM, ddms.EncodeAppName(a))
	}
}

// helloName is the name HELO gives: "" before attach.
func (vm *VM) helloName() (name, pkg string) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	switch {
	case !vm.attached:
		return "", ""
	case !vm.named:
		return PreInitialized, PreInitialized
	}
	return vm.cfg.Package, vm.cfg.Package
}

func (vm *VM) name() {
	vm.mu.Lock()
	if vm.named || !vm.alive {
		vm.mu.Unlock()
		return
	}
	vm.named, vm.attached = true, true
	c := vm.client
	vm.mu.Unlock()
	if c != nil {
		a := &ddms.AppName{Name: vm.cfg.Package, UserID: vm.cfg.UserID, PackageName: vm.cfg.Package, Optional: 2}
		vm.writeChunk(c, vm.nextPacketID(), false, ddms.APNM, ddms.EncodeAppName(a))
	}
}

// advanceLocked makes the allocations the timed workload owes up to now.
func (vm *VM) advanceLocked(now time.Time) {
	if h := vm.hp; h != nil && !h.on && !now.Before(h.onAt) {
		// Heapprofd's sampling starts inside this stretch: what came
		// before it is not sampled.
		if h.onAt.After(vm.last) {
			vm.generateLocked(h.onAt)
		}
		h.on = true
	}
	vm.generateLocked(now)
}

// generateLocked makes the timed workload's allocations from vm.last to
// now, spread evenly over that span.
func (vm *VM) generateLocked(now time.Time) {
	from := vm.last
	if !now.After(from) {
		// A time read before the lock was taken: the VM's time does not
		// go back (its allocations' times, heapprofd's windows).
		return
	}
	dt := now.Sub(from).Seconds()
	vm.last = now
	if vm.paused || !vm.alive || vm.prog.w.Rate <= 0 {
		return
	}
	owed := vm.prog.w.Rate*dt + vm.carry
	n := int(owed)
	vm.carry = owed - float64(n)
	vm.allocSpanLocked(n, from, now)
}

// allocLocked makes n allocations at the VM's present time (vm.last:
// advanceLocked has run).
func (vm *VM) allocLocked(n int) { vm.allocSpanLocked(n, vm.last, vm.last) }

// allocSpanLocked makes n allocations, the k-th (from 1) at
// from + k/n of the span to to: heapprofd's sampler takes each at its time.
func (vm *VM) allocSpanLocked(n int, from, to time.Time) {
	vm.stats.Allocations += uint64(n)
	vm.heapLocked(n)
	sampling := vm.hp != nil && vm.hp.on
	if !vm.tracking && !sampling {
		// Untracked allocations leave no trace; the generator's state need
		// not advance for them.
		return
	}
	threads := vm.prog.w.Threads
	span := to.Sub(from)
	for k := range n {
		si := uint32(vm.zipf.Uint64())
		s := &vm.prog.sites[si]
		size := s.size
		if s.arr {
			size = 16 + 8*uint32(vm.rng.IntN(512))
		}
		th := vm.threadID(vm.rng.IntN(threads))
		vm.recordLocked(si, size, th, sampling, from.Add(time.Duration(float64(span)*float64(k+1)/float64(n))))
	}
}

// recordLocked makes one allocation of site si: heapprofd samples it if
// sampling (as made at time at), the tracker records it if on, and a
// test run's truth counts it.
func (vm *VM) recordLocked(si, size uint32, th uint16, sampling bool, at time.Time) {
	if sampling {
		vm.sampleLocked(si, size, at)
	}
	seg := vm.run.alloc(si, size, vm.tracking)
	if !vm.tracking {
		return
	}
	vm.ring[vm.head] = record{site: si, size: size, thread: th, seg: seg}
	vm.head++
	if vm.head == len(vm.ring) {
		vm.head = 0
	}
	if vm.n < len(vm.ring) {
		vm.n++
	}
	vm.truth.add(si, size)
	vm.total.add(si, size)
}

// heapLocked keeps one in keepEvery of n allocations in the app's heap,
// and recreates the Activity every recreateEvery allocations.
func (vm *VM) heapLocked(n int) {
	vm.heapOwed += n
	for ; vm.heapOwed >= keepEvery; vm.heapOwed -= keepEvery {
		si := vm.heapZipf.Uint64()
		s := &vm.prog.sites[si]
		size := s.size
		if s.arr {
			size = 16 + 8*uint32(vm.heap.rng.IntN(512))
		}
		vm.heap.keep(vm.prog, s, size)
	}
	vm.heapSince += n
	for ; vm.heapSince >= recreateEvery; vm.heapSince -= recreateEvery {
		vm.recreateLocked()
	}
}

func (vm *VM) recreateLocked() {
	every := vm.cfg.LeakEvery
	if every == 0 {
		every = 3
	}
	vm.heap.recreate(every > 0 && (vm.heap.destroys+1)%every == 0)
}

// Recreate destroys the app's Activity and starts another, as a rotation
// does; every LeakEvery-th destroyed one stays in the app's static list.
func (vm *VM) Recreate() {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.recreateLocked()
}

// HeapDump returns a dump of the app's heap in ART's layout, and what it
// must show. The app has run its workload up to now first, tracked or not:
// it allocates either way, as an app does.
func (vm *VM) HeapDump() ([]byte, HeapTruth) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.advanceLocked(time.Now())
	vm.dumps++
	return vm.heap.dump(time.Now()), vm.heap.truth()
}

// HeapDumpBitmaps is HeapDump with every Bitmap's pixels in the dump, as
// am dumpheap -b FORMAT makes them from Android 15.
func (vm *VM) HeapDumpBitmaps(format string) (dump []byte, truth HeapTruth) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.advanceLocked(time.Now())
	vm.dumps++
	vm.heap.withBitmaps(format, func() {
		dump, truth = vm.heap.dump(time.Now()), vm.heap.truth()
	})
	return dump, truth
}

// HeapDumps is how many dumps of the heap were taken.
func (vm *VM) HeapDumps() int {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.dumps
}

// threadID is the id a report shows for allocating thread k: a VM thread
// id before API 24, the Linux tid (cut to 16 bits) from then on.
func (vm *VM) threadID(k int) uint16 {
	if vm.cfg.API < 24 {
		return uint16(1 + k)
	}
	return uint16(vm.cfg.PID + k)
}

// setTrackingLocked applies REAE: enabling starts empty unless already on;
// disabling clears every record and closes the window.
func (vm *VM) setTrackingLocked(on bool) {
	if on {
		vm.stats.Enables++
		if !vm.stats.Enabled {
			vm.stats.Enabled = true
			vm.stats.AllocationsAtFirstEnable = vm.stats.Allocations
		}
		if vm.tracking {
			return
		}
		vm.tracking = true
		vm.head, vm.n = 0, 0
		vm.truth.reset()
		vm.reported.reset()
		return
	}
	vm.stats.Disables++
	if !vm.tracking {
		return
	}
	vm.tracking = false
	vm.head, vm.n = 0, 0
	vm.closeWindowLocked()
}

const maxWindows = 4096

func (vm *VM) closeWindowLocked() {
	w := Truth{Allocated: vm.truth.snapshot(vm.prog, vm.cfg.Depth), Reported: vm.reported.snapshot(vm.prog, vm.cfg.Depth)}
	if len(vm.windows) == maxWindows {
		copy(vm.windows, vm.windows[1:])
		vm.windows = vm.windows[:maxWindows-1]
	}
	vm.windows = append(vm.windows, w)
	vm.closedReported.addAll(vm.reported)
	vm.run.closeWindow()
	vm.stats.WindowsEnded++
	vm.truth.reset()
	vm.reported.reset()
}

// reportLocked encodes the tracker's records, newest first from API 24,
// oldest first before, each stack cut to the VM's depth. It also notes the
// records as reported in the window's truth.
func (vm *VM) reportLocked() []byte {
	r := vm.prog.tables // copy: tables shared, records our own
	r.Allocations = make([]allocreport.Allocation, 0, vm.n)
	vm.reported.reset()
	vm.run.resetReported()
	emit := func(rec record) {
		s := &vm.prog.sites[rec.site]
		fr := s.frames
		if len(fr) > vm.cfg.Depth {
			fr = fr[:vm.cfg.Depth]
		}
		r.Append(rec.size, rec.thread, s.class, fr)
		vm.reported.add(rec.site, rec.size)
		vm.run.report(rec.seg, rec.site, rec.size)
	}
	oldest := (vm.head - vm.n + len(vm.ring)) % len(vm.ring)
	if vm.cfg.API >= 24 {
		for i := vm.n - 1; i >= 0; i-- {
			emit(vm.ring[(oldest+i)%len(vm.ring)])
		}
	} else {
		for i := range vm.n {
			emit(vm.ring[(oldest+i)%len(vm.ring)])
		}
	}
	b, err := allocreport.Encode(&r)
	if err != nil {
		panic(err) // the simulator's own tables and records: cannot fail
	}
	return b
}

// ServeJDWP serves one JDWP connection as the app's VM: one client at a
// time. A second is accepted and closed at once below API 28 (Dalvik, and
// ART's JDWP thread up to 8.1); on API 28 to 33 ART's adbconnection reads
// its control socket only while no client is connected, so the second
// connection waits, unread, until the holder leaves, and is then taken
// (ART's commit a9ba4e358e changed this in Android 14).
func (vm *VM) ServeJDWP(c net.Conn) {
	defer c.Close()
	vm.mu.Lock()
	held := vm.client != nil || vm.faults.DebuggerAttached
	if vm.alive && held && vm.cfg.API >= 28 && vm.cfg.API <= 33 {
		vm.stats.Queued++
		vm.mu.Unlock()
		qc, st := vm.queue(c)
		vm.mu.Lock()
		switch st {
		case queueGone:
			// The client left while the VM was held: the fd stays queued
			// until the VM is free, and is then found stale.
			vm.staleWaiting++
			vm.mu.Unlock()
			return
		case queueStale:
			vm.stats.Queued--
			vm.stats.Stale++
			vm.mu.Unlock()
			return
		case queueKilled:
			vm.stats.Queued--
			vm.mu.Unlock()
			return
		}
		vm.stats.Queued--
		c = qc
		held = vm.client != nil || vm.faults.DebuggerAttached
	}
	if !vm.alive || held {
		vm.stats.Refused++
		vm.mu.Unlock()
		return
	}
	vm.client = c
	vm.mu.Unlock()
	defer func() {
		vm.mu.Lock()
		if vm.client == c {
			vm.client = nil
			vm.freedLocked()
		}
		vm.mu.Unlock()
	}()

	if !vm.handshake(c) {
		vm.mu.Lock()
		vm.stats.Refused++
		vm.mu.Unlock()
		return
	}
	vm.mu.Lock()
	vm.stats.Connections++
	vm.mu.Unlock()
	// A reader stamps each packet's arrival, so that injected latency
	// delays delivery (packets sent together arrive together) rather than
	// adding up per packet.
	in := make(chan arrival, 16)
	go func() {
		defer close(in)
		for {
			p, err := jdwp.ReadPacket(c, 1<<20)
			if err != nil {
				return
			}
			in <- arrival{p: p, at: time.Now()}
		}
	}()
	defer func() {
		// Free the VM for the next client before the stream closes, so a
		// client that sees the close can reconnect at once.
		vm.mu.Lock()
		if vm.client == c {
			vm.client = nil
			vm.freedLocked()
		}
		if vm.unconfirmed != nil {
			vm.inDoubt = append(vm.inDoubt, *vm.unconfirmed)
			vm.unconfirmed = nil
		}
		vm.mu.Unlock()
		c.Close()
		for range in {
		}
	}()
	for a := range in {
		if !vm.handle(c, &a.p, a.at) {
			return
		}
	}
}

type queueState int

const (
	queueTaken  queueState = iota // the VM is free and took it
	queueStale                    // the VM is free, and the client had gone
	queueGone                     // the client went while the VM was held
	queueKilled                   // the process died
)

// queue holds a connection a held VM does not read: its bytes are kept
// as they come, and once the VM is free (no client, no other debugger)
// it is taken with them, if its client is still there.
func (vm *VM) queue(c net.Conn) (net.Conn, queueState) {
	var buf bytes.Buffer
	var mu sync.Mutex
	gone := make(chan struct{})
	go func() {
		b := make([]byte, 512)
		for {
			n, err := c.Read(b)
			mu.Lock()
			buf.Write(b[:n])
			mu.Unlock()
			if err != nil {
				close(gone)
				return
			}
		}
	}()
	free := func() bool {
		vm.mu.Lock()
		defer vm.mu.Unlock()
		return vm.client == nil && !vm.faults.DebuggerAttached
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-vm.killed:
			return nil, queueKilled
		case <-gone:
			if free() {
				return nil, queueStale
			}
			return nil, queueGone
		case <-t.C:
		}
		if !free() {
			continue
		}
		// Stop the reader and hand over what it read.
		c.SetReadDeadline(time.Now())
		<-gone
		c.SetReadDeadline(time.Time{})
		mu.Lock()
		defer mu.Unlock()
		return &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(buf.Bytes()), c)}, queueTaken
	}
}

// freedLocked accounts for a VM that may have become free: the
// connections whose clients left while it was held are found stale.
func (vm *VM) freedLocked() {
	if vm.client == nil && !vm.faults.DebuggerAttached && vm.staleWaiting > 0 {
		vm.stats.Queued -= vm.staleWaiting
		vm.stats.Stale += vm.staleWaiting
		vm.staleWaiting = 0
	}
}

// prefixConn is a connection whose first bytes were read already.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// handshake reads the client's handshake. From API 28 the 14 bytes must
// arrive in one read, as ART's adbconnection plugin requires.
func (vm *VM) handshake(c net.Conn) bool {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	buf := make([]byte, len(jdwp.Handshake))
	if vm.cfg.API >= 28 {
		n, err := c.Read(buf)
		if err != nil || n != len(buf) || string(buf) != jdwp.Handshake {
			return false
		}
	} else if _, err := io.ReadFull(c, buf); err != nil || string(buf) != jdwp.Handshake {
		return false
	}
	vm.mu.Lock()
	early := vm.faults.APNMBeforeEcho && vm.cfg.API >= 21 && vm.cfg.API <= 30
	vm.mu.Unlock()
	if early {
		name, pkg := vm.helloName()
		a := &ddms.AppName{Name: name, UserID: vm.cfg.UserID}
		if vm.cfg.API >= 29 {
			a.PackageName, a.Optional = pkg, 2
		}
		if vm.writeChunk(c, vm.nextPacketID(), false, ddms.APNM, ddms.EncodeAppName(a)) != nil {
			return false
		}
	}
	vm.wmu.Lock()
	defer vm.wmu.Unlock()
	_, err := c.Write(buf)
	return err == nil
}

// writeChunk writes one packet carrying a chunk: a reply to id, or a
// VM-originated command.
func (vm *VM) writeChunk(c net.Conn, id uint32, reply bool, t ddms.Type, payload []byte) error {
	p := jdwp.Packet{ID: id, Data: ddms.EncodeChunk(t, payload)}
	if reply {
		p.Flags = jdwp.FlagReply
	} else {
		p.CommandSet, p.Command = ddms.CommandSet, ddms.Command
	}
	vm.wmu.Lock()
	defer vm.wmu.Unlock()
	return jdwp.WritePacket(c, &p)
}

func (vm *VM) writeEmptyReply(c net.Conn, id uint32, code uint16) error {
	vm.wmu.Lock()
	defer vm.wmu.Unlock()
	return jdwp.WritePacket(c, &jdwp.Packet{ID: id, Flags: jdwp.FlagReply, ErrorCode: code})
}

// nextPacketID numbers the packets the VM sends on its own as the VM does:
// from 0x10000000 up to API 27 (Dalvik, ART ≤ 8.1), from 0x80000001 after.
func (vm *VM) nextPacketID() uint32 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.vmPacketID == 0 {
		vm.vmPacketID = 0x80000001
		if vm.cfg.API < 28 {
			vm.vmPacketID = 0x10000000
		}
	}
	id := vm.vmPacketID
	vm.vmPacketID++
	return id
}

// DalvikRecords is the size of Dalvik's allocation ring (Android 4.4).
const DalvikRecords = 65536

// ReportBuildPerFrame is how long the simulated VM takes per recorded
// frame to build a report, holding its tracker lock (a model, not a
// measurement: 65,535 entries of 16 frames take about 40 ms).
const ReportBuildPerFrame = 40 * time.Nanosecond

// jdwpNotImplemented is JDWP's NOT_IMPLEMENTED error code.
const jdwpNotImplemented = 99

// handle answers one packet; false ends the connection.
type arrival struct {
	p  jdwp.Packet
	at time.Time
}

func (vm *VM) handle(c net.Conn, p *jdwp.Packet, at time.Time) bool {
	if p.IsReply() {
		return true
	}
	if !ddms.IsDDM(p.CommandSet, p.Command) {
		vm.mu.Lock()
		vm.stats.NonDDM++
		vm.traceLocked(fmt.Sprintf("JDWP %d/%d", p.CommandSet, p.Command))
		vm.mu.Unlock()
		return vm.writeEmptyReply(c, p.ID, jdwpNotImplemented) == nil
	}
	ch, err := ddms.DecodeChunk(p.Data)
	if err != nil {
		// Real VMs never answer FAIL: ART 9+ ignores a short or oversized
		// chunk (adbconnection), older VMs send an empty reply.
		return vm.noAnswer(c, p.ID)
	}

	vm.mu.Lock()
	vm.advanceLocked(time.Now())
	vm.stats.Chunks[ch.Type.String()]++
	if ch.Type == ddms.REAL || ch.Type == ddms.REAQ {
		vm.unconfirmed = nil // the client has the last report
	}
	if ch.Type == ddms.REAE && len(ch.Data) == 1 {
		vm.traceLocked(fmt.Sprintf("REAE %d", ch.Data[0]))
	} else {
		vm.traceLocked(ch.Type.String())
	}
	latency := vm.faults.Latency
	api := vm.cfg.API
	vm.mu.Unlock()
	if wait := time.Until(at.Add(latency)); latency > 0 && wait > 0 {
		select {
		case <-time.After(wait):
		case <-vm.killed:
			return false
		}
	}

	switch ch.Type {
	case ddms.HELO:
		h := vm.hello()
		vm.mu.Lock()
		wait := vm.cfg.WaitingForDebugger
		vm.mu.Unlock()
		if wait {
			// DdmHandleHello.handleHELO: a VM in waitForDebugger says so
			// before its reply.
			if err := vm.writeChunk(c, vm.nextPacketID(), false, ddms.WAIT, ddms.EncodeWait(ddms.WaitForDebugger)); err != nil {
				return false
			}
		}
		return vm.writeChunk(c, p.ID, true, ddms.HELO, ddms.EncodeHello(h)) == nil
	case ddms.FEAT:
		return vm.writeChunk(c, p.ID, true, ddms.FEAT, ddms.EncodeFeatures(features)) == nil
	case ddms.REAE:
		on, err := ddms.DecodeBool("REAE", ch.Data)
		if err != nil || api >= 31 {
			// Android 12 removed the handler: no effect, and no answer.
			return vm.noAnswer(c, p.ID)
		}
		vm.mu.Lock()
		vm.advanceLocked(time.Now())
		if !on && vm.tracking && vm.cfg.API < 21 {
			vm.dalvikRingFreed = true
		}
		if on {
			vm.dalvikRingFreed = false
		}
		vm.setTrackingLocked(on)
		vm.mu.Unlock()
		if api >= 28 {
			return true // Android 9+: REAE has no reply
		}
		return vm.writeEmptyReply(c, p.ID, 0) == nil
	case ddms.HPDU, ddms.HPDS:
		return vm.serveHeapDump(c, p.ID, ch)
	case ddms.REAQ:
		vm.mu.Lock()
		hang := take(&vm.faults.HangREAQ)
		vm.mu.Unlock()
		if api >= 31 || hang {
			return true // Android 12+: no reply on the DDM-only path
		}
		return vm.writeChunk(c, p.ID, true, ddms.REAQ, ddms.EncodeBool(vm.Tracking())) == nil
	case ddms.REAL:
		if api >= 31 {
			return true
		}
		vm.mu.Lock()
		crash := vm.dalvikRingFreed
		vm.mu.Unlock()
		if crash {
			// Dalvik frees its ring when tracking is turned off, and
			// REAL then reads through a NULL pointer (AllocTracker.cpp):
			// the app dies.
			vm.mu.Lock()
			vm.stats.Crashed = true
			vm.mu.Unlock()
			vm.Kill()
			return false
		}
		return vm.serveREAL(c, p.ID)
	}
	return vm.noAnswer(c, p.ID)
}

// noAnswer is what a real VM does with a chunk it has no handler for:
// ART 9+ on the DDM-only path sends nothing; Dalvik and ART up to 8.1
// send an empty reply. None sends FAIL.
func (vm *VM) noAnswer(c net.Conn, id uint32) bool {
	if vm.cfg.API >= 28 {
		return true
	}
	return vm.writeEmptyReply(c, id, 0) == nil
}

var features = []string{
	"hprof-heap-dump", "hprof-heap-dump-streaming", "method-trace-profiling",
	"method-trace-profiling-streaming", "view-hierarchy", "method-sample-profiling",
}

func (vm *VM) hello() *ddms.Hello {
	h := &ddms.Hello{
		Version:  1,
		PID:      uint32(vm.cfg.PID),
		VMIdent:  "Dalvik v2.1.0",
		UserID:   vm.cfg.UserID,
		ABI:      "64-bit (x86_64)",
		JVMFlags: "CheckJNI=false",
	}
	h.AppName, h.PackageName = vm.helloName()
	// The optional fields arrived over the years (an approximation by API
	// level; the decoder takes whatever is present).
	switch api := vm.cfg.API; {
	case api >= 30:
		h.Optional = 5
	case api >= 24:
		h.Optional = 4
	case api >= 21:
		h.Optional = 3
	case api >= 17:
		h.Optional = 1
	}
	if vm.cfg.API < 21 {
		h.VMIdent = "Dalvik v1.6.0"
	}
	if h.Optional < 5 {
		h.PackageName = ""
	}
	return h
}

func take(n *int) bool {
	switch {
	case *n < 0:
		return true
	case *n > 0:
		*n--
		return true
	}
	return false
}

func (vm *VM) serveREAL(c net.Conn, id uint32) bool {
	vm.mu.Lock()
	vm.advanceLocked(time.Now())
	if take(&vm.faults.HangREAL) {
		vm.mu.Unlock()
		return true
	}
	// At most one fault per request, so that counts mean requests.
	drop := take(&vm.faults.DropREAL)
	corrupt := !drop && take(&vm.faults.CorruptREAL)
	truncate := !drop && !corrupt && take(&vm.faults.TruncateREAL)
	var report []byte
	kept := vm.run.keepReported()
	if vm.tracking {
		report = vm.reportLocked()
		// The VM builds the report under its tracker lock: every thread
		// that allocates meanwhile waits (here: Allocate and the timed
		// workload, which need vm.mu).
		if n := vm.n; n > 0 {
			time.Sleep(time.Duration(n*vm.cfg.Depth) * ReportBuildPerFrame)
		}
	} else {
		report, _ = allocreport.Encode(&allocreport.Report{})
	}
	if corrupt || truncate || drop {
		// A bad report is not a delivered one.
		vm.reported.reset()
		vm.run.resetReported()
	} else {
		vm.stats.ReportsSent++
		vm.stats.AllocationsAtLastReport = vm.stats.Allocations
	}
	var sent *alloctrack.Count
	if vm.tracking && !corrupt && !truncate && !drop {
		t := vm.reported.total()
		sent = &t
	}
	vm.mu.Unlock()

	switch {
	case corrupt && len(report) >= allocreport.HeaderLen:
		report = append([]byte(nil), report...)
		if len(report) > allocreport.HeaderLen+allocreport.EntryHeaderLen {
			report[allocreport.HeaderLen+6], report[allocreport.HeaderLen+7] = 0xff, 0xff // class index
		} else {
			report[5], report[6], report[7], report[8] = 0xff, 0xff, 0xff, 0xff // strings offset
		}
	case truncate:
		report = report[:len(report)/2]
	}
	if drop {
		p := jdwp.Packet{ID: id, Flags: jdwp.FlagReply, Data: ddms.EncodeChunk(ddms.REAL, report)}
		b := jdwp.AppendPacket(nil, &p)
		vm.wmu.Lock()
		c.Write(b[:len(b)/2])
		vm.wmu.Unlock()
		return false
	}
	// The report counts as sent from its first byte: if the connection
	// ends while it is being written, the client may have none of it, and
	// it is listed in doubt when the connection's end is handled.
	if sent != nil {
		vm.mu.Lock()
		vm.unconfirmed = sent
		vm.mu.Unlock()
	}
	if err := vm.writeChunk(c, id, true, ddms.REAL, report); err != nil {
		// The process died (or the client left) before the reply was
		// written: no client has this report, so the run's truth keeps
		// the window's last delivered one. (The window's truth lists it
		// in doubt instead.)
		vm.mu.Lock()
		vm.run.undoReported(kept)
		vm.mu.Unlock()
		return false
	}
	return true
}

// InDoubt lists the reports (their allocations and bytes) the VM sent
// whose connection ended before the client asked anything more: they were
// counted as reported, but the transport may have lost them, as it does
// when a cable is pulled or the adb server dies with a report on its way.
func (vm *VM) InDoubt() []alloctrack.Count {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return slices.Clone(vm.inDoubt)
}
