package sidecar

import "github.com/ringside/ringside/coordinator"

// APIVersion is the version of the trainer API, in every path (/v1/...)
// and answer.
const APIVersion = "v1"

// Member states in a rendezvous answer.
const (
	StateActive   = "active"   // this member trains in the generation
	StateStandby  = "standby"  // eligible, waiting for room
	StatePaused   = "paused"   // the generation is below the policy's min
	StateExcluded = "excluded" // not part of it (draining, or not yet seen)
)

// Rendezvous is what a trainer needs to join a generation's process group.
type Rendezvous struct {
	APIVersion string `json:"api_version"`
	Generation int64  `json:"generation"`
	Member     string `json:"member"`
	State      string `json:"state"`
	// Rank is the member's first rank and Ranks all of its ranks (one per
	// slot); -1 and empty unless State is active.
	Rank  int   `json:"rank"`
	Ranks []int `json:"ranks,omitempty"`
	// LocalWorldSize is the member's slots; GroupRank its place in the ring
	// (torchrun's GROUP_RANK / NODE_RANK) out of NumGroups.
	LocalWorldSize int                        `json:"local_world_size"`
	WorldSize      int                        `json:"world_size"`
	GroupRank      int                        `json:"group_rank"`
	NumGroups      int                        `json:"num_groups"`
	MasterAddr     string                     `json:"master_addr"`
	MasterPort     int                        `json:"master_port"`
	Members        []coordinator.RankedMember `json:"members"`
	// NCCL holds the NCCL settings netopt chose for this node.
	NCCL   map[string]string `json:"nccl,omitempty"`
	Reason string            `json:"reason,omitempty"`
}

func newRendezvous(g *coordinator.Generation, self string, nccl map[string]string) *Rendezvous {
	r := &Rendezvous{
		APIVersion: APIVersion,
		Generation: g.Number,
		Member:     self,
		State:      StateExcluded,
		Rank:       -1,
		GroupRank:  -1,
		WorldSize:  g.WorldSize,
		NumGroups:  len(g.Members),
		MasterAddr: g.MasterAddr,
		MasterPort: g.MasterPort,
		Members:    g.Members,
		NCCL:       nccl,
		Reason:     g.Reason,
	}
	for i, m := range g.Members {
		if m.ID != self {
			continue
		}
		r.State, r.Rank, r.GroupRank, r.LocalWorldSize = StateActive, m.Rank, i, m.Slots
		for k := range m.Slots {
			r.Ranks = append(r.Ranks, m.Rank+k)
		}
		if g.Paused {
			r.State = StatePaused
		}
		return r
	}
	for _, id := range g.Standby {
		if id == self {
			r.State = StateStandby
		}
	}
	return r
}
