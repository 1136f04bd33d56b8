package alloctrack_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/alloctrack/alloctrack/alloctrack"
)

// fr is a frame by names: class as a descriptor ("Lcom/example/Foo;").
func fr(class, method, file string, line int16) allocreport.FrameName {
	return allocreport.FrameName{Class: class, Method: method, File: file, Line: line}
}

// al is n allocations of one site.
type al struct {
	class  string // descriptor
	size   uint32
	n      int
	frames []allocreport.FrameName
}

func build(t testing.TB, allocs ...al) *allocreport.Report {
	t.Helper()
	b := allocreport.NewBuilder()
	for _, a := range allocs {
		for range a.n {
			b.Add(a.size, 1, a.class, a.frames)
		}
	}
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// appStack is a two-frame stack: a framework frame above an app frame.
func appStack(method string, line int16) []allocreport.FrameName {
	return []allocreport.FrameName{
		fr("Ljava/util/ArrayList;", "add", "ArrayList.java", 457),
		fr("Lcom/example/app/Feed;", method, "Feed.java", line),
	}
}

func sumClasses(c alloctrack.AppCounts) alloctrack.Count {
	s := c.ClassOther
	for _, x := range c.Classes {
		s.Allocations += x.Allocations
		s.Bytes += x.Bytes
	}
	return s
}

func sumSites(c alloctrack.AppCounts) alloctrack.Count {
	s := c.SiteOther
	for _, x := range c.Sites {
		s.Allocations += x.Allocations
		s.Bytes += x.Bytes
	}
	return s
}

// checkSums checks that series plus other equal the exact total.
func checkSums(t *testing.T, c alloctrack.AppCounts, want alloctrack.Count) {
	t.Helper()
	if c.Total != want {
		t.Fatalf("total %+v, want %+v", c.Total, want)
	}
	if s := sumClasses(c); s != want {
		t.Fatalf("classes + other = %+v, total %+v", s, want)
	}
	if s := sumSites(c); s != want {
		t.Fatalf("sites + other = %+v, total %+v", s, want)
	}
}

// randomReport draws allocations over nClasses classes and nSites sites
// (site k allocates class k % nClasses), skewed towards low k.
func randomReport(t testing.TB, rng *rand.Rand, n, nClasses, nSites int) (*allocreport.Report, alloctrack.Count) {
	t.Helper()
	var allocs []al
	var total alloctrack.Count
	for range n {
		k := min(rng.IntN(nSites), rng.IntN(nSites))
		size := uint32(8 + 8*rng.IntN(16))
		allocs = append(allocs, al{
			class: fmt.Sprintf("Lcom/example/C%d;", k%nClasses), size: size, n: 1,
			frames: appStack(fmt.Sprintf("m%d", k), int16(k)),
		})
		total.Allocations++
		total.Bytes += uint64(size)
	}
	// Shuffle so that table indices differ from report to report.
	rng.Shuffle(len(allocs), func(i, j int) { allocs[i], allocs[j] = allocs[j], allocs[i] })
	return build(t, allocs...), total
}

func TestCountersAdmissionAndOther(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 3, TopSites: 5})
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_000_000, 0)
	var want alloctrack.Count
	var first alloctrack.AppCounts
	for i := range 30 {
		r, tot := randomReport(t, rng, 500, 10, 40)
		want.Allocations += tot.Allocations
		want.Bytes += tot.Bytes
		c.Add(ddm.WindowOfReport(r, time.Time{}, now.Add(time.Duration(i)*time.Second)))
		got := c.Snapshot()
		if len(got.Classes) != 3 || len(got.Sites) != 5 {
			t.Fatalf("report %d: %d classes and %d sites admitted, want 3 and 5", i, len(got.Classes), len(got.Sites))
		}
		checkSums(t, got, want)
		if got.ClassOther.Allocations == 0 || got.SiteOther.Allocations == 0 {
			t.Fatalf("report %d: nothing counted as other: %+v %+v", i, got.ClassOther, got.SiteOther)
		}
		// Once admitted, a series stays (no expiry configured).
		if i == 0 {
			first = got
			continue
		}
		for j := range first.Classes {
			if got.Classes[j].Class != first.Classes[j].Class {
				t.Fatalf("report %d: admitted classes changed from %v to %v", i, first.Classes, got.Classes)
			}
		}
		for j := range first.Sites {
			if got.Sites[j].ID != first.Sites[j].ID {
				t.Fatalf("report %d: admitted sites changed", i)
			}
		}
	}
}

