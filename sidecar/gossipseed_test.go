package sidecar

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ringside/ringside/coordinator/record"
)

// A sidecar starting joins every member; a generation with a newcomer is
// joined at once only by the newcomer's ring neighbours: the other members
// hear of it through gossip, rather than all of them syncing their state
// with it at the same moment.
func TestOnlyANewcomersNeighboursJoinIt(t *testing.T) {
	g := &record.Generation{Number: 2}
	for i := range 16 {
		g.Members = append(g.Members, record.RankedMember{ID: fmt.Sprintf("w%d", i)})
	}
	newcomer := []record.MemberInfo{{ID: "w8", GossipAddr: "127.0.0.9:7946"}}
	var joiners []string
	for _, m := range g.Members {
		if m.ID != "w8" && len(seedsOf(newcomer, g, m.ID)) > 0 {
			joiners = append(joiners, m.ID)
		}
	}
	if want := []string{"w5", "w6", "w7", "w9", "w10", "w11"}; !slices.Equal(joiners, want) {
		t.Errorf("members joining the newcomer: %v, want its neighbours %v", joiners, want)
	}
	all := []record.MemberInfo{{ID: "w1", GossipAddr: "a:1"}, {ID: "w2", GossipAddr: "b:1"}}
	if got := seedsOf(all, nil, "w9"); !slices.Equal(got, []string{"a:1", "b:1"}) {
		t.Errorf("a starting sidecar joins %v, want every member", got)
	}
}
