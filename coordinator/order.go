package coordinator

// appendOrder is the ring order when no RingOrderer is configured, or when
// the configured one broke its contract: survivors in their order, then
// newcomers in the order given. It knows nothing of the topology; the
// topology-aware orderer is netopt's, which the sidecar configures.
func appendOrder(survivors, newcomers []MemberInfo) []MemberInfo {
	ring := make([]MemberInfo, 0, len(survivors)+len(newcomers))
	ring = append(ring, survivors...)
	return append(ring, newcomers...)
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
