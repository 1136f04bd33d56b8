package perfetto_test

import (
	"bytes"
	"fmt"
	"io"

	"github.com/alloctrack/alloctrack/perfetto"
)

func Example() {
	// A trace as heapprofd writes it: two dumps of one app's Java heap.
	var trace bytes.Buffer
	w := perfetto.NewWriter(&trace, nil)
	stack := []perfetto.Frame{
		{RawFunction: "art_quick_alloc_object_resolved_region_tlab", Mapping: "/apex/com.android.art/lib64/libart.so"},
		{RawFunction: "void com.example.Feed.load(int)", Mapping: "/data/app/oat/arm64/base.odex"},
	}
	for i, v := range []perfetto.Values{{Allocated: 4800, Count: 3}, {Allocated: 6400, Count: 4}} {
		w.WriteDumps(perfetto.DumpSpec{PID: 4242, Heap: perfetto.ArtHeap, SamplingInterval: 4096, Timestamp: uint64(i + 1),
			Samples: []perfetto.SampleSpec{{Frames: stack, Values: v}}})
	}

	d := perfetto.NewDecoder(&trace, nil)
	for {
		dump, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, s := range dump.Stacks {
			fmt.Printf("pid %d %s: +%d samples, +%d bytes (total %d, %d); site %s\n",
				dump.PID, dump.Heap, s.Delta.Count, s.Delta.Allocated, s.Total.Count, s.Total.Allocated, s.Stack.Frames[1].Function)
		}
	}
	// Output:
	// pid 4242 com.android.art: +3 samples, +4800 bytes (total 3, 4800); site com.example.Feed.load
	// pid 4242 com.android.art: +1 samples, +1600 bytes (total 4, 6400); site com.example.Feed.load
}
