package alloctrack

import (
	"io"
	"time"

	"github.com/alloctrack/alloctrack/perfetto"
)

// PLACEHOLDERS agreed between the helpers building the heapprofd backend.
// Each is replaced by its real implementation (and this file deleted)
// before the work lands.

// AddDump counts one heapprofd dump of the app: its per-stack deltas,
// sampled values exactly and estimates scaled by the dump's sampling
// interval. start and now bound the window the dump covers.
func (c *Counters) AddDump(d *perfetto.Dump, start, now time.Time) {}

// Trace returns the writer the capture's raw perfetto trace is copied to
// (trace.perfetto-trace in the capture directory): every byte read from
// the device, in order, so the file opens in the Perfetto UI.
func (w *CaptureWriter) Trace() (io.Writer, error) { return io.Discard, nil }

// Dump adds one heapprofd dump to the capture (profile.pb.gz and
// summary.json are written from the dumps at Close).
func (w *CaptureWriter) Dump(d *perfetto.Dump) error { return nil }