// A report's heaviest class and site should win the free series, not
// whichever the map iteration of Add happens to visit first.
func TestCountersAdmitByWeight(t *testing.T) {
	heavy := al{class: "Lcom/example/Heavy;", size: 16, n: 1000, frames: appStack("heavy", 1)}
	light := al{class: "Lcom/example/Light;", size: 16, n: 1, frames: appStack("light", 2)}
	wrong := 0
	const tries = 50
	for range tries {
		c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 1, TopSites: 1})
		c.Add(ddm.WindowOfReport(build(t, light, heavy), time.Time{}, time.Unix(1, 0)))
		got := c.Snapshot()
		if got.Classes[0].Class != "com.example.Heavy" || got.Sites[0].Class != "com.example.Heavy" {
			wrong++
		}
	}
	if wrong > 0 {
		t.Fatalf("regression: in %d of %d fresh Counters the 1-allocation class/site took the only series and the "+
			"1000-allocation one went to other (alloctrack/aggregate.go Counters.Add admits in map order; "+
			"sort the report's classes and sites by weight before admitting)", wrong, tries)
	}
}

func TestCountersSiteIdentityByNames(t *testing.T) {
	site := al{class: "Lcom/example/Item;", size: 24, n: 3, frames: appStack("load", 42)}
	other := al{class: "[B", size: 100, n: 2, frames: []allocreport.FrameName{
		fr("Lcom/example/Other;", "z", "Other.java", 7), fr("Ljava/lang/Thread;", "run", "Thread.java", 1),
	}}
	r1 := build(t, site, other)
	r2 := build(t, other, site) // other table order

	// The same site again, in tables with duplicate entries, built as a VM
	// may send them: frames refer to the second copy of each name.
	r3 := &allocreport.Report{
		Classes: []string{"com.example.Item", "java.util.ArrayList", "com.example.Item", "java.util.ArrayList", "com.example.app.Feed"},
		Methods: []string{"x", "add", "add", "load"},
		Files:   []string{"Feed.java", "ArrayList.java", "ArrayList.java"},
	}
	for range 4 {
		r3.Append(24, 1, 2, []allocreport.Frame{{Class: 3, Method: 2, File: 2, Line: 457}, {Class: 4, Method: 3, File: 0, Line: 42}})
	}

	idOf := func(r *allocreport.Report, class string) string {
		for i := range r.Allocations {
			if r.ClassName(&r.Allocations[i]) == class {
				return alloctrack.SiteID(ddm.SiteHash(r, i))
			}
		}
		t.Fatalf("no allocation of %s", class)
		return ""
	}
	id := idOf(r1, "com.example.Item")
	if id2, id3 := idOf(r2, "com.example.Item"), idOf(r3, "com.example.Item"); id2 != id || id3 != id {
		t.Fatalf("site ids %s, %s, %s differ for the same site", id, id2, id3)
	}
	if len(id) != 12 {
		t.Fatalf("site id %q is not 12 hex digits", id)
	}

	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 10, TopSites: 10})
	now := time.Unix(100, 0)
	for _, r := range []*allocreport.Report{r1, r2, r3} {
		c.Add(ddm.WindowOfReport(r, time.Time{}, now))
	}
	got := c.Snapshot()
	if len(got.Sites) != 2 {
		t.Fatalf("%d site series, want 2: %+v", len(got.Sites), got.Sites)
	}
	var item alloctrack.SiteCount
	for _, s := range got.Sites {
		if s.Class == "com.example.Item" {
			item = s
		}
	}
	if item.ID != id || item.Allocations != 3+3+4 || item.Bytes != 24*10 {
		t.Fatalf("site %+v, want id %s with 10 allocations of 24 bytes", item, id)
	}
	if len(got.Classes) != 2 {
		t.Fatalf("classes %+v", got.Classes)
	}

	// A different line, or a different allocated class, is another site.
	c2 := alloctrack.NewCounters(alloctrack.AggregateConfig{})
	c2.Add(ddm.WindowOfReport(build(t, site,
		al{class: "Lcom/example/Item;", size: 24, n: 1, frames: appStack("load", 43)},
		al{class: "Lcom/example/Item2;", size: 24, n: 1, frames: appStack("load", 42)},
	), time.Time{}, now))
	if n := len(c2.Snapshot().Sites); n != 3 {
		t.Fatalf("%d sites, want 3 (line and class are part of a site)", n)
	}
}

