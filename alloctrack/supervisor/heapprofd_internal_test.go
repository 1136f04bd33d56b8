package supervisor

import (
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
)

// A dump can be read after its process ended and left the process list
// (a restart, or a list taken while a session's last dump was on its
// way): the process is still named, so its samples count (they were lost
// under load, e2e TestHeapprofdFaultsThroughADB).
func TestHeapprofdNamesAProcessThatLeft(t *testing.T) {
	packages, err := NewFilter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{cfg: DaemonConfig{Packages: packages}}
	tg := &hpTarget{d: d, w: &hpWatch{jdwp: map[int]bool{}, procs: map[int]string{}, changed: make(chan struct{}, 1)},
		targets: map[string]*heapprofd.Target{}, shown: map[string]bool{}}
	tg.onProcesses([]Process{{PID: 10035, Name: "com.example.restart"}, {PID: 10042, Name: "com.example.other"}})
	tg.onProcesses([]Process{{PID: 10042, Name: "com.example.other"}, {PID: 10049, Name: "com.example.restart"}})
	for pid, want := range map[int]string{10035: "com.example.restart", 10042: "com.example.other", 10049: "com.example.restart", 1: ""} {
		if got := tg.w.nameOf(pid); got != want {
			t.Errorf("pid %d named %q, want %q", pid, got, want)
		}
	}
}
