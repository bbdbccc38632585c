package coordinator

import (
	"errors"
	"fmt"
	"strings"
)

// State is a member's own view of its participation.
type State string

const (
	// StateActive members are eligible for the next generation.
	StateActive State = "active"
	// StateDraining members are leaving (preemption) and are excluded from the
	// next generation, which the leader commits at once.
	StateDraining State = "draining"
	// StatePending members are registered but wait for their trainer to
	// start: no generation places them until they turn active (Activate),
	// so a trainer that starts slowly does not hold up the others'
	// next group.
	StatePending State = "pending"
)

// MemberInfo is what a member publishes under members/<id>.
type MemberInfo struct {
	ID string `json:"id"`
	// Addr is the host or IP other workers reach this member's trainer at.
	Addr string `json:"addr"`
	// Node is the Kubernetes node (or host) the member runs on.
	Node string `json:"node,omitempty"`
	// Topology is the member's place in the network, broad to narrow, for
	// example ["zone-a", "block-1", "rack-3", "host-7"].
	Topology []string `json:"topology,omitempty"`
	// Slots is the number of trainer processes (ranks) the member runs.
	Slots int `json:"slots"`
	// GossipAddr is host:port of the member's gossip endpoint, if any.
	GossipAddr string `json:"gossip_addr,omitempty"`
	State      State  `json:"state"`
	// Incarnation counts the member's trainer restarts after a failure; a
	// change forces a new generation with the same members.
	Incarnation int64 `json:"incarnation,omitempty"`

	// JoinRevision is the etcd CreateRevision of the member's key: the order
	// in which members joined. Filled in by readers, never stored.
	JoinRevision int64 `json:"-"`
}

// Validate reports what is wrong with a member record.
func (m MemberInfo) Validate() error {
	var errs []error
	if m.ID == "" {
		errs = append(errs, errors.New("id is empty"))
	} else if strings.ContainsAny(m.ID, "/ \t\n") {
		errs = append(errs, fmt.Errorf("id %q contains '/' or whitespace", m.ID))
	}
	if m.Addr == "" {
		errs = append(errs, errors.New("addr is empty"))
	}
	if m.Slots < 1 {
		errs = append(errs, fmt.Errorf("slots must be at least 1, got %d", m.Slots))
	}
	switch m.State {
	case StateActive, StateDraining, StatePending:
	default:
		errs = append(errs, fmt.Errorf("state %q is not %q, %q or %q", m.State, StateActive, StateDraining, StatePending))
	}
	return errors.Join(errs...)
}

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
	Order(survivors, newcomers []MemberInfo) []MemberInfo
}