func TestCountersSiteFrame(t *testing.T) {
	app := fr("Lcom/example/app/Feed;", "bind", "Feed.java", 12)
	const appStr = "com.example.app.Feed.bind(Feed.java:12)"
	tests := []struct {
		name   string
		frames []allocreport.FrameName
		want   string
	}{
		{"app frame on top", []allocreport.FrameName{app}, appStr},
		{"below java.", []allocreport.FrameName{fr("Ljava/lang/StringBuilder;", "toString", "StringBuilder.java", 400), app}, appStr},
		{"below javax.", []allocreport.FrameName{fr("Ljavax/crypto/Cipher;", "init", "Cipher.java", 1), app}, appStr},
		{"below android.", []allocreport.FrameName{fr("Landroid/os/Handler;", "dispatchMessage", "Handler.java", 99), app}, appStr},
		{"below androidx.", []allocreport.FrameName{fr("Landroidx/recyclerview/widget/RecyclerView;", "onLayout", "RecyclerView.java", 3), app}, appStr},
		{"below dalvik.", []allocreport.FrameName{fr("Ldalvik/system/VMRuntime;", "newNonMovableArray", "", -2), app}, appStr},
		{"below libcore.", []allocreport.FrameName{fr("Llibcore/io/Memory;", "peek", "Memory.java", 5), app}, appStr},
		{"below sun.", []allocreport.FrameName{fr("Lsun/misc/Unsafe;", "allocateInstance", "", -2), app}, appStr},
		{"below com.android.internal.", []allocreport.FrameName{fr("Lcom/android/internal/os/ZygoteInit;", "main", "ZygoteInit.java", 930), app}, appStr},
		{"several framework frames", []allocreport.FrameName{
			fr("Ljava/util/HashMap;", "put", "HashMap.java", 1), fr("Landroid/view/View;", "draw", "View.java", 2), app,
			fr("Lcom/example/app/Main;", "run", "Main.java", 3),
		}, appStr},
		{"all framework: top frame", []allocreport.FrameName{
			fr("Ljava/util/ArrayList;", "grow", "ArrayList.java", 237), fr("Landroid/os/Looper;", "loop", "Looper.java", 193),
		}, "java.util.ArrayList.grow(ArrayList.java:237)"},
		{"native top frame, all framework", []allocreport.FrameName{fr("Ldalvik/system/VMRuntime;", "newNonMovableArray", "", -2)},
			"dalvik.system.VMRuntime.newNonMovableArray(Native Method)"},
		{"unknown source app frame", []allocreport.FrameName{fr("Ljava/lang/Object;", "clone", "", -1), fr("Lcom/example/Gen;", "make", "", -1)},
			"com.example.Gen.make(Unknown Source)"},
		// Prefixes are whole package names.
		{"javafx is not java.", []allocreport.FrameName{fr("Ljavafx/Foo;", "a", "Foo.java", 1), app}, "javafx.Foo.a(Foo.java:1)"},
		{"androidx2 is not androidx.", []allocreport.FrameName{fr("Landroidx2/Foo;", "a", "Foo.java", 1), app}, "androidx2.Foo.a(Foo.java:1)"},
		{"com.android.launcher is an app", []allocreport.FrameName{fr("Lcom/android/launcher3/Workspace;", "a", "W.java", 1), app}, "com.android.launcher3.Workspace.a(W.java:1)"},
		{"kotlin is an app frame", []allocreport.FrameName{fr("Lkotlin/collections/ArraysKt;", "toList", "_Arrays.kt", 9), app}, "kotlin.collections.ArraysKt.toList(_Arrays.kt:9)"},
		{"empty stack", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := alloctrack.NewCounters(alloctrack.AggregateConfig{})
			c.Add(ddm.WindowOfReport(build(t, al{class: "[I", size: 16, n: 1, frames: tt.frames}), time.Time{}, time.Unix(1, 0)))
			got := c.Snapshot()
			if len(got.Sites) != 1 {
				t.Fatalf("%d sites", len(got.Sites))
			}
			s := got.Sites[0]
			if s.Frame != tt.want {
				t.Errorf("Frame %q, want %q", s.Frame, tt.want)
			}
			if s.Class != "int[]" {
				t.Errorf("Class %q, want int[]", s.Class)
			}
			if len(tt.frames) == 0 && s.Stack != "" {
				t.Errorf("Stack %q for an empty stack", s.Stack)
			}
		})
	}
}

