package autoscale

import (
	"math"
	"time"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/sidecar/quantile"
)

// drainGrace is the drain grace that drains of the durations seconds ask
// for: their 99th percentile times factor, rounded up to a second, at
// least 1 s and at most max. The webhook takes the larger of it and its
// own configured grace, so what is measured only ever lengthens the
// grace, and a pod's own terminationGracePeriodSeconds is never lowered.
func drainGrace(seconds []float64, factor float64, maxGrace time.Duration) (p99 float64, grace int32) {
	p99 = quantile.Of(seconds, 0.99)
	g := math.Ceil(p99 * factor)
	g = math.Min(math.Max(g, 1), math.Floor(maxGrace.Seconds()))
	return p99, int32(g)
}

// drained sets status.drain from the job's recorded drains (nil before
// the first).
func (s *scalerSync) drained(seconds []float64) {
	if len(seconds) == 0 {
		s.es.Status.Drain = nil
		return
	}
	p99, grace := drainGrace(seconds, s.c.cfg.DrainSafetyFactor, s.c.cfg.DrainGraceMax)
	s.es.Status.Drain = &v1alpha1.DrainStatus{
		Samples: int32(len(seconds)),
		// Rounded to a millisecond: the status stays readable.
		P99Seconds:         math.Round(p99*1000) / 1000,
		GracePeriodSeconds: grace,
	}
}
