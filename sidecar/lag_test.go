package sidecar

import (
	"testing"
	"time"
)

// The meter keeps the largest lateness, halved every lagHalfLife, and a
// smaller one replaces it only once the larger has faded below it.
func TestTheLagMeterKeepsTheWorstStallFading(t *testing.T) {
	var l lagMeter
	t0 := time.Now()
	if got := l.decayed(t0); got != 0 {
		t.Fatalf("a fresh meter says %s, want 0", got)
	}
	l.observe(t0, 400*time.Millisecond)
	l.observe(t0.Add(time.Second), 100*time.Millisecond) // smaller: kept out
	if got := l.decayed(t0.Add(lagHalfLife)); got < 199*time.Millisecond || got > 201*time.Millisecond {
		t.Errorf("%s after one half-life: %s, want 200ms", lagHalfLife, got)
	}
	l.observe(t0.Add(3*lagHalfLife), 80*time.Millisecond) // above 50ms, the faded 400ms
	if got := l.decayed(t0.Add(3 * lagHalfLife)); got != 80*time.Millisecond {
		t.Errorf("after a newer, larger stall: %s, want 80ms", got)
	}
	l.observe(t0.Add(3*lagHalfLife), -time.Millisecond) // an early tick
	if got := l.decayed(t0.Add(3 * lagHalfLife)); got != 80*time.Millisecond {
		t.Errorf("an early tick changed it to %s", got)
	}
}