func TestCountersStackLabel(t *testing.T) {
	frames := appStack("load", 42)
	full := "java.util.ArrayList.add(ArrayList.java:457); com.example.app.Feed.load(Feed.java:42)"
	for _, max := range []int{len(full) + 10, len(full), len(full) - 1, 40, 10, 3} {
		c := alloctrack.NewCounters(alloctrack.AggregateConfig{StackLabelMax: max})
		c.Add(ddm.WindowOfReport(build(t, al{class: "[I", size: 16, n: 1, frames: frames}), time.Time{}, time.Unix(1, 0)))
		s := c.Snapshot().Sites[0].Stack
		switch {
		case max >= len(full):
			if s != full {
				t.Errorf("max %d: stack %q, want %q", max, s, full)
			}
		default:
			if len(s) != max || !strings.HasSuffix(s, "...") || !strings.HasPrefix(full, s[:max-3]) {
				t.Errorf("max %d: stack %q (%d bytes), want the first %d bytes and ...", max, s, len(s), max-3)
			}
		}
	}
	// A deep stack stops being formatted once over the cap.
	var deep []allocreport.FrameName
	for i := range 255 {
		deep = append(deep, fr("Lcom/example/Deep;", "recurse", "Deep.java", int16(i+1)))
	}
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{StackLabelMax: 100})
	c.Add(ddm.WindowOfReport(build(t, al{class: "[I", size: 16, n: 1, frames: deep}), time.Time{}, time.Unix(1, 0)))
	if s := c.Snapshot().Sites[0].Stack; len(s) != 100 {
		t.Errorf("deep stack label of %d bytes, want 100", len(s))
	}
	// Default cap.
	c = alloctrack.NewCounters(alloctrack.AggregateConfig{})
	c.Add(ddm.WindowOfReport(build(t, al{class: "[I", size: 16, n: 1, frames: deep}), time.Time{}, time.Unix(1, 0)))
	if s := c.Snapshot().Sites[0].Stack; len(s) != 1024 {
		t.Errorf("deep stack label of %d bytes with the default cap, want 1024", len(s))
	}
}

// The stack becomes a Prometheus label value, which must be valid UTF-8
// (client_golang's MustNewConstMetric panics otherwise). Java names need
// not be ASCII.
func TestCountersStackLabelIsValidUTF8(t *testing.T) {
	frames := []allocreport.FrameName{
		fr("Lcom/例子/应用/数据源;", "加载", "数据源.java", 12),
		fr("Lcom/例子/应用/界面;", "显示", "界面.java", 34),
	}
	var bad []int
	for max := 4; max < 40; max++ {
		c := alloctrack.NewCounters(alloctrack.AggregateConfig{StackLabelMax: max})
		c.Add(ddm.WindowOfReport(build(t, al{class: "[I", size: 16, n: 1, frames: frames}), time.Time{}, time.Unix(1, 0)))
		s := c.Snapshot().Sites[0]
		if !utf8.ValidString(s.Stack) {
			bad = append(bad, max)
		}
		if !utf8.ValidString(s.Frame) {
			t.Fatalf("frame %q is not valid UTF-8", s.Frame)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("regression: with StackLabelMax in %v the stack label is cut inside a UTF-8 sequence "+
			"(alloctrack/aggregate.go Counters.siteInfo slices s[:StackLabelMax-3] by bytes; "+
			"back off to a rune boundary, e.g. with utf8.RuneStart)", bad)
	}
}

func TestCountersStackLabelTinyCap(t *testing.T) {
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("regression: StackLabelMax 2 panics: %v (alloctrack/aggregate.go Counters.siteInfo "+
				"computes s[:StackLabelMax-3]; fill() should raise caps below 4, or cut without the ellipsis)", p)
		}
	}()
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{StackLabelMax: 2})
	c.Add(ddm.WindowOfReport(build(t, al{class: "[I", size: 16, n: 1, frames: appStack("a", 1)}), time.Time{}, time.Unix(1, 0)))
	if s := c.Snapshot().Sites[0].Stack; len(s) > 2 {
		t.Errorf("stack %q longer than the cap of 2", s)
	}
}

