package sidecar

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/sidecar/api"
	"github.com/ringside/ringside/sidecar/sockreset"
)

// memberDead is gossip's callback; it must not block memberlist.
func (a *Agent) memberDead(name string, ip net.IP) {
	a.declareDead(deadPeer{name: name, ip: ip})
}

func (a *Agent) declareDead(d deadPeer) {
	select {
	case a.deadCh <- d:
	default:
		a.log.Warn("dropping a death notice: too many at once", "dead", d.name)
	}
}

// handleDead reacts to a confirmed death: the trainer's sockets to the
// peer are destroyed so a blocked collective fails now, and the peer's lease
// is revoked (by the leader, or by anyone if the peer led) so the next
// generation is committed without waiting for the lease to expire.
func (a *Agent) handleDead(ctx context.Context, d deadPeer) {
	if d.name == a.cfg.MemberID {
		return
	}
	a.announceDead(d)
	if d.ip != nil && !d.ip.Equal(net.ParseIP(a.cfg.Advertise)) {
		n, err := a.resets.Reset(ctx, d.ip)
		switch {
		case errors.Is(err, sockreset.ErrUnsupported):
			// logged once by the resetter
		case err != nil:
			a.log.Warn("socket reset failed", "dead", d.name, "err", err)
		case n > 0:
			a.metrics.socketsReset.Add(float64(n))
			a.log.Info("destroyed connections to the dead member", "dead", d.name, "sockets", n)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	revoke := a.member.Revoke
	if d.refused {
		revoke = a.member.Evict
	}
	err := revoke(rctx, d.name)
	switch {
	case errors.Is(err, coordinator.ErrNotLeader):
	case err != nil:
		a.metrics.etcdErrors.WithLabelValues("revoke").Inc()
		a.log.Warn("could not evict the dead member", "dead", d.name, "err", err)
	}
}

// announceDead notes when a member of the generation died (for the
// failure-to-commit metric) and tells the trainer.
func (a *Agent) announceDead(d deadPeer) {
	now := time.Now()
	a.metrics.deadPeers.Inc()
	a.mu.Lock()
	if a.gen != nil {
		if _, in := a.gen.Member(d.name); in {
			a.deadAt[d.name] = now
		}
	}
	a.mu.Unlock()
	a.events.publish(api.Event{Type: api.EventMemberDead, Time: now, Member: d.name})
	a.log.Info("member declared dead", "dead", d.name, "addr", d.ip)
}

// reportSuspect checks a trainer's report that a collective with peer
// failed: if the peer's gossip port refuses connections, its process is
// gone and this member evicts it at once; if the port does not answer at
// all, it is treated as dead by gossip's rules (the leader evicts).
func (a *Agent) reportSuspect(f api.FailureReport) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		members, err := a.job.Members(ctx)
		if err != nil {
			return
		}
		for _, m := range members {
			if m.ID != f.Peer || m.GossipAddr == "" {
				continue
			}
			d := net.Dialer{Timeout: 300 * time.Millisecond}
			conn, err := d.DialContext(ctx, "tcp", m.GossipAddr)
			if err == nil {
				conn.Close()
				a.log.Info("trainer reported a failed collective, but the peer answers", "peer", f.Peer, "error", f.Error)
				return
			}
			refused := errors.Is(err, syscall.ECONNREFUSED)
			a.log.Info("trainer reported a failed collective and the peer does not answer",
				"peer", f.Peer, "error", f.Error, "refused", refused)
			a.declareDead(deadPeer{name: f.Peer, ip: net.ParseIP(m.Addr), refused: refused})
		}
	}()
}

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
