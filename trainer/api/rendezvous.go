package api

import (
	"log/slog"

	"github.com/ringside/ringside/coordinator/record"
)

// APIVersion is the version of the trainer API, in every path (/v1/...)
// and answer.
const APIVersion = "v1"

// Rendezvous is what a trainer needs to join a generation's process group:
// one member's view of a generation.
type Rendezvous struct {
	APIVersion string `json:"api_version"`
	Generation int64  `json:"generation"`
	Member     string `json:"member"`
	// State is the member's place in the generation: record.StateActive,
	// StateStandby, StatePaused or StateExcluded.
	State record.State `json:"state"`
	// Rank is the member's first rank and Ranks all of its ranks (one per
	// slot); -1 and empty unless the member is placed (active or paused).
	Rank  int   `json:"rank"`
	Ranks []int `json:"ranks,omitempty"`
	// LocalWorldSize is the member's slots; GroupRank its place in the ring
	// (torchrun's GROUP_RANK / NODE_RANK) out of NumGroups.
	LocalWorldSize int                   `json:"local_world_size"`
	WorldSize      int                   `json:"world_size"`
	GroupRank      int                   `json:"group_rank"`
	NumGroups      int                   `json:"num_groups"`
	MasterAddr     string                `json:"master_addr"`
	MasterPort     int                   `json:"master_port"`
	Members        []record.RankedMember `json:"members"`
	// NCCL holds the NCCL settings netopt chose for this node.
	NCCL   map[string]string `json:"nccl,omitempty"`
	Reason string            `json:"reason,omitempty"`
	// StoreToken is the generation's secret for rank 0's store (hex; see
	// record.Generation.StoreToken): rank 0's store demands it of every
	// client, and every rank sends it. Only a placed member (active or
	// paused) gets it. A secret: never log it.
	StoreToken string `json:"store_token,omitempty"`
}

// LogValue is what slog writes for a rendezvous: never its store token.
func (r *Rendezvous) LogValue() slog.Value {
	return slog.GroupValue(slog.Int64("generation", r.Generation), slog.String("member", r.Member),
		slog.String("state", string(r.State)), slog.Int("rank", r.Rank), slog.Int("world_size", r.WorldSize))
}

// NewRendezvous returns member self's view of g, with the node's NCCL
// settings. In a generation that stopped the job (g.Stop) every member is
// excluded.
func NewRendezvous(g *record.Generation, self string, nccl map[string]string) *Rendezvous {
	r := &Rendezvous{
		APIVersion: APIVersion,
		Generation: g.Number,
		Member:     self,
		State:      record.StateExcluded,
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
	if g.Stop != nil {
		return r // the job stopped: nobody trains in it
	}
	for i, m := range g.Members {
		if m.ID != self {
			continue
		}
		r.State, r.Rank, r.GroupRank, r.LocalWorldSize = record.StateActive, m.Rank, i, m.Slots
		for k := range m.Slots {
			r.Ranks = append(r.Ranks, m.Rank+k)
		}
		if g.Paused {
			r.State = record.StatePaused
		}
		r.StoreToken = g.StoreToken
		return r
	}
	for _, id := range g.Standby {
		if id == self {
			r.State = record.StateStandby
		}
	}
	return r
}
