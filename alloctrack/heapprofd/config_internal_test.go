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
