package autoscale

import (
	"testing"
	"time"
)

// A generation's age counts from the first sync that saw it, and starts
// again with the next generation: the first readings after a resize are
// not measured (Config.MeasureSettle).
func TestAGenerationsAgeCountsFromWhenItWasFirstSeen(t *testing.T) {
	h := newHistory(time.Hour, 8)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		gen  int64
		at   time.Duration
		want time.Duration
	}{
		{4, 0, 0},
		{4, 3 * time.Second, 3 * time.Second},
		{5, 4 * time.Second, 0},
		{5, 15 * time.Second, 11 * time.Second},
	} {
		if got := h.generationAge("ns/a", tc.gen, t0.Add(tc.at)); got != tc.want {
			t.Errorf("generation %d at +%s: age %s, want %s", tc.gen, tc.at, got, tc.want)
		}
	}
	if got := h.generationAge("ns/b", 5, t0.Add(20*time.Second)); got != 0 {
		t.Errorf("another scaler's job: age %s, want 0", got)
	}
}
