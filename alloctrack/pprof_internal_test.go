package alloctrack

import (
	"strconv"
	"testing"
	"time"
)

// TestProfileBuilderAddressCollision: a frame whose address is taken by
// another frame gets the next free address, the same in every builder,
// never zero.
func TestProfileBuilderAddressCollision(t *testing.T) {
	f := Frame{Class: "com.example.Main", Method: "run", File: "Main.java", Line: 12}
	g := Frame{Class: "com.example.Main", Method: "main", File: "Main.java", Line: 3}
	home := FrameAddress(f)
	probe := (home + 0x10) | 0x1000
	build := func(taken ...uint64) (*ProfileBuilder, uint64) {
		b := NewProfileBuilder()
		for i, a := range taken {
			// Frames that (as far as the builder knows) hashed there first.
			b.addrs[a] = Frame{Class: "fake.Taken", Method: "m" + strconv.Itoa(i)}
		}
		b.AddSite("byte[]", []Frame{f, g}, 7, 1, 16)
		b.AddSite("char[]", []Frame{f}, -1, 2, 48)
		l := b.locs[f]
		if l == nil {
			t.Fatal("no location for the frame")
		}
		return b, l.Address
	}

	if _, a := build(); a != home {
		t.Errorf("without a collision the frame has %#x, want FrameAddress %#x", a, home)
	}
	for _, taken := range [][]uint64{{home}, {home, probe}} {
		b, a := build(taken...)
		if a == 0 || a == home || a == probe && len(taken) > 1 {
			t.Errorf("taken %#x: the frame got %#x", taken, a)
		}
		if b.addrs[a] != f {
			t.Errorf("taken %#x: address %#x is recorded for %+v", taken, a, b.addrs[a])
		}
		for _, x := range taken {
			if b.addrs[x] == f {
				t.Errorf("taken %#x: the frame took over %#x", taken, x)
			}
		}
		if _, again := build(taken...); again != a {
			t.Errorf("taken %#x: %#x, then %#x in another builder", taken, a, again)
		}
		// Both samples share the frame's one location.
		p := b.Profile(time.Unix(0, 0), time.Second)
		if err := p.CheckValid(); err != nil {
			t.Fatal(err)
		}
		if len(p.Sample) != 2 || p.Sample[0].Location[0] != p.Sample[1].Location[0] || len(p.Location) != 2 {
			t.Errorf("taken %#x: %d samples, %d locations", taken, len(p.Sample), len(p.Location))
		}
		if p.Location[0].Address == p.Location[1].Address {
			t.Errorf("taken %#x: two frames at %#x", taken, p.Location[0].Address)
		}
	}
	if _, a := build(home); a != probe {
		t.Logf("with its home taken the frame moved to %#x (the first probe is %#x)", a, probe)
	}
}
