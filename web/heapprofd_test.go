package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/alloctrack/heapprofd"
	"github.com/alloctrack/alloctrack/perfetto"
	"github.com/alloctrack/alloctrack/web"
)

// A heapprofd app's page says so: backend heapprofd, estimates marked,
// no class rows.
func TestHeapprofdApp(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopSites: 1})
	d := &perfetto.Dump{SamplingInterval: 4096, Heap: perfetto.ArtHeap}
	for i, fn := range []string{"com.example.Foo.bar", "com.example.Baz.qux"} {
		st := &perfetto.Stack{Key: fn, Frames: []*perfetto.Frame{
			{Function: "art_quick_alloc_object_resolved_tlab", Mapping: "/apex/com.android.art/lib64/libart.so"},
			{Function: fn, Mapping: "/data/app/base.odex"},
		}}
		v := perfetto.Values{Count: uint64(10 - 5*i), Allocated: uint64(10-5*i) * 32}
		d.Stacks = append(d.Stacks, perfetto.StackDelta{Stack: st, Delta: v, Total: v})
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c.Add(heapprofd.WindowOfDump(d, now.Add(-10*time.Second), now))
	app := alloctrack.AppSnapshot{AppStatus: alloctrack.AppStatus{Serial: "sim-31", Package: "com.example.hp", PID: 7, State: alloctrack.StateTracking,
		Backend: alloctrack.BackendHeapprofd, Errors: map[string]uint64{}}, Counts: c.Snapshot()}
	src := fakeSource{snap: alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{app}}, recent: map[string]alloctrack.Recent{"sim-31/com.example.hp": c.Recent(0)}}
	h, err := web.New(src, web.Config{Version: "test", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	res, body := get(t, h, "/api/v1/apps/sim-31/com.example.hp")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	var a web.App
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatal(err)
	}
	// 15 samples of 32-byte objects at 4096: about 15·4096/32 = 1920.
	if a.Backend != "heapprofd" || !a.Estimated || a.Samples != 15 || a.Allocations < 1900 || a.Allocations > 1940 || len(a.Classes) != 0 {
		t.Errorf("app %+v", a.AppSummary)
	}
	if len(a.Sites) != 2 || !a.Sites[0].Estimated || a.Sites[0].Samples != 10 || !a.Sites[1].Other || a.Sites[1].Samples != 5 || a.Sites[0].AllocRate == 0 {
		t.Errorf("sites %+v", a.Sites)
	}
	_, page := get(t, h, "/apps/sim-31/com.example.hp")
	for _, want := range []string{"backend heapprofd", "≈", "from heapprofd samples", "no class counts"} {
		if !strings.Contains(page, want) {
			t.Errorf("app page lacks %q", want)
		}
	}
	// Nothing empty on a heapprofd app: no class table, no class column;
	// its rates are marked as estimates like its totals.
	for _, bad := range []string{`id="classes"`, "Top classes", `data-sort="name">Class<`} {
		if strings.Contains(page, bad) {
			t.Errorf("app page has %q", bad)
		}
	}
	if !strings.Contains(page, "% of allocations") || !strings.Contains(page, `data-estimated="1"`) {
		t.Error("app page: the share column does not say what it shares, or the chart is not marked estimated")
	}
	_, farm := get(t, h, "/")
	if !strings.Contains(farm, "heapprofd") || strings.Count(farm, "≈") < 4 {
		t.Errorf("farm page does not mark the heapprofd app's totals and rates (%d ≈)", strings.Count(farm, "≈"))
	}
	_, site := get(t, h, "/api/v1/sites/"+a.Sites[0].Site)
	if !strings.Contains(site, `"estimated":true`) {
		t.Errorf("site: %s", site)
	}
}
