package ddm

import (
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/ddms/allocreport"
)

func TestAllocArrays(t *testing.T) {
	var none *AllocArrays
	none.put(make([]allocreport.Allocation, 4096))
	if none.get() != nil {
		t.Fatal("nil pool returned an array")
	}
	p := NewAllocArrays(2, 0)
	p.put(make([]allocreport.Allocation, 10)) // too small to keep
	if p.get() != nil {
		t.Fatal("kept a tiny array")
	}
	a, b, c := make([]allocreport.Allocation, 2000), make([]allocreport.Allocation, 3000), make([]allocreport.Allocation, 4000)
	p.put(a)
	p.put(b)
	p.put(c) // beyond keep
	if got := p.get(); cap(got) != 3000 || len(got) != 0 {
		t.Fatalf("got cap %d len %d", cap(got), len(got))
	}
	if got := p.get(); cap(got) != 2000 {
		t.Fatalf("got cap %d", cap(got))
	}
	if p.get() != nil {
		t.Fatal("more arrays than were kept")
	}
}

// An array no parse has taken for idle is dropped; one taken and given
// back again is kept.
func TestAllocArraysIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewAllocArrays(4, 30*time.Second)
	p.now = func() time.Time { return now }
	old, fresh := make([]allocreport.Allocation, 2000), make([]allocreport.Allocation, 3000)
	p.put(old)
	now = now.Add(20 * time.Second)
	p.put(fresh)
	now = now.Add(10 * time.Second) // old: free 30 s; fresh: 10 s
	if got := p.get(); cap(got) != 3000 {
		t.Fatalf("got cap %d, want the array given back 10 s ago", cap(got))
	}
	if got := p.get(); got != nil {
		t.Fatalf("got cap %d: an array free for the whole idle time was kept", cap(got))
	}
	p.put(fresh)
	now = now.Add(29 * time.Second)
	if got := p.get(); cap(got) != 3000 {
		t.Fatalf("got cap %d: an array free for less than idle was dropped", cap(got))
	}
}
