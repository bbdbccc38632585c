package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
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
	// State is one of the registration states (State.Registered).
	State State `json:"state"`
	// Incarnation counts the member's trainer restarts after a failure; a
	// change forces a new generation with the same members.
	Incarnation int64 `json:"incarnation,omitempty"`
	// Instance tells one process of the member from another: a pod
	// restarted under the same id is a new instance, one that registers
	// again after an etcd outage is not. Join sets it.
	Instance string `json:"instance,omitempty"`
	// ActiveSince is when the member last turned active, by its own
	// clock: a leader elected while the job starts reads from it when the
	// start window opened (coordinator.Config.StartWindow).
	ActiveSince time.Time `json:"active_since,omitzero"`
	// RestartMode says the member's trainer runs in restart mode (`ringside
	// exec`), where every new generation restarts its processes: the
	// leader batches joins for longer (coordinator.Config.RestartSettle).
	RestartMode bool `json:"restart_mode,omitempty"`

	// JoinRevision is the etcd CreateRevision of the member's key: the order
	// in which members joined. Filled in by DecodeMember, never stored.
	JoinRevision int64 `json:"-"`
}

// Validate reports what is wrong with a member record: every field is
// bounded (see MaxSlots and the other bounds) and every address parses.
func (m MemberInfo) Validate() error {
	var errs []error
	if err := ValidateID(m.ID); err != nil {
		errs = append(errs, err)
	}
	if m.Addr == "" {
		errs = append(errs, errors.New("addr is empty"))
	} else if err := ValidateHost(m.Addr); err != nil {
		errs = append(errs, fmt.Errorf("addr: %w", err))
	}
	if m.Slots < 1 {
		errs = append(errs, fmt.Errorf("slots must be at least 1, got %d", m.Slots))
	} else if m.Slots > MaxSlots {
		errs = append(errs, fmt.Errorf("slots %d is more than %d", m.Slots, MaxSlots))
	}
	if !m.State.Registered() {
		errs = append(errs, fmt.Errorf("state %q is not %q, %q or %q", m.State, StateActive, StateDraining, StatePending))
	}
	if m.GossipAddr != "" {
		if err := ValidateHostPort(m.GossipAddr); err != nil {
			errs = append(errs, fmt.Errorf("gossip_addr: %w", err))
		}
	}
	if err := validText("node", m.Node, MaxHostLen); err != nil {
		errs = append(errs, err)
	}
	if len(m.Topology) > MaxTopologyLevels {
		errs = append(errs, fmt.Errorf("topology has %d levels, more than %d", len(m.Topology), MaxTopologyLevels))
	} else {
		for _, level := range m.Topology {
			if err := validText("a topology level", level, MaxLabelLen); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	if m.Incarnation < 0 || m.Incarnation > MaxGeneration {
		errs = append(errs, fmt.Errorf("incarnation %d is out of range", m.Incarnation))
	}
	if err := validText("instance", m.Instance, MaxIDLen); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DecodeMember decodes and checks the value stored under key, a
// members/<id> key created at etcd revision createRev: the record must be
// valid and name the key's id. createRev becomes its JoinRevision.
func DecodeMember(key string, value []byte, createRev int64) (MemberInfo, error) {
	var info MemberInfo
	err := json.Unmarshal(value, &info)
	if err == nil {
		err = info.Validate()
	}
	if err == nil && info.ID != idOf(key) {
		err = fmt.Errorf("id %q does not match the key", info.ID)
	}
	if err != nil {
		return info, fmt.Errorf("malformed member: %w", err)
	}
	info.JoinRevision = createRev
	return info, nil
}
