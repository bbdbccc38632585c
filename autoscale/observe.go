package autoscale

import (
	"math"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// Averaging the readings at one world size.
const (
	// maxHistory bounds the world sizes kept: a job that has run at more
	// sizes forgets the one it saw least recently. 64 is more sizes than a
	// job visits in practice and keeps the status object small.
	maxHistory = 64
	// ewmaAlpha is the weight of a new reading once a size has
	// 1/ewmaAlpha of them: the first readings are a plain mean (a size
	// newly visited is learned fast), later ones an exponentially
	// weighted one that follows the recent past. 0.2 keeps about the last
	// 10 readings (2.5 minutes at a 15 s sync) in the average.
	ewmaAlpha = 0.2
	// outlierBand clamps a reading into avg x [1-band, 1+band] once a
	// size has clampAfter readings: one straggler step or a reading taken
	// across a re-formed ring moves the average by at most
	// ewmaAlpha x band (6 %), while a lasting change is still followed,
	// by up to that much per reading.
	outlierBand = 0.3
	clampAfter  = 3
)

// Observe folds m into the throughput history hist (one entry per world
// size) and returns the new history, sorted by world size; hist is left
// unchanged. A reading with a world size below 1 or a throughput that is
// not a positive finite number is ignored: a stalled or restarting job
// says nothing about how fast it runs at a size.
//
// Goodput is recomputed at every size from m's gradient noise scale: the
// statistical efficiency of a batch is a property of where training is
// now, not of when a size was measured, so every size is judged with the
// newest noise scale (trainers report a smoothed one).
func Observe(hist []v1alpha1.WorldSizeThroughput, m Measurement) []v1alpha1.WorldSizeThroughput {
	out := slices.Clone(hist)
	if m.WorldSize < 1 || !(m.SamplesPerSec > 0) || math.IsInf(m.SamplesPerSec, 0) {
		return out
	}
	i := slices.IndexFunc(out, func(h v1alpha1.WorldSizeThroughput) bool { return h.WorldSize == m.WorldSize })
	if i < 0 {
		out = append(out, v1alpha1.WorldSizeThroughput{WorldSize: m.WorldSize})
		i = len(out) - 1
	}
	e := &out[i]
	e.SamplesPerSecond = average(e.SamplesPerSecond, e.Observations, m.SamplesPerSec)
	if e.Observations < math.MaxInt32 {
		e.Observations++
	}
	e.LastObservedTime = metav1.NewTime(m.Time)

	if len(out) > maxHistory {
		oldest := 0
		for j, h := range out {
			if h.LastObservedTime.Before(&out[oldest].LastObservedTime) {
				oldest = j
			}
		}
		out = slices.Delete(out, oldest, oldest+1)
	}
	slices.SortFunc(out, func(a, b v1alpha1.WorldSizeThroughput) int { return int(a.WorldSize - b.WorldSize) })
	setGoodput(out, m.GNS, m.BatchPerWorker)
	return out
}

// average folds reading x into avg, the average of n readings.
func average(avg float64, n int32, x float64) float64 {
	if n == 0 || !(avg > 0) {
		return x
	}
	if n >= clampAfter {
		x = max(avg*(1-outlierBand), min(avg*(1+outlierBand), x))
	}
	w := max(ewmaAlpha, 1/float64(n+1))
	return avg + w*(x-avg)
}

// setGoodput sets every entry's goodput: throughput times the statistical
// efficiency of its global batch, as Pollux defines it. With gradient
// noise scale phi (in samples), a global batch M = world size x batch per
// worker makes (phi + M0) / (phi + M) of the progress per sample that the
// smallest batch M0 the history holds makes: samples beyond the noise
// scale mostly average the same gradient again. Without a noise scale (or
// a batch size) the efficiency is 1 and goodput is throughput.
func setGoodput(hist []v1alpha1.WorldSizeThroughput, gns *float64, batchPerWorker float64) {
	phi := -1.0
	if gns != nil && *gns >= 0 && !math.IsInf(*gns, 0) && batchPerWorker > 0 && !math.IsInf(batchPerWorker, 0) {
		phi = *gns
	}
	for i := range hist {
		eff := 1.0
		if phi >= 0 && len(hist) > 0 {
			m0 := float64(hist[0].WorldSize) * batchPerWorker // hist is sorted by size
			eff = statEfficiency(phi, m0, float64(hist[i].WorldSize)*batchPerWorker)
		}
		hist[i].Goodput = hist[i].SamplesPerSecond * eff
	}
}

// statEfficiency is the progress per sample of global batch m relative to
// batch m0, at gradient noise scale phi: (phi + m0) / (phi + m).
func statEfficiency(phi, m0, m float64) float64 {
	if phi+m <= 0 {
		return 1
	}
	return (phi + m0) / (phi + m)
}
