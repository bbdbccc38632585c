package coordinator

import (
	"strings"

	"github.com/ringside/ringside/coordinator/record"
)

// TopologyOrderer is the default RingOrderer: survivors keep their order;
// each newcomer goes after the last survivor that shares the longest
// topology prefix with it, or at the end when none shares any. Newcomers
// that land in the same place are grouped by topology path (paths in order
// of first appearance, members in join order), so members of one domain
// stay next to each other. It runs in O(n * depth).
type TopologyOrderer struct{}

var _ RingOrderer = TopologyOrderer{}

// Order implements RingOrderer.
func (TopologyOrderer) Order(survivors, newcomers []record.MemberInfo) []record.MemberInfo {
	// lastAt maps every topology prefix to the last survivor carrying it.
	lastAt := make(map[string]int)
	for i, m := range survivors {
		for l := 1; l <= len(m.Topology); l++ {
			lastAt[pathKey(m.Topology[:l])] = i
		}
	}
	// after[i] holds the newcomers placed after survivor i; index
	// len(survivors) is the end of the ring.
	after := make(map[int]*pathGroups)
	for _, n := range newcomers {
		at := len(survivors)
		for l := len(n.Topology); l >= 1; l-- {
			if i, ok := lastAt[pathKey(n.Topology[:l])]; ok {
				at = i
				break
			}
		}
		g := after[at]
		if g == nil {
			g = &pathGroups{index: map[string]int{}}
			after[at] = g
		}
		g.add(n)
	}
	ring := make([]record.MemberInfo, 0, len(survivors)+len(newcomers))
	for i, m := range survivors {
		ring = append(ring, m)
		ring = after[i].appendTo(ring)
	}
	return after[len(survivors)].appendTo(ring)
}

// pathGroups collects members by topology path, in order of first
// appearance.
type pathGroups struct {
	index  map[string]int
	groups [][]record.MemberInfo
}

func (g *pathGroups) add(m record.MemberInfo) {
	k := pathKey(m.Topology)
	i, ok := g.index[k]
	if !ok {
		i = len(g.groups)
		g.index[k] = i
		g.groups = append(g.groups, nil)
	}
	g.groups[i] = append(g.groups[i], m)
}

func (g *pathGroups) appendTo(ring []record.MemberInfo) []record.MemberInfo {
	if g == nil {
		return ring
	}
	for _, ms := range g.groups {
		ring = append(ring, ms...)
	}
	return ring
}

func pathKey(p []string) string { return strings.Join(p, "\x00") }

// checkOrder reports whether ring holds exactly survivors and newcomers with
// the survivors in their given relative order.
func checkOrder(ring, survivors, newcomers []record.MemberInfo) bool {
	if len(ring) != len(survivors)+len(newcomers) {
		return false
	}
	want := make(map[string]bool, len(ring))
	for _, m := range newcomers {
		want[m.ID] = true
	}
	for _, m := range survivors {
		want[m.ID] = true
	}
	next := 0
	for _, m := range ring {
		if !want[m.ID] {
			return false
		}
		delete(want, m.ID)
		if next < len(survivors) && m.ID == survivors[next].ID {
			next++
		}
	}
	return len(want) == 0 && next == len(survivors)
}
