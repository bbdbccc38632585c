package netopt

import (
	"slices"

	"github.com/ringside/ringside/coordinator"
)

// insertByCost inserts each newcomer, in order, into the ring of survivors
// at the gap that adds the fewest boundary crossings, compared broadest
// level first. It is the path for survivor orders that were not contiguous
// to begin with; it costs O(n) per newcomer.
func insertByCost(ring, fresh []placed) []coordinator.MemberInfo {
	depth := 0
	for _, p := range ring {
		depth = max(depth, len(p.path))
	}
	for _, p := range fresh {
		depth = max(depth, len(p.path))
		at := bestGap(ring, p.path, depth)
		ring = slices.Insert(ring, at, p)
	}
	out := make([]coordinator.MemberInfo, len(ring))
	for i, p := range ring {
		out[i] = p.m
	}
	return out
}

// gap is the place between two ring neighbours a and b, described by the
// number of levels the newcomer shares with a, with b, and a with b.
type gap struct{ na, nb, ab int }

// delta is how many crossings inserting there adds at level j: the edges
// a-n and n-b cross level j when they share fewer than j+1 levels, and the
// edge a-b they replace did.
func (g gap) delta(j int) int {
	d := 0
	if g.na <= j {
		d++
	}
	if g.nb <= j {
		d++
	}
	if g.ab <= j {
		d--
	}
	return d
}

// bestGap returns the index at which to insert path into ring.
func bestGap(ring []placed, path []string, depth int) int {
	n := len(ring)
	if n < 2 {
		return n
	}
	best, bestG := -1, gap{}
	for i := range n {
		a, b := ring[i].path, ring[(i+1)%n].path
		g := gap{shared(a, path), shared(path, b), shared(a, b)}
		if best < 0 || better(g, bestG, depth) {
			best, bestG = i+1, g
		}
	}
	return best
}

// better reports whether gap x adds fewer crossings than y, broadest level
// first.
func better(x, y gap, depth int) bool {
	for j := range depth {
		if dx, dy := x.delta(j), y.delta(j); dx != dy {
			return dx < dy
		}
	}
	return false
}

// shared returns the number of levels, from the broadest, on which a and b
// are in the same domain; identical paths share every level.
func shared(a, b []string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	if n == len(a) && n == len(b) {
		return int(^uint(0) >> 1)
	}
	return n
}
