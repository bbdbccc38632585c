// Package quantile is the one definition of a percentile in ringside: the
// step-time percentiles a sidecar stores in its status and the figures the
// benchmarks print are computed alike, so they compare.
//
// The method is nearest rank: the q-quantile of n values is the smallest
// value that at least q*n of them do not exceed, i.e. the ceil(q*n)-th
// smallest. It is always one of the values (a step time that happened, not
// an interpolation), the median of an even count is the lower middle, and
// q = 1 is the maximum.
package quantile

import (
	"math"
	"slices"
)

// Of returns the q-quantile (0 <= q <= 1) of xs by nearest rank, 0 for no
// values. xs is not modified.
func Of(xs []float64, q float64) float64 { return Each(xs, q)[0] }

// Each returns the qs-quantiles of xs, in the order asked, sorting xs (a
// copy) once for all of them.
func Each(xs []float64, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if len(xs) == 0 {
		return out
	}
	s := slices.Sorted(slices.Values(xs))
	for i, q := range qs {
		out[i] = nearestRank(s, q)
	}
	return out
}

// nearestRank is the q-quantile of sorted, which is not empty.
func nearestRank(sorted []float64, q float64) float64 {
	// q is mostly a decimal like 0.95 that float64 holds only nearly: the
	// tolerance keeps q*n = 19.000000000000004 from rounding up to 20.
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
