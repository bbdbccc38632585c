package loopback

import (
	"fmt"
	"testing"
)

func TestBlocksHeldAtOnceAreDistinct(t *testing.T) {
	a, err := Acquire()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr(0) == b.Addr(0) {
		t.Fatalf("two held blocks share %s", a.Addr(0))
	}
	// Their store ports (16 each) do not overlap either, and stay below
	// the ephemeral ports.
	if lo, hi := min(a.MasterPort(), b.MasterPort()), max(a.MasterPort(), b.MasterPort()); hi-lo < 16 || hi+15 >= 32768 {
		t.Errorf("master ports %d and %d: want 16 apart, below 32768", a.MasterPort(), b.MasterPort())
	}
	if got := a.Addr(251); got != fmt.Sprintf("127.%d.1.3", a.b) {
		t.Errorf("Addr(251) = %s", got)
	}
	a.Release()
	c, err := Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	defer b.Release()
	if c.Addr(0) == b.Addr(0) {
		t.Fatalf("a block was handed out while held: %s", c.Addr(0))
	}
}
