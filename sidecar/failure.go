package sidecar

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/sidecar/gossip"
	"github.com/ringside/ringside/sidecar/sockreset"
	"github.com/ringside/ringside/trainer/api"
)

// How a death becomes a new generation. No sidecar acts on its own
// observation: each one that finds a peer unresponsive (its own gossip
// probe failed, a check failed, or the trainer's connection to the peer
// broke and the peer's gossip port does not answer) votes against the
// peer's registration in etcd (coordinator.Member.Suspect). checkersPerVote
// other members check the peer at once when a vote appears, so a second,
// independent observation follows the first within a probe timeout; two
// votes evict, and the leader commits the generation without the peer. A
// live peer deletes votes against it, so one confused observer, or a
// gossip-only partition, evicts nobody. Sockets are reset and the trainer
// is told only of deaths that are confirmed: the member is in the new
// generation's Left, or this sidecar's own vote evicted it.

// checkEvery bounds how often one member is checked: during a gossip
// partition every vote would otherwise set off checks that vote again.
const checkEvery = 500 * time.Millisecond

// checkersPerVote is how many members, the ones after the suspect in ring
// order, check a suspect when another member votes against it.
const checkersPerVote = 3

// suspicion is this sidecar's vote against one peer.
type suspicion struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// suspects is gossip's callback set; its methods must not block memberlist
// for long (they run on gossip's event goroutine).
type suspects struct{ a *Agent }

// MemberDead: gossip's verdict came from some member's suspicion timeout;
// it is a reason to look, not a confirmation.
func (s suspects) MemberDead(name string, _ net.IP) { s.a.check(name, "gossip declared it dead") }

// MemberSuspect: our own probe found name unresponsive.
func (s suspects) MemberSuspect(name string, _ net.IP) { s.a.suspect(name, "gossip probe failed") }

// MemberAnswered: name answers again; our vote, if any, goes.
func (s suspects) MemberAnswered(name string) { s.a.withdraw(name) }

// MemberClosed: name's watch connection closed; its process may have
// exited.
func (s suspects) MemberClosed(name string) { s.a.check(name, "its watch connection closed") }

// MemberJoined: name is back in gossip (it refuted being declared dead, or
// rejoined); our vote, if any, goes.
func (s suspects) MemberJoined(name string, _ net.IP) { s.a.withdraw(name) }

// joined reports whether the agent has joined the job: gossip events may
// arrive before.
func (a *Agent) joined() bool {
	select {
	case <-a.started:
		return true
	default:
		return false
	}
}

// suspect starts this sidecar's vote against name unless one stands. The
// vote is retried while etcd fails, so a death during an etcd outage is
// acted on when etcd returns.
func (a *Agent) suspect(name, why string) { a.startVote(name, why, false) }

// suspectGone votes against name, whose process is gone for certain.
func (a *Agent) suspectGone(name, why string) { a.startVote(name, why, true) }