func TestCountersExpiry(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 1, TopSites: 1, Expiry: time.Minute})
	t0 := time.Unix(1_000_000, 0)
	a := al{class: "Lcom/example/A;", size: 8, n: 1, frames: appStack("a", 1)}
	b := al{class: "Lcom/example/B;", size: 8, n: 10, frames: appStack("b", 2)}
	cc := al{class: "Lcom/example/C;", size: 8, n: 3, frames: appStack("c", 3)}

	c.Add(ddm.WindowOfReport(build(t, a), time.Time{}, t0))
	c.Add(ddm.WindowOfReport(build(t, b, cc), time.Time{}, t0.Add(10*time.Second))) // both wait as candidates, B heavier
	got := c.Snapshot()
	if len(got.Classes) != 1 || got.Classes[0].Class != "com.example.A" || got.Sites[0].Class != "com.example.A" {
		t.Fatalf("before expiry: %+v %+v", got.Classes, got.Sites)
	}
	checkSums(t, got, alloctrack.Count{Allocations: 14, Bytes: 112})

	// Just inside the expiry: A stays.
	c.Add(ddm.WindowOfReport(build(t), time.Time{}, t0.Add(time.Minute)))
	if got := c.Snapshot(); got.Classes[0].Class != "com.example.A" {
		t.Fatalf("A expired after exactly one Expiry of idleness: %+v", got.Classes)
	}

	// A is idle longer than Expiry: it goes, B (the heaviest candidate)
	// comes in from zero.
	c.Add(ddm.WindowOfReport(build(t), time.Time{}, t0.Add(time.Minute+time.Second)))
	got = c.Snapshot()
	if len(got.Classes) != 1 || got.Classes[0].Class != "com.example.B" || got.Classes[0].Count != (alloctrack.Count{}) {
		t.Fatalf("after expiry: classes %+v, want B from zero", got.Classes)
	}
	// B's site holds the free series, but its labels come from the next
	// report that shows it: until then it is not exported.
	if len(got.Sites) != 0 {
		t.Fatalf("after expiry: sites %+v, want none until B's site counts again", got.Sites)
	}
	c.Add(ddm.WindowOfReport(build(t, al{class: b.class, size: 8, n: 2, frames: b.frames}), time.Time{}, t0.Add(time.Minute+2*time.Second)))
	if s := c.Snapshot().Sites; len(s) != 1 || s[0].Class != "com.example.B" || s[0].Frame != "com.example.app.Feed.b(Feed.java:2)" ||
		s[0].Count != (alloctrack.Count{Allocations: 2, Bytes: 16}) {
		t.Fatalf("after B counts again: sites %+v, want B's site with only the new 2 allocations", s)
	}
	got = c.Snapshot()
	got.Total.Allocations -= 2
	got.Total.Bytes -= 16
	got.Classes[0].Count = alloctrack.Count{}
	// Total and other never went down.
	if got.Total != (alloctrack.Count{Allocations: 14, Bytes: 112}) || got.ClassOther.Allocations != 13 || got.SiteOther.Allocations != 13 {
		t.Fatalf("after expiry: total %+v, other %+v / %+v", got.Total, got.ClassOther, got.SiteOther)
	}

	// B counts from now on; A would now wait as a candidate.
	c.Add(ddm.WindowOfReport(build(t, b, a), time.Time{}, t0.Add(2*time.Minute)))
	got = c.Snapshot()
	if got.Classes[0].Class != "com.example.B" || got.Classes[0].Allocations != 12 || got.Sites[0].Allocations != 12 {
		t.Fatalf("B after admission: %+v %+v", got.Classes, got.Sites)
	}
	if got.Total.Allocations != 27 || got.ClassOther.Allocations != 14 {
		t.Fatalf("total %+v, class other %+v", got.Total, got.ClassOther)
	}
}

