package netopt

import "github.com/ringside/ringside/coordinator/record"

// LevelStats counts, for one topology level, the domains and the ring edges
// that cross between domains of that level.
type LevelStats struct {
	// Level is 0 for the broadest level (the first topology component).
	Level   int `json:"level"`
	Domains int `json:"domains"`
	// CrossEdges counts the ring edges, the closing one included, whose ends
	// are in different domains. With more than one domain the minimum is
	// Domains, reached when every domain is one contiguous run.
	CrossEdges int `json:"cross_edges"`
}

// RingLevels returns the statistics of every level of the ring order.
func RingLevels(order []record.MemberInfo) []LevelStats {
	ids, counts := levelDomains(order)
	out := make([]LevelStats, len(counts))
	n := len(order)
	for j := range counts {
		out[j] = LevelStats{Level: j, Domains: counts[j]}
		if n < 2 {
			continue
		}
		for i := range n {
			if ids[i][j] != ids[(i+1)%n][j] {
				out[j].CrossEdges++
			}
		}
	}
	return out
}

// levelDomains numbers every member's domain at every level: ids[i][j] is
// the domain of member i at level j, counts[j] the number of domains at
// level j. A path shorter than the deepest one keeps its last domain at the
// deeper levels, so members with identical short paths stay together.
func levelDomains(order []record.MemberInfo) (ids [][]int, counts []int) {
	paths := make([][]string, len(order))
	depth := 0
	for i, m := range order {
		paths[i] = memberPath(m)
		depth = max(depth, len(paths[i]))
	}
	seen := make([]map[string]int, depth)
	for j := range seen {
		seen[j] = make(map[string]int)
	}
	counts = make([]int, depth)
	ids = make([][]int, len(order))
	flat := make([]int, len(order)*depth)
	for i, p := range paths {
		ids[i] = flat[i*depth : (i+1)*depth]
		key := ""
		for j := range depth {
			if j < len(p) {
				key += "\x00" + p[j]
			}
			id, ok := seen[j][key]
			if !ok {
				id = len(seen[j])
				seen[j][key] = id
				counts[j]++
			}
			ids[i][j] = id
		}
	}
	return ids, counts
}
