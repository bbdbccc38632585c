package bench

import (
	"time"

	"github.com/ringside/ringside/sidecar/quantile"
)

// rateSample is the job's step counter and generation at one moment.
type rateSample struct {
	at        time.Time
	top, gen  int64
	world     int
	fullWorld bool
}

// baselineMargin is how long after a generation's first sample its steps
// start to count as undisturbed: the new group's first steps run slower
// (DDP rebuilds its buckets, a joiner warms up).
const baselineMargin = time.Second

// minWindow is the shortest undisturbed stretch that counts.
const minWindow = 2 * time.Second

// inRunBaseline measures the undisturbed step rate inside the disturbed
// run itself: each stretch at the full world size within one generation,
// less its first baselineMargin, is a window. It returns the pooled rate
// (the windows' steps over their time), each window's rate, and the time
// the windows covered. A baseline measured up front, before the faults,
// runs under other conditions (the machine still warming, caches cold) and
// was off by more than the losses the benchmark measures.
func inRunBaseline(samples []rateSample) (pooled float64, rates []float64, covered time.Duration) {
	var steps int64
	for i := 0; i < len(samples); {
		j := i
		for j+1 < len(samples) && samples[j+1].gen == samples[i].gen {
			j++
		}
		start := i
		for start <= j && samples[start].at.Sub(samples[i].at) < baselineMargin {
			start++
		}
		if start < j && samples[i].fullWorld && samples[j].fullWorld {
			a, b := samples[start], samples[j]
			if d := b.at.Sub(a.at); d >= minWindow && b.top > a.top {
				rates = append(rates, float64(b.top-a.top)/d.Seconds())
				steps += b.top - a.top
				covered += d
			}
		}
		i = j + 1
	}
	if covered > 0 {
		pooled = float64(steps) / covered.Seconds()
	}
	return pooled, rates, covered
}

// spread is the windows' rates at p10 and p90, relative to pooled.
func spread(rates []float64, pooled float64) (lo, hi float64) {
	if len(rates) == 0 || pooled == 0 {
		return 0, 0
	}
	p := quantile.Each(rates, 0.1, 0.9)
	return p[0] / pooled, p[1] / pooled
}