func (a *Agent) startVote(name, why string, gone bool) {
	if name == a.cfg.MemberID || !a.joined() {
		return
	}
	a.mu.Lock()
	if a.casting(name) {
		a.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(a.runCtx)
	s := &suspicion{cancel: cancel, done: make(chan struct{})}
	a.suspicions[name] = s
	a.mu.Unlock()
	a.log.Info("voting against an unresponsive member", "suspect", name, "why", why)
	a.wg.Go(func() {
		defer close(s.done)
		verdict := a.vote(ctx, name, gone)
		if verdict == coordinator.Evicted {
			a.announceDead(name)
		}
		if verdict != coordinator.Voted {
			a.mu.Lock()
			if a.suspicions[name] == s {
				delete(a.suspicions, name)
			}
			a.mu.Unlock()
		}
	})
}

// casting reports whether our vote against name is being cast. One that
// was stored does not count: it may have been refuted since (or swept
// away with an eviction), so a new failure votes again. a.mu is held.
func (a *Agent) casting(name string) bool {
	s, ok := a.suspicions[name]
	if !ok {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// vote casts the vote, retrying with backoff until it is stored or ctx
// ends. A suspect whose gossip port refuses a connection is gone for
// certain, and so voted against as such: its eviction need not wait out
// the refute window.
func (a *Agent) vote(ctx context.Context, name string, gone bool) coordinator.Verdict {
	gone = gone || a.gossip.Gone(ctx, name)
	bo := newRetryBackoff()
	for {
		cast := a.member.Suspect
		if gone {
			cast = a.member.SuspectGone
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := cast(actx, name)
		cancel()
		if err == nil {
			a.metrics.votes.WithLabelValues(v.String()).Inc()
			return v
		}
		if ctx.Err() != nil {
			return coordinator.Gone
		}
		a.metrics.etcdErrors.WithLabelValues("suspect").Inc()
		a.log.Warn("could not vote against a suspect; retrying", "suspect", name, "err", err)
		select {
		case <-ctx.Done():
			return coordinator.Gone
		case <-time.After(bo.NextBackOff()):
		}
		// The vote must be news when it lands: one that waited out an etcd
		// outage may be about a partition that healed meanwhile.
		st, err := a.gossip.Check(ctx, name)
		if err == nil && st == gossip.Answered {
			a.log.Info("suspect answers again; vote dropped before it was stored", "suspect", name)
			return coordinator.Gone
		}
		gone = gone || st == gossip.Gone
	}
}

// withdraw deletes this sidecar's vote against name, which answers again.
func (a *Agent) withdraw(name string) {
	a.mu.Lock()
	s, ok := a.suspicions[name]
	delete(a.suspicions, name)
	a.mu.Unlock()
	if !ok {
		return
	}
	s.cancel()
	<-s.done
	ctx, cancel := context.WithTimeout(a.runCtx, 2*time.Second)
	defer cancel()
	if err := a.member.Withdraw(ctx, name); err != nil {
		a.metrics.etcdErrors.WithLabelValues("withdraw").Inc()
		a.log.Warn("could not withdraw a vote; it goes with this member's lease", "suspect", name, "err", err)
		return
	}
	a.log.Info("suspect answers again; vote withdrawn", "suspect", name)
}

// check pings name once and votes against it if it does not answer, as
// against a process gone for certain if its port refuses a connection.
func (a *Agent) check(name, why string) {
	if name == a.cfg.MemberID || !a.joined() {
		return
	}
	a.mu.Lock()
	now := time.Now()
	// A check lasts one probe timeout, well under checkEvery: one started
	// since then is still running or has just voted.
	skip := a.casting(name) || a.announced[name] || now.Sub(a.checkedAt[name]) < checkEvery
	if !skip {
		a.checkedAt[name] = now
	}
	a.mu.Unlock()
	if skip {
		return
	}
	a.wg.Go(func() {
		st, err := a.gossip.Check(a.runCtx, name)
		switch {
		case err != nil:
			a.log.Debug("could not check a suspect", "suspect", name, "err", err)
		case st == gossip.Gone:
			a.suspectGone(name, why+"; its port refused a connection")
		case st == gossip.Silent:
			a.suspect(name, why+"; it did not answer a check either")
		case !a.gossip.Alive(name):
			// Declared dead while it lives (a partition that healed):
			// back into our gossip, or its real death goes unprobed.
			if err := a.gossip.Rejoin(a.runCtx, name); err != nil {
				a.log.Warn("could not rejoin a member gossip had declared dead", "member", name, "err", err)
			} else {
				a.log.Info("rejoined a member gossip had declared dead: it answers", "member", name)
			}
		}
	})
}

// watchNeighbours has gossip watch the Quorum members before this one in
// g's ring (see gossip.Watch). Each member is then watched by the Quorum
// members after it, its first checkers: when its process exits, their
// watches close together, their checks find its port refusing, and their
// votes evict it at once.
func (a *Agent) watchNeighbours(g *record.Generation) {
	if g == nil {
		return
	}
	n, i := len(g.Members), -1
	for j, m := range g.Members {
		if m.ID == a.cfg.MemberID {
			i = j
			break
		}
	}
	var names []string
	for k := 1; i >= 0 && k <= coordinator.Quorum && k < n; k++ {
		names = append(names, g.Members[(i-k+n)%n].ID)
	}
	a.gossip.Watch(names)
}

// reconcileEvery is how often the members of the generation are compared
// with the gossip view.
const reconcileEvery = 2 * time.Second

// reconcileGossip checks, every reconcileEvery, each member of the
// generation that gossip no longer holds alive: gossip forgets a member
// it declared dead (during a partition, a CPU stall), and stops probing
// it, while the member is still registered. A check that gets no answer
// votes against it; one that does brings it back into gossip.
func (a *Agent) reconcileGossip(ctx context.Context) {
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g, _ := a.generation()
		if g == nil {
			continue
		}
		a.watchNeighbours(g) // again: a watch that closed, a member gossip had not seen
		for _, m := range g.Members {
			if m.ID != a.cfg.MemberID && !a.gossip.Alive(m.ID) {
				a.check(m.ID, "in the generation but gone from gossip")
			}
		}
	}
}

// checkVotes checks the suspects other members vote against, when this
// member is one of their checkers.
func (a *Agent) checkVotes(ctx context.Context) {
	for v := range a.job.WatchVotes(ctx) {
		if v.Target == a.cfg.MemberID || v.Voter == a.cfg.MemberID {
			continue
		}
		g, _ := a.generation()
		if g != nil && isChecker(g, v.Target, v.Voter, a.cfg.MemberID) {
			a.check(v.Target, v.Voter+" voted against it")
		}
	}
}

// isChecker reports whether me is among the checkersPerVote members after
// target in g's ring, the voter skipped.
func isChecker(g *record.Generation, target, voter, me string) bool {
	i := -1
	for j, m := range g.Members {
		if m.ID == target {
			i = j
			break
		}
	}
	if i < 0 {
		return false
	}
	n := 0
	for k := 1; k < len(g.Members) && n < checkersPerVote; k++ {
		id := g.Members[(i+k)%len(g.Members)].ID
		if id == voter {
			continue
		}
		if id == me {
			return true
		}
		n++
	}
	return false
}

// announceLeft announces the confirmed deaths of a new generation (members
// of prev in g.Left not announced already) and returns them: their
// connections are the caller's to reset.
func (a *Agent) announceLeft(prev, g *record.Generation) []record.RankedMember {
	var dead []record.RankedMember
	for _, id := range g.Left {
		a.mu.Lock()
		done := a.announced[id]
		delete(a.announced, id)
		a.mu.Unlock()
		if done || prev == nil || id == a.cfg.MemberID {
			continue
		}
		if m, in := prev.Member(id); in {
			a.publishDead(id)
			dead = append(dead, m)
		}
	}
	return dead
}

// sweep checks this member's checkersPerVote successors in g's ring after
// a confirmed death: deaths come together (a node, a rack, a preempted
// group of pods), and a peer that died with the one just evicted then gets
// its votes within a check, not whenever a probe happens to reach it.
func (a *Agent) sweep(g *record.Generation) {
	i := -1
	for j, m := range g.Members {
		if m.ID == a.cfg.MemberID {
			i = j
		}
	}
	if i < 0 {
		return
	}
	for k := 1; k <= checkersPerVote && k < len(g.Members); k++ {
		a.check(g.Members[(i+k)%len(g.Members)].ID, "a sweep after a confirmed death")
	}
}

// announceDead announces a death this sidecar's own vote confirmed, ahead
// of the generation that follows.
func (a *Agent) announceDead(name string) {
	g, _ := a.generation()
	a.mu.Lock()
	a.announced[name] = true
	a.mu.Unlock()
	if g != nil {
		if m, in := g.Member(name); in {
			a.resetSockets(name, net.ParseIP(m.Addr))
		}
	}
	a.publishDead(name)
	if g != nil {
		a.sweep(g)
	}
}

// resetSockets destroys the trainer's connections to a dead peer, so a
// collective blocked on it fails now.
func (a *Agent) resetSockets(name string, ip net.IP) {
	if ip == nil || ip.Equal(net.ParseIP(a.cfg.Advertise)) {
		return // a peer on our own address: resetting would cut our own
	}
	n, err := a.resets.Reset(a.runCtx, ip)
	switch {
	case errors.Is(err, sockreset.ErrUnsupported):
		// logged once by the resetter
	case err != nil:
		a.log.Warn("socket reset failed", "dead", name, "err", err)
	case n > 0:
		a.metrics.socketsReset.Add(float64(n))
		a.log.Info("destroyed connections to the dead member", "dead", name, "sockets", n)
	}
}

// publishDead notes when a member of the generation died (for the
// failure-to-commit metric) and tells the trainer.
func (a *Agent) publishDead(name string) {
	now := time.Now()
	a.metrics.deadPeers.Inc()
	a.mu.Lock()
	if a.gen != nil {
		if _, in := a.gen.Member(name); in {
			a.deadAt[name] = now
		}
	}
	a.mu.Unlock()
	a.events.publish(api.Event{Type: api.EventMemberDead, Time: now, Member: name})
	a.log.Info("member confirmed dead", "dead", name)
}

// reportSuspect checks a trainer's report that a collective with peer
// failed. A refused connection to the peer's gossip port means its process
// is gone: this sidecar votes at once. One that connects means it lives
// (the collective failed because a member elsewhere in the ring died);
// one that times out gets a gossip check, which votes if it fails.
func (a *Agent) reportSuspect(f api.FailureReport) {
	if !a.joined() {
		return
	}
	a.wg.Go(func() {
		ctx, cancel := context.WithTimeout(a.runCtx, 2*time.Second)
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
			switch {
			case err == nil:
				conn.Close()
				a.log.Info("trainer reported a failed collective, but the peer answers", "peer", f.Peer, "error", f.Error)
			case errors.Is(err, syscall.ECONNREFUSED):
				a.suspectGone(f.Peer, "the trainer's collective with it failed and its gossip port refuses connections")
			default:
				a.check(f.Peer, "the trainer's collective with it failed and its gossip port does not answer")
			}
		}
	})
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

// newRetryBackoff paces retries of a vote while etcd fails: from 50 ms up
// to 1 s apart, until the caller's context ends.
func newRetryBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = time.Second
	b.MaxElapsedTime = 0
	return b
}
