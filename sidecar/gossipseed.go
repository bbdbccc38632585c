package sidecar

import (
	"context"
	"time"
)

// seedGossip joins the gossip addresses of members not joined yet.
func (a *Agent) seedGossip(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	members, err := a.job.Members(ctx)
	if err != nil {
		a.log.Warn("could not list members to seed gossip", "err", err)
		return
	}
	var seeds []string
	a.mu.Lock()
	for _, m := range members {
		if m.ID != a.cfg.MemberID && m.GossipAddr != "" && !a.gossipped[m.GossipAddr] {
			seeds = append(seeds, m.GossipAddr)
		}
	}
	a.mu.Unlock()
	if len(seeds) == 0 {
		return
	}
	n, err := a.gossip.Join(ctx, seeds)
	if err != nil && n == 0 {
		a.log.Warn("gossip join", "seeds", seeds, "err", err)
		return
	}
	a.mu.Lock()
	for _, s := range seeds {
		a.gossipped[s] = true
	}
	a.mu.Unlock()
}
