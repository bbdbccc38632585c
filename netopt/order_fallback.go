package netopt

import (
	"slices"

	"github.com/ringside/ringside/coordinator/record"
)

// insertByCost inserts each newcomer, in order, into the ring of survivors
// at the gap that adds the fewest boundary crossings, compared broadest
// level first. It is the path for survivor orders that were not contiguous
// to begin with; it costs O(n * depth) per newcomer.
func insertByCost(survivors, newcomers []record.MemberInfo) []record.MemberInfo {
	all := append(slices.Clip(survivors), newcomers...)
	ids, counts := levelDomains(all)
	depth := len(counts)
	ring := make([]int, len(survivors)) // indexes into all
	for i := range ring {
		ring[i] = i
	}
	// link[i] is the number of levels ring[i] shares with its successor.
	link := make([]int, len(ring))
	relink := func(i int) {
		link[i] = sharedLevels(ids[ring[i]], ids[ring[(i+1)%len(ring)]])
	}
	for i := range ring {
		relink(i)
	}
	var withNew []int // levels each ring member shares with the newcomer
	for m := len(survivors); m < len(all); m++ {
		withNew = withNew[:0]
		for _, r := range ring {
			withNew = append(withNew, sharedLevels(ids[r], ids[m]))
		}
		at := bestGap(withNew, link, depth)
		ring = slices.Insert(ring, at, m)
		link = slices.Insert(link, at, 0)
		relink((at - 1 + len(ring)) % len(ring))
		relink(at)
	}
	out := make([]record.MemberInfo, len(ring))
	for i, r := range ring {
		out[i] = all[r]
	}
	return out
}

// sharedLevels returns how many levels, from the broadest, two members'
// domain ids (see levelDomains) agree on; members alike on every level
// share "infinitely many", so no level ever separates them.
func sharedLevels(a, b []int) int {
	for j := range a {
		if a[j] != b[j] {
			return j
		}
	}
	return int(^uint(0) >> 1)
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

// bestGap returns the index at which to insert a newcomer that shares
// withNew[i] levels with ring member i, link[i] being what member i shares
// with its successor.
func bestGap(withNew, link []int, depth int) int {
	n := len(withNew)
	if n < 2 {
		return n
	}
	best, bestG := -1, gap{}
	for i := range n {
		g := gap{withNew[i], withNew[(i+1)%n], link[i]}
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
