package coordinator

import "github.com/ringside/ringside/coordinator/record"

// RingOrderer decides where members sit in the all-reduce ring.
//
// Order returns every member of survivors and newcomers exactly once.
// survivors are given in their current ring order and must keep that relative
// order (stable ranks); newcomers are given in join order and may be placed
// anywhere. netopt.Orderer is the implementation (topology-aware). The
// coordinator checks the result; without an orderer, or when one breaks
// the contract, survivors keep their order and newcomers follow in join
// order.
type RingOrderer interface {
	Order(survivors, newcomers []record.MemberInfo) []record.MemberInfo
}

// appendOrder is the ring order when no RingOrderer is configured, or when
// the configured one broke its contract: survivors in their order, then
// newcomers in the order given. It knows nothing of the topology; the
// topology-aware orderer is netopt's, which the sidecar configures.
func appendOrder(survivors, newcomers []record.MemberInfo) []record.MemberInfo {
	ring := make([]record.MemberInfo, 0, len(survivors)+len(newcomers))
	ring = append(ring, survivors...)
	return append(ring, newcomers...)
}

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
