package sim

import (
	"math"
	"strings"
	"testing"
)

// A simulated app's stacks look like an Android app's: byte[] comes from
// stream reads, BitmapFactory, okio or ByteArrayOutputStream, never from
// Message.obtain, which allocates Messages only; and some of the app's own
// code is on every stack, so no two apps share a whole stack (a perfetto
// session interns call stacks across its processes). Sites are weighed as
// the workload draws them (Zipf: site k in proportion to (1+k)^-skew), for
// the seeds tests use and those a farm gives its apps.
func TestWorkloadStacksPlausible(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 1001, 1002, 1101, 1102, 1201, 1202}
	for _, seed := range seeds {
		w := DefaultWorkload()
		w.Seed = seed
		p := newProgram(w, "com.example.app")
		var bytes, bytesUnderObtain float64
		for k, s := range p.sites {
			weight := math.Pow(float64(1+k), -p.w.Skew)
			class := p.tables.RawClasses[s.class]
			obtain, app := false, false
			for _, f := range s.frames {
				obtain = obtain || p.tables.RawClasses[f.Class] == "Landroid/os/Message;" && p.tables.Methods[f.Method] == "obtain"
				app = app || strings.HasPrefix(p.tables.RawClasses[f.Class], "Lcom/example/app/")
			}
			if !app {
				t.Errorf("seed %d: site %d has no frame of the app's own code (apps would share whole stacks)", seed, k)
			}
			if obtain && class != "Landroid/os/Message;" {
				t.Errorf("seed %d: site %d allocates %s under Message.obtain", seed, k, class)
			}
			if class == "[B" {
				bytes += weight
				if obtain {
					bytesUnderObtain += weight
				}
			}
		}
		if bytes == 0 || bytesUnderObtain > 0 {
			t.Errorf("seed %d: %.1f %% of byte[] allocations under Message.obtain (byte[] weight %.3f)", seed, 100*bytesUnderObtain/bytes, bytes)
		}
	}
}
