package autoscale

import (
	"math"
	"testing"
	"time"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// reading is a measurement at size n of throughput s, at t0+at.
func reading(n int32, s float64, at time.Duration) Measurement {
	return Measurement{Time: t0.Add(at), WorldSize: n, SamplesPerSec: s}
}

func observeAll(ms ...Measurement) []v1alpha1.WorldSizeThroughput {
	var h []v1alpha1.WorldSizeThroughput
	for _, m := range ms {
		h = Observe(h, m)
	}
	return h
}

func entry(t *testing.T, h []v1alpha1.WorldSizeThroughput, n int32) v1alpha1.WorldSizeThroughput {
	t.Helper()
	for _, e := range h {
		if e.WorldSize == n {
			return e
		}
	}
	t.Fatalf("no entry at world size %d in %+v", n, h)
	return v1alpha1.WorldSizeThroughput{}
}

func TestObserveAveragesEachWorldSize(t *testing.T) {
	h := observeAll(reading(2, 100, 0), reading(4, 180, 15*time.Second), reading(2, 110, 30*time.Second))
	if len(h) != 2 || h[0].WorldSize != 2 || h[1].WorldSize != 4 {
		t.Fatalf("history %+v, want sizes 2 and 4 in order", h)
	}
	if e := entry(t, h, 2); e.SamplesPerSecond != 105 || e.Observations != 2 || !e.LastObservedTime.Time.Equal(t0.Add(30*time.Second)) {
		t.Errorf("size 2: %+v, want the mean 105 of 2 readings, observed at t0+30s", e)
	}
	if e := entry(t, h, 4); e.Goodput != e.SamplesPerSecond {
		t.Errorf("without a noise scale goodput %v, want the throughput %v", e.Goodput, e.SamplesPerSecond)
	}
}

func TestObserveLeavesItsInputAlone(t *testing.T) {
	h := observeAll(reading(2, 100, 0))
	_ = Observe(h, reading(2, 200, time.Second))
	if h[0].SamplesPerSecond != 100 || h[0].Observations != 1 {
		t.Errorf("Observe changed its input: %+v", h[0])
	}
}

func TestObserveIgnoresReadingsThatSayNothing(t *testing.T) {
	h := observeAll(reading(2, 100, 0))
	for name, m := range map[string]Measurement{
		"zero throughput":     reading(2, 0, time.Second),
		"negative throughput": reading(2, -5, time.Second),
		"NaN":                 reading(2, math.NaN(), time.Second),
		"infinite":            reading(2, math.Inf(1), time.Second),
		"world size 0":        reading(0, 100, time.Second),
		"negative world size": reading(-1, 100, time.Second),
	} {
		if got := Observe(h, m); len(got) != 1 || got[0] != h[0] {
			t.Errorf("%s: history %+v, want it unchanged", name, got)
		}
	}
}

func TestObserveFollowsTheRecentPastAndClampsOutliers(t *testing.T) {
	var h []v1alpha1.WorldSizeThroughput
	at := time.Duration(0)
	for range 20 {
		h = Observe(h, reading(4, 100, at))
		at += 15 * time.Second
	}
	h = Observe(h, reading(4, 5, at)) // a straggler's reading
	if got := entry(t, h, 4).SamplesPerSecond; got < 90 {
		t.Errorf("one reading of 5 after twenty of 100 pulled the average to %.1f, want >= 90", got)
	}
	for range 30 { // the job really got slower
		at += 15 * time.Second
		h = Observe(h, reading(4, 60, at))
	}
	if got := entry(t, h, 4).SamplesPerSecond; math.Abs(got-60) > 3 {
		t.Errorf("after thirty readings of 60 the average is %.1f, want about 60", got)
	}
}

func TestObserveKeepsTheHistoryBounded(t *testing.T) {
	var h []v1alpha1.WorldSizeThroughput
	for n := int32(1); n <= maxHistory+5; n++ {
		h = Observe(h, reading(n, float64(n), time.Duration(n)*time.Second))
	}
	if len(h) != maxHistory {
		t.Fatalf("%d sizes kept, want %d", len(h), maxHistory)
	}
	if h[0].WorldSize != 6 {
		t.Errorf("smallest size kept %d, want 6: the least recently observed go first", h[0].WorldSize)
	}
}

func TestObserveGoodputIsThroughputTimesStatisticalEfficiency(t *testing.T) {
	gns := 96.0
	m := func(n int32, s float64) Measurement {
		r := reading(n, s, 0)
		r.GNS, r.BatchPerWorker = &gns, 32
		return r
	}
	h := observeAll(m(1, 100), m(2, 200), m(4, 400))
	// M0 = 32: (96+32)/(96+32n) = 1, 0.8, 0.571...
	for n, want := range map[int32]float64{1: 100, 2: 160, 4: 400 * 128.0 / 224} {
		if got := entry(t, h, n).Goodput; math.Abs(got-want) > 1e-9 {
			t.Errorf("size %d: goodput %v, want %v", n, got, want)
		}
	}
	// A reading without a noise scale judges every size by throughput.
	h = Observe(h, reading(2, 200, time.Second))
	if e := entry(t, h, 4); e.Goodput != e.SamplesPerSecond {
		t.Errorf("without a noise scale size 4 has goodput %v, want its throughput %v", e.Goodput, e.SamplesPerSecond)
	}
}