// With no expiry nothing ever goes down; with expiry, the totals and the
// other series never go down, and a series only disappears or grows.
func TestCountersNeverDecrease(t *testing.T) {
	for _, expiry := range []time.Duration{0, 30 * time.Second} {
		t.Run(fmt.Sprint("expiry=", expiry), func(t *testing.T) {
			c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 4, TopSites: 8, Expiry: expiry, Candidates: 12})
			rng := rand.New(rand.NewPCG(3, 4))
			now := time.Unix(1_000_000, 0)
			prev := c.Snapshot()
			touched := map[string]time.Time{}
			var want alloctrack.Count
			for i := range 60 {
				// Shift the popular sites over time so that some series go idle.
				nSites := 20 + i
				r, tot := randomReport(t, rng, 200+rng.IntN(300), 8, nSites)
				want.Allocations += tot.Allocations
				want.Bytes += tot.Bytes
				now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
				c.Add(ddm.WindowOfReport(r, time.Time{}, now))
				got := c.Snapshot()
				if got.Total != want {
					t.Fatalf("add %d: total %+v, want %+v", i, got.Total, want)
				}
				if expiry == 0 {
					checkSums(t, got, want)
				}
				le := func(a, b alloctrack.Count) bool { return a.Allocations <= b.Allocations && a.Bytes <= b.Bytes }
				if !le(prev.ClassOther, got.ClassOther) || !le(prev.SiteOther, got.SiteOther) {
					t.Fatalf("add %d: other went down: %+v -> %+v, %+v -> %+v", i, prev.ClassOther, got.ClassOther, prev.SiteOther, got.SiteOther)
				}
				// A series may start again from zero only after it was idle
				// longer than the expiry (it expired and was admitted again).
				check := func(kind string, prev, got map[string]alloctrack.Count) {
					for k, old := range prev {
						n, ok := got[k]
						switch {
						case !ok && expiry == 0:
							t.Fatalf("add %d: %s %s lost its series without expiry", i, kind, k)
						case ok && !le(old, n) && (expiry == 0 || now.Sub(touched[kind+k]) <= expiry):
							t.Fatalf("add %d: %s %s went down: %+v -> %+v", i, kind, k, old, n)
						}
					}
					for k, n := range got {
						if old, ok := prev[k]; !ok || n != old {
							touched[kind+k] = now
						}
					}
				}
				check("class", classMap(prev), classMap(got))
				check("site", siteMap(prev), siteMap(got))
				if len(got.Classes) > 4 || len(got.Sites) > 8 {
					t.Fatalf("add %d: %d classes, %d sites admitted", i, len(got.Classes), len(got.Sites))
				}
				prev = got
			}
		})
	}
}

func classMap(c alloctrack.AppCounts) map[string]alloctrack.Count {
	m := map[string]alloctrack.Count{}
	for _, x := range c.Classes {
		m[x.Class] = x.Count
	}
	return m
}

func siteMap(c alloctrack.AppCounts) map[string]alloctrack.Count {
	m := map[string]alloctrack.Count{}
	for _, x := range c.Sites {
		m[x.ID] = x.Count
	}
	return m
}

// Feeding 100,000 distinct sites keeps the exported series at the caps
// and the totals exact.
func TestCountersManyDistinctSites(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 10, TopSites: 20})
	var want alloctrack.Count
	site := 0
	for rep := range 10 {
		var allocs []al
		for range 10_000 {
			m := fmt.Sprintf("m%d", site/30000)
			allocs = append(allocs, al{class: fmt.Sprintf("Lcom/example/K%d;", site%50), size: 16, n: 1,
				frames: appStack(m, int16(site%30000))})
			site++
			want.Allocations++
			want.Bytes += 16
		}
		c.Add(ddm.WindowOfReport(build(t, allocs...), time.Time{}, time.Unix(int64(rep), 0)))
		got := c.Snapshot()
		if len(got.Sites) != 20 || len(got.Classes) != 10 {
			t.Fatalf("%d sites, %d classes admitted", len(got.Sites), len(got.Classes))
		}
		checkSums(t, got, want)
	}
}

func TestCountersConcurrent(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 3, TopSites: 5})
	var reports []*allocreport.Report
	var want alloctrack.Count
	rng := rand.New(rand.NewPCG(5, 6))
	for range 8 {
		r, tot := randomReport(t, rng, 300, 6, 30)
		reports = append(reports, r)
		want.Allocations += tot.Allocations
		want.Bytes += tot.Bytes
	}
	var wg sync.WaitGroup
	for i, r := range reports {
		wg.Go(func() { c.Add(ddm.WindowOfReport(r, time.Time{}, time.Unix(int64(i), 0))) })
		wg.Go(func() { c.Snapshot() })
	}
	wg.Wait()
	checkSums(t, c.Snapshot(), want)
}

