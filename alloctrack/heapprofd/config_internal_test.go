package heapprofd

import (
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/perfetto"
)

// TestHeapprofdTraceConfig: the config is one real perfetto accepts and
// whose dumps reach the file in time, bounded on the device.
func TestHeapprofdTraceConfig(t *testing.T) {
	s := &Session{Serial: "emulator-5554", Window: 10 * time.Second, Processes: []string{"com.example.app", "com.example.app:remote"}}
	s.Config.Fill(s.Window)
	s.name = "alloctrack-x"
	cfg, err := perfetto.ParseHeapprofdSession(s.traceConfig().Marshal())
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case cfg.OutputPath != "":
		t.Error("output_path set: perfetto refuses it together with -o")
	case cfg.FlushPeriodMS == 0 || cfg.FlushPeriodMS > 5000:
		t.Errorf("flush_period_ms %d: a dump's tail waits for the next dump without a flush", cfg.FlushPeriodMS)
	case cfg.DumpPhaseMS > 1000 || cfg.DumpIntervalMS != 10000:
		t.Errorf("dump phase %d ms, interval %d ms", cfg.DumpPhaseMS, cfg.DumpIntervalMS)
	case cfg.BufferKB != 16<<10 || cfg.MaxFileSizeBytes != 256<<20:
		t.Errorf("buffer %d KiB, max file %d bytes", cfg.BufferKB, cfg.MaxFileSizeBytes)
	case !cfg.BlockClient || cfg.BlockClientTimeoutUS != 500000:
		t.Errorf("block_client %v timeout %d us", cfg.BlockClient, cfg.BlockClientTimeoutUS)
	case cfg.FlushTimeoutMS == 0 || time.Duration(cfg.FlushTimeoutMS)*time.Millisecond >= s.Config.StopTimeout:
		t.Errorf("flush_timeout_ms %d is not below the stop timeout %v", cfg.FlushTimeoutMS, s.Config.StopTimeout)
	case len(cfg.ProcessCmdlines) != 2 || len(cfg.PIDs) != 0:
		t.Errorf("targets %v %v", cfg.ProcessCmdlines, cfg.PIDs)
	case cfg.UniqueSessionName != "alloctrack-x" || !cfg.WriteIntoFile || cfg.DurationMS != 0:
		t.Errorf("session %+v", cfg)
	}
}

// TestHeapprofdDumpInterval: a test run dumps more often than it reads;
// the dump interval is the window's by default and at least 100 ms.
func TestHeapprofdDumpInterval(t *testing.T) {
	for _, tt := range []struct {
		window, dump     time.Duration
		wantMS, wantPhMS uint32
	}{
		{time.Second, 0, 1000, 1000},
		{time.Second, 250 * time.Millisecond, 250, 250},
		{5 * time.Second, 2 * time.Second, 2000, 1000},
		{time.Second, 10 * time.Millisecond, 100, 100},
	} {
		s := &Session{Window: tt.window, Config: Config{DumpInterval: tt.dump}}
		s.Config.Fill(s.Window)
		cfg, err := perfetto.ParseHeapprofdSession(s.traceConfig().Marshal())
		if err != nil {
			t.Fatal(err)
		}
		if cfg.DumpIntervalMS != tt.wantMS || cfg.DumpPhaseMS != tt.wantPhMS {
			t.Errorf("window %v, dump interval %v: dump_interval_ms %d, dump_phase_ms %d; want %d, %d", tt.window, tt.dump, cfg.DumpIntervalMS, cfg.DumpPhaseMS, tt.wantMS, tt.wantPhMS)
		}
		if want := uint32(tt.window.Milliseconds() / 4); cfg.FileWritePeriodMS != want {
			t.Errorf("window %v: file_write_period_ms %d, want %d (the read's, not the dump's)", tt.window, cfg.FileWritePeriodMS, want)
		}
	}
}
