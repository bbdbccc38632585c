package autoscale

import (
	"math"
	"slices"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// point is one measured world size: n workers ran at throughput s
// (samples/s) and goodput g.
type point struct{ n, s, g float64 }

// curve estimates the job's goodput at any world size from the sizes it
// was measured at: measured where measured, interpolated between them, and
// beyond them extrapolated from the nearest measurement along a model
// fitted to all of them.
type curve struct{ pts []point }

// newCurve keeps hist's usable entries (a positive finite throughput and
// goodput), sorted by size.
func newCurve(hist []v1alpha1.WorldSizeThroughput) curve {
	var c curve
	for _, h := range hist {
		if h.WorldSize >= 1 && finitePositive(h.SamplesPerSecond) && finitePositive(h.Goodput) {
			c.pts = append(c.pts, point{float64(h.WorldSize), h.SamplesPerSecond, h.Goodput})
		}
	}
	slices.SortFunc(c.pts, func(a, b point) int { return int(a.n - b.n) })
	c.pts = slices.CompactFunc(c.pts, func(a, b point) bool { return a.n == b.n })
	return c
}

// goodput estimates the goodput at n workers; false when there is no
// measurement to start from.
func (c curve) goodput(n float64) (float64, bool) {
	if len(c.pts) == 0 || n <= 0 {
		return 0, false
	}
	first, last := c.pts[0], c.pts[len(c.pts)-1]
	switch {
	case n < first.n:
		return c.extrapolate(first, n), true
	case n > last.n:
		return c.extrapolate(last, n), true
	}
	i, found := slices.BinarySearchFunc(c.pts, n, func(p point, n float64) int { return cmpFloat(p.n, n) })
	if found {
		return c.pts[i].g, true
	}
	lo, hi := c.pts[i-1], c.pts[i]
	return lo.g + (hi.g-lo.g)*(n-lo.n)/(hi.n-lo.n), true
}

// marginal is the efficiency of growing from n to n+u workers: the goodput
// the u workers add over the goodput u workers bring at n on average
// (g(n)/n per worker). 1 is linear scaling, 0 adds nothing. Shrinking
// from n to n-u is judged by marginal(n-u, u), the same number the
// decision to grow from n-u used: one function on both sides keeps the
// policy from settling on a size it would leave.
func (c curve) marginal(n, u float64) (float64, bool) {
	g0, ok0 := c.goodput(n)
	g1, ok1 := c.goodput(n + u)
	if !ok0 || !ok1 || !(g0 > 0) {
		return 0, false
	}
	return (g1 - g0) / (g0 / n * u), true
}

// extrapolate estimates the goodput at n from the measured point p along
// the fitted model's shape: g(n) = p.g x model(n) / model(p.n). Anchoring
// at the nearest measurement keeps the estimate continuous with the
// measured and interpolated values; the model only bends it.
//
// The model is goodput = throughput x statistical efficiency, each fitted
// to all the points:
//   - throughput(n) = n·a / (1 + b·(n-1)), the communication-cost (Amdahl)
//     curve: n/throughput = (1 + b·(n-1))/a is linear in n, so a
//     least-squares line fits it;
//   - 1/efficiency = s/g, linear in the global batch and so in n (see
//     statEfficiency).
//
// Slopes are kept at 0 or more (no curve bends upwards), so with one
// point, or points that scale perfectly, the model is linear scaling: a job
// measured at one size grows once to learn more.
func (c curve) extrapolate(p point, n float64) float64 {
	var xs, ys, zs []float64
	for _, q := range c.pts {
		xs = append(xs, q.n)
		ys = append(ys, q.n/q.s)
		zs = append(zs, q.s/q.g)
	}
	ya, yb := fitLine(xs, ys)
	za, zb := fitLine(xs, zs)
	model := func(n float64) float64 { return n / (ya + yb*n) / (za + zb*n) }
	mp, mn := model(p.n), model(n)
	if !finitePositive(mp) || !finitePositive(mn) {
		return p.g * n / p.n // the fit is degenerate: linear from p
	}
	return p.g * mn / mp
}

// fitLine fits y = a + b·x by least squares with b >= 0 (with b pinned
// at 0, a is the mean of y).
func fitLine(xs, ys []float64) (a, b float64) {
	k := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	if d := k*sxx - sx*sx; d > 0 {
		b = (k*sxy - sx*sy) / d
	}
	b = max(b, 0)
	return (sy - b*sx) / k, b
}

func finitePositive(f float64) bool { return f > 0 && !math.IsInf(f, 0) }

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
