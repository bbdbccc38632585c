package sidecar

import (
	"context"
	"slices"
	"time"

	"github.com/ringside/ringside/coordinator/record"
)

// seedGossip joins gossip addresses of members not joined yet: starting (g
// nil), every member's. With a generation that names members not joined
// yet (newcomers), only their ring neighbours, which watch them, join them
// at once: the others hear of them through gossip (and the newcomer joined
// every member itself), rather than every member syncing its state with a
// newcomer at the same moment (at 128 members, that stalled the newcomer
// for most of a second, long enough to be voted against). A generation
// that only lost members costs no read, which every member would make at
// once.
func (a *Agent) seedGossip(ctx context.Context, g *record.Generation) {
	if g != nil && a.seededAll(g) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	members, err := a.job.Members(ctx)
	if err != nil {
		a.log.Warn("could not list members to seed gossip", "err", err)
		return
	}
	var fresh []record.MemberInfo
	a.mu.Lock()
	for _, m := range members {
		if m.ID != a.cfg.MemberID && m.GossipAddr != "" && a.seeded[m.ID] != m.GossipAddr {
			fresh = append(fresh, m)
		}
	}
	a.mu.Unlock()
	if seeds := seedsOf(fresh, g, a.cfg.MemberID); len(seeds) > 0 {
		n, err := a.gossip.Join(ctx, seeds)
		if err != nil && n == 0 {
			a.log.Warn("gossip join", "seeds", seeds, "err", err)
			return
		}
	}
	a.mu.Lock()
	for _, m := range fresh {
		a.seeded[m.ID] = m.GossipAddr
	}
	a.mu.Unlock()
}

// seededAll reports whether every member and standby of g but this one was
// joined already.
func (a *Agent) seededAll(g *record.Generation) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range g.Members {
		if m.ID != a.cfg.MemberID && a.seeded[m.ID] == "" {
			return false
		}
	}
	for _, id := range g.Standby {
		if id != a.cfg.MemberID && a.seeded[id] == "" {
			return false
		}
	}
	return true
}

// seedsOf returns the gossip addresses that member self joins among fresh,
// the members it has not joined yet: all of them when starting (g nil),
// else those that are its ring neighbours in g.
func seedsOf(fresh []record.MemberInfo, g *record.Generation, self string) []string {
	var near []string
	if g != nil {
		near = neighbours(g, self)
	}
	var seeds []string
	for _, m := range fresh {
		if g == nil || slices.Contains(near, m.ID) {
			seeds = append(seeds, m.GossipAddr)
		}
	}
	return seeds
}
