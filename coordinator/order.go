package coordinator

// TopologyOrderer is the default RingOrderer: survivors keep their order and
// each newcomer, in join order, goes right after the last member that shares
// the longest topology prefix with it, or at the end when none shares any.
// Members of one topology domain therefore stay next to each other.
type TopologyOrderer struct{}

var _ RingOrderer = TopologyOrderer{}

// Order implements RingOrderer.
func (TopologyOrderer) Order(survivors, newcomers []MemberInfo) []MemberInfo {
	ring := make([]MemberInfo, 0, len(survivors)+len(newcomers))
	ring = append(ring, survivors...)
	for _, n := range newcomers {
		at, best := len(ring), 0
		for i, m := range ring {
			if p := commonPrefix(m.Topology, n.Topology); p > 0 && p >= best {
				at, best = i+1, p
			}
		}
		ring = append(ring, MemberInfo{})
		copy(ring[at+1:], ring[at:])
		ring[at] = n
	}
	return ring
}

func commonPrefix(a, b []string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// checkOrder reports whether ring holds exactly survivors and newcomers with
// the survivors in their given relative order.
func checkOrder(ring, survivors, newcomers []MemberInfo) bool {
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
