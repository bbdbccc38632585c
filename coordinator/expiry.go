package coordinator

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// An etcd frozen or unreachable for longer than the TTL expires every
// lease when it answers again: every member key goes at once, and each
// member registers again a moment later. Committing those departures, and
// then the returns, would resize a job that never lost anyone. So the
// leader tells a departure it must act on (an eviction on confirmed votes,
// a member's Leave: both leave evicted/<id> behind) from a key that only
// timed out, and holds a member of the generation whose key timed out in
// the ring for Config.ExpiryGrace: if it registers again meanwhile, nothing
// changed. A member that a peer votes against is not held when the vote
// found its process gone or its node unreachable, or came from a member
// whose trainer it holds up: its key timed out and it is dead, or costs
// the job every moment (in a job of two, where one vote never evicts,
// its lease expiring is how it leaves). Silent votes that hold up no
// trainer do not stop the hold: a sidecar starved of CPU for longer than
// the TTL (128 sidecars on two busy cores: 2.8 s) loses its lease and is
// silent meanwhile, exactly as a frozen one, and costs the job nothing
// while it comes back; the idle refute window is longer than the TTL, so
// that its votes do not evict it first (see Config.IdleRefuteWindow).

// held is a member of the generation whose key timed out.
type held struct {
	info  record.MemberInfo
	until time.Time
}

// planning returns the members the leader plans with: the registered ones
// and the held ones.
func (st *leaderState) planning() map[string]record.MemberInfo {
	if len(st.held) == 0 {
		return st.members
	}
	all := make(map[string]record.MemberInfo, len(st.members)+len(st.held))
	for id, info := range st.members {
		all[id] = info
	}
	for id, h := range st.held {
		if _, in := all[id]; !in {
			all[id] = h.info
		}
	}
	return all
}

// holdMissing holds, at the start of a term, the members of the generation
// that have no key, no eviction record and no vote against them at rev
// that acts at once (see actsAtOnce).
func (m *Member) holdMissing(ctx context.Context, st *leaderState, rev int64, now time.Time) error {
	grace := m.job.cfg.ExpiryGrace
	if st.gen == nil || grace == 0 {
		return nil
	}
	var missing []record.RankedMember
	for _, rm := range st.gen.Members {
		if _, in := st.members[rm.ID]; !in {
			missing = append(missing, rm)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	p := m.job.cfg.Prefix()
	resp, err := m.job.client.Txn(ctx).Then(
		clientv3.OpGet(p+record.EvictedDir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(rev)),
		clientv3.OpGet(p+record.SuspectsDir, clientv3.WithPrefix(), clientv3.WithRev(rev)),
	).Commit()
	if err != nil {
		return err
	}
	gone := make(map[string]bool)
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		gone[strings.TrimPrefix(string(kv.Key), p+record.EvictedDir)] = true
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if target, ok := m.actsAtOnce(kv); ok {
			gone[target] = true
		}
	}
	for _, rm := range missing {
		if gone[rm.ID] {
			continue
		}
		info := record.MemberInfo{ID: rm.ID, Addr: rm.Addr, Slots: rm.Slots, Incarnation: rm.Incarnation, Instance: rm.Instance, State: record.StateActive}
		st.hold(rm.ID, info, now.Add(grace))
		m.log.Info("a member of the generation has no key: holding its place while it registers again", "held", rm.ID, "for", grace)
	}
	return nil
}

// holdIfTimedOut holds member id, whose key was just deleted, if it was in
// the generation, nothing evicted it and no peer's vote against it acts at
// once (see actsAtOnce).
func (m *Member) holdIfTimedOut(ctx context.Context, st *leaderState, id string, info record.MemberInfo, now time.Time) {
	grace := m.job.cfg.ExpiryGrace
	if st.gen == nil || grace == 0 {
		return
	}
	if _, in := st.gen.Member(id); !in {
		return
	}
	p := m.job.cfg.Prefix()
	resp, err := m.job.client.Txn(ctx).Then(
		clientv3.OpGet(p+record.EvictedDir+id, clientv3.WithCountOnly()),
		clientv3.OpGet(p+record.SuspectsDir+id+"/", clientv3.WithPrefix()),
	).Commit()
	actsNow := func(kv *mvccpb.KeyValue) bool { _, now := m.actsAtOnce(kv); return now }
	if err == nil && (resp.Responses[0].GetResponseRange().Count > 0 || slices.ContainsFunc(resp.Responses[1].GetResponseRange().Kvs, actsNow)) {
		return // evicted, left, found dead by a peer, or holding training up: act on the departure
	}
	// A key gone without a record, or we cannot tell (the hold ends with
	// the grace either way).
	st.hold(id, info, now.Add(grace))
	m.log.Info("a member's key timed out: holding its place while it registers again", "held", id, "for", grace)
}

// dropExited ends the hold of every held member whose gossip port refuses
// a connection (Config.Exited): its process is gone for certain, and its
// place would wait out the grace for nothing. A killed sidecar whose
// kernel took seconds to close its sockets drew silent votes, lost its
// lease and was held; its port refused soon after.
//
// The held members are looked at together: each look takes up to a
// connection's time-out, and an etcd outage holds every member.
func (m *Member) dropExited(ctx context.Context, st *leaderState) {
	if m.job.cfg.Exited == nil || len(st.held) == 0 {
		return
	}
	ids := slices.Collect(maps.Keys(st.held))
	exited := make([]bool, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { exited[i] = m.job.cfg.Exited(ctx, id) })
	}
	wg.Wait()
	for i, id := range ids {
		if exited[i] {
			delete(st.held, id)
			m.log.Info("a held member's port refuses: its place is not held any longer", "member", id)
		}
	}
}

// actsAtOnce decodes the vote kv and reports its target, and whether the
// vote ends a timed-out member's place at once: it found the member's
// process gone or its node unreachable, or its voter's trainer is held
// up. A vote that cannot be decoded counts, as it did before votes said
// more than that they stood.
func (m *Member) actsAtOnce(kv *mvccpb.KeyValue) (target string, now bool) {
	p := m.job.cfg.Prefix()
	target, _, v, err := record.DecodeVote(strings.TrimPrefix(string(kv.Key), p), kv.Value)
	if err != nil {
		m.job.reportBad(string(kv.Key), err)
		target, _, _ = strings.Cut(strings.TrimPrefix(string(kv.Key), p+record.SuspectsDir), "/")
		return target, true
	}
	return target, v.Gone || v.Unreachable || v.Waiting
}

func (st *leaderState) hold(id string, info record.MemberInfo, until time.Time) {
	if st.held == nil {
		st.held = map[string]held{}
	}
	st.held[id] = held{info: info, until: until}
}

// expireHolds drops the holds that ended by now and returns the earliest
// end of the others (zero: none).
func (st *leaderState) expireHolds(now time.Time) time.Time {
	var next time.Time
	for id, h := range st.held {
		if !now.Before(h.until) {
			delete(st.held, id)
			continue
		}
		if next.IsZero() || h.until.Before(next) {
			next = h.until
		}
	}
	return next
}