// SiteHashNames, from names alone, gives every site of a report the hash
// the counters give it (the id its series is labelled with).
func TestSiteHashNamesMatchesReport(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var allocs []al
	for i := range 50 {
		var frames []allocreport.FrameName
		for j := range rng.IntN(6) {
			line := int16(rng.IntN(900))
			if j == 0 && i%7 == 0 {
				line = -2
			}
			frames = append(frames, fr(fmt.Sprintf("Lcom/例/C%d;", rng.IntN(9)), fmt.Sprintf("m%d", rng.IntN(5)), fmt.Sprintf("C%d.java", rng.IntN(3)), line))
		}
		allocs = append(allocs, al{class: fmt.Sprintf("Lcom/x/K%d;", i%4), size: 8, n: 1, frames: frames})
	}
	r := build(t, allocs...)
	for i := range r.Allocations {
		a := &r.Allocations[i]
		var names []alloctrack.Frame
		for _, f := range r.Stack(a).All() {
			names = append(names, ddm.FrameOf(r, f))
		}
		if got, want := alloctrack.SiteHashNames(r.ClassName(a), names), ddm.SiteHash(r, i); got != want {
			t.Fatalf("allocation %d: SiteHashNames %x, Report.SiteHash %x", i, got, want)
		}
	}
}

// The daemon reads the next report into the same buffer: nothing counted
// may refer to a payload once Add has returned, and the names of a parsed
// report are its own.
func TestCountersKeepNothingOfThePayload(t *testing.T) {
	r0 := build(t,
		al{"Lcom/例/Big;", 64, 3, []allocreport.FrameName{fr("Lcom/例/App;", "run", "App.java", 12), fr("Ljava/lang/Thread;", "run", "Thread.java", 764)}},
		al{"[B", 16, 5, []allocreport.FrameName{fr("Lcom/x/Y;", "make", "Y.java", 3)}},
	)
	payload, err := allocreport.Encode(r0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := allocreport.Parse(payload)
	if err != nil {
		t.Fatal(err)
	}
	classes := append([]string(nil), r.Classes...)
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{})
	c.Add(ddm.WindowOfReport(r, time.Time{}, time.Unix(10, 0)))
	before := fmt.Sprintf("%+v", c.Snapshot())
	for i := range payload {
		payload[i] = 0xEE
	}
	if after := fmt.Sprintf("%+v", c.Snapshot()); after != before {
		t.Fatalf("counters changed when the payload was overwritten:\n%s\n%s", before, after)
	}
	for i, s := range r.Classes {
		if s != classes[i] {
			t.Fatalf("class name %d changed with the payload: %q, was %q", i, s, classes[i])
		}
	}
	if !strings.Contains(before, "com.例.App.run(App.java:12)") {
		t.Fatalf("snapshot lacks the app frame: %s", before)
	}
}

// TestCountersKeepNoNameTable: a report's names share one string per
// table, so a class name the counters keep (a series, a candidate, the
// window history) must be a copy of its own, or it would keep the whole
// table of every report it came from alive.
func TestCountersKeepNoNameTable(t *testing.T) {
	r := build(t,
		al{"Lcom/example/Big;", 64, 3, []allocreport.FrameName{fr("Lcom/example/App;", "run", "App.java", 12)}},
		al{"[B", 16, 5, []allocreport.FrameName{fr("Lcom/x/Y;", "make", "Y.java", 3)}},
		al{"Lcom/example/Rare;", 8, 1, []allocreport.FrameName{fr("Lcom/x/Y;", "make", "Y.java", 4)}},
	)
	payload, err := allocreport.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if r, err = allocreport.Parse(payload); err != nil {
		t.Fatal(err)
	}
	shared := map[*byte]string{}
	for _, s := range r.Classes {
		shared[unsafe.StringData(s)] = s
	}
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{TopClasses: 2})
	c.Add(ddm.WindowOfReport(r, time.Time{}, time.Unix(10, 0)))
	c.Add(ddm.WindowOfReport(r, time.Time{}, time.Unix(20, 0)))
	var kept []string
	for _, cc := range c.Snapshot().Classes {
		kept = append(kept, cc.Class)
	}
	for _, cc := range c.Recent(0).Classes {
		kept = append(kept, cc.Class)
	}
	if len(kept) != 4 {
		t.Fatalf("kept %d class names (%q), want 2 series and 2 in the history", len(kept), kept)
	}
	for _, s := range kept {
		if name, ok := shared[unsafe.StringData(s)]; ok {
			t.Errorf("class %q shares the report's name table (as %q)", s, name)
		}
	}
}
