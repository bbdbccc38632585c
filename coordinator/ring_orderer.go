package coordinator

import "github.com/ringside/ringside/coordinator/record"

// RingOrderer decides where members sit in the all-reduce ring.
//
// Order returns every member of survivors and newcomers exactly once.
// survivors are given in their current ring order and must keep that relative
// order (stable ranks); newcomers are given in join order and may be placed
// anywhere. The coordinator checks the result and falls back to
// TopologyOrderer if an implementation breaks the contract.
type RingOrderer interface {
	Order(survivors, newcomers []record.MemberInfo) []record.MemberInfo
}
