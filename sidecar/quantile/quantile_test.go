package quantile

import (
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestOf(t *testing.T) {
	ten := []float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}
	for _, tc := range []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"no values", nil, 0.5, 0},
		{"one value is every quantile", []float64{7}, 0.9, 7},
		{"the median of an odd count is the middle", []float64{3, 1, 2}, 0.5, 2},
		{"the median of an even count is the lower middle", []float64{4, 1, 3, 2}, 0.5, 2},
		{"p90 of ten is the ninth", ten, 0.9, 9},
		{"p95 of ten rounds up to the tenth", ten, 0.95, 10},
		{"p95 of twenty is the nineteenth, float error aside", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, 0.95, 19},
		{"p7 of a hundred is the seventh, float error aside", hundred(), 0.07, 7},
		{"q 1 is the maximum", ten, 1, 10},
		{"q 0 is the minimum", ten, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.xs, tc.q); got != tc.want {
				t.Errorf("Of(%v, %g) = %g, want %g", tc.xs, tc.q, got, tc.want)
			}
		})
	}
}

func hundred() []float64 {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	rand.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	return xs
}

// TestOfIsTheNearestRank checks the definition: the result is one of the
// values, at least q of them are at most it, and fewer than q are below it.
func TestOfIsTheNearestRank(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(rapid.Float64Range(-1e6, 1e6), 1, 50).Draw(t, "xs")
		q := rapid.Float64Range(0, 1).Draw(t, "q")
		in := slices.Clone(xs)
		got := Of(xs, q)
		if !slices.Equal(xs, in) {
			t.Fatal("Of modified its input")
		}
		if !slices.Contains(xs, got) {
			t.Fatalf("%g is none of the values", got)
		}
		atMost, below := 0, 0
		for _, x := range xs {
			if x <= got {
				atMost++
			}
			if x < got {
				below++
			}
		}
		n := float64(len(xs))
		if float64(atMost) < q*n-1e-9 || (below > 0 && float64(below) >= q*n+1e-9) {
			t.Fatalf("Of(q=%g) = %g: %d of %d at most it, %d below", q, got, atMost, len(xs), below)
		}
	})
}

func TestEachAnswersLikeOfForEveryQuantileAsked(t *testing.T) {
	xs := []float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}
	got := Each(xs, 0.5, 0.95, 0)
	for i, q := range []float64{0.5, 0.95, 0} {
		if got[i] != Of(xs, q) {
			t.Errorf("Each(...)[%d] = %g, Of(xs, %g) = %g", i, got[i], q, Of(xs, q))
		}
	}
	if got := Each(nil, 0.5, 0.9); len(got) != 2 || got[0] != 0 || got[1] != 0 {
		t.Errorf("Each(nil, 0.5, 0.9) = %v, want [0 0]", got)
	}
}
