package alloctrack

import (
	"fmt"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// The bookkeeping of classes and sites waiting for a series stays bounded
// whatever the app allocates: 100,000 distinct sites over 50 classes.
func TestCountersBookkeepingBounded(t *testing.T) {
	for _, cfg := range []AggregateConfig{
		{TopClasses: 5, TopSites: 20},                 // candidates: 4 × top
		{TopClasses: 5, TopSites: 20, Candidates: 64}, // explicit bound
		{TopClasses: 5, TopSites: 20, Candidates: 64, Expiry: 3 * time.Second},
	} {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			c := NewCounters(cfg)
			maxClass, maxSite := 4*cfg.TopClasses, 4*cfg.TopSites
			if cfg.Candidates > 0 {
				maxClass, maxSite = cfg.Candidates, cfg.Candidates
			}
			site := 0
			var peakCands, peakReps int
			for rep := range 20 {
				w := &Window{End: time.Unix(int64(rep), 0)}
				var infos []SiteInfo
				classes := map[string]*Count{}
				for range 5_000 {
					h := xxhash.Sum64String(fmt.Sprint(site))
					w.Sites = append(w.Sites, SiteDelta{Hash: h, Count: Count{1, 16}})
					infos = append(infos, SiteInfo{ID: SiteID(h), Class: fmt.Sprintf("com.example.K%d", site%50), Frames: []Frame{{Class: "java.util.ArrayList", Method: "add"}, {Class: "com.example.M", Method: "run", Line: site}}})
					k := fmt.Sprintf("com.example.K%d", site%50)
					if classes[k] == nil {
						classes[k] = &Count{}
					}
					classes[k].Allocate(16)
					site++
				}
				for k, n := range classes {
					w.Classes = append(w.Classes, ClassDelta{Class: k, Count: *n})
					w.Total = w.Total.Plus(*n)
				}
				w.Source = infoList(infos)
				c.Add(w)

				c.mu.Lock()
				nc, ns := len(c.classCands.w), len(c.siteCands.w)
				nr := 0
				for _, s := range c.sites {
					if len(s.info.Frames) > 0 {
						nr++
					}
				}
				nClasses, nSites := len(c.classes), len(c.sites)
				c.mu.Unlock()
				peakCands, peakReps = max(peakCands, ns), max(peakReps, nr)
				if nc > maxClass || ns > maxSite || nr > cfg.TopSites {
					t.Fatalf("after %d sites: %d class candidates (max %d), %d site candidates and %d site infos (max %d)",
						site, nc, maxClass, ns, nr, maxSite)
				}
				if nClasses > cfg.TopClasses || nSites > cfg.TopSites {
					t.Fatalf("%d classes, %d sites admitted", nClasses, nSites)
				}
				// Site infos are kept only for admitted series.
			}
			if site != 100_000 {
				t.Fatalf("fed %d sites", site)
			}
			t.Logf("peak: %d site candidates, %d site infos (admitted series only)", peakCands, peakReps)
		})
	}
}

func TestCandidatesForgetLighterHalf(t *testing.T) {
	c := newCandidates[int](4)
	for k, w := range []uint64{10, 1, 7, 3} {
		if d := c.offer(k, w); d != nil {
			t.Fatalf("dropped %v before full", d)
		}
	}
	dropped := c.offer(9, 5)
	if len(dropped) != 2 || !(c.has(0) && c.has(2) && c.has(9)) || c.has(1) || c.has(3) {
		t.Fatalf("dropped %v, kept %v; want the two lightest (1 and 3) dropped", dropped, c.w)
	}
	// A known key gains weight without dropping anything.
	if d := c.offer(9, 100); d != nil || c.w[9] != 105 {
		t.Fatalf("offer to a known key: dropped %v, weight %d", d, c.w[9])
	}
	if k, ok := c.popMax(); !ok || k != 9 {
		t.Fatalf("popMax = %d, %v; want 9", k, ok)
	}
	if k, _ := c.popMax(); k != 0 {
		t.Fatalf("popMax = %d, want 0", k)
	}
}

// infoList names a window's sites from a list.
type infoList []SiteInfo

func (l infoList) SiteInfo(i, _ int) SiteInfo { return l[i] }
func (l infoList) Threads() []ThreadDelta     { return nil }
func (l infoList) Release()                   {}
