package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// Eviction is confirmed, never taken on one observer's word. A member
// whose own check finds another unresponsive votes against the
// registration it saw (Suspect): a Vote under suspects/<target>/<voter>,
// on the voter's lease. The registration is evicted once votes of
// Quorum distinct live members name it and still stand Config.RefuteWindow
// later (Config.CorrelatedRefuteWindow while other members are silent
// too, the mark of a stall they share, unless every vote found the
// target's node unreachable, which no stall explains): a live target deletes every vote against its own registration as
// soon as it sees one (refute), so a member that still reaches etcd is
// never evicted by members that cannot reach it over gossip. The
// eviction revokes exactly the lease the voters saw, in a Txn that checks
// that the votes still stand and that the key still holds that lease: a
// late vote against a pod's previous incarnation cannot touch its
// replacement, and a refuted suspicion cannot evict.
//
// In a job of two members there is no second observer: a vote is never
// enough, and a dead member leaves when its lease expires (Config.TTL).

// Quorum is how many distinct members must vote against a registration
// to evict it.
const Quorum = 2

// Verdict is what a Suspect call did.
type Verdict int

const (
	// Voted: the vote is stored; it is not confirmed yet.
	Voted Verdict = iota
	// Evicted: this vote confirmed the suspicion and the registration it
	// named was evicted.
	Evicted
	// Gone: the suspect has no registration to vote against (it left,
	// or was evicted already).
	Gone
)

func (v Verdict) String() string {
	switch v {
	case Voted:
		return "voted"
	case Evicted:
		return "evicted"
	case Gone:
		return "gone"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Suspect records this member's vote that member id does not answer its
// checks, against id's current registration, and evicts that
// registration if the vote completes a quorum. Call it again (it
// overwrites the vote) while the suspicion lasts and etcd fails; Withdraw
// the vote when id answers again. Each etcd call is bounded on its own
// (the time a member answers in); a quorum's refute window is not, so
// ctx should bound the suspicion, not one call.
func (m *Member) Suspect(ctx context.Context, id string) (Verdict, error) {
	return m.suspect(ctx, id, record.Vote{})
}

// SuspectUnreachable is Suspect for a member whose node did not even
// complete a TCP handshake (a lost node, a partition): a quorum of such
// votes waits RefuteWindow alone, not the correlated window, which is
// there for a stall many members share, and a stalled process's kernel
// still completes handshakes.
func (m *Member) SuspectUnreachable(ctx context.Context, id string) (Verdict, error) {
	return m.suspect(ctx, id, record.Vote{Unreachable: true})
}

// SuspectGone is Suspect for a member whose process is gone for certain
// (its port refused a connection): a quorum that holds such a vote is
// evicted without the refute window, since nothing is left to refute. It
// still takes a second voter.
func (m *Member) SuspectGone(ctx context.Context, id string) (Verdict, error) {
	return m.suspect(ctx, id, record.Vote{Gone: true})
}

// suspect casts vote (its evidence; the lease is filled in here).
func (m *Member) suspect(ctx context.Context, id string, vote record.Vote) (Verdict, error) {
	if id == m.id {
		return Gone, errors.New("suspect: a member does not vote against itself")
	}
	client, prefix := m.job.client, m.job.cfg.Prefix()
	targetKey := prefix + record.MembersDir + id
	votesPrefix := prefix + record.SuspectsDir + id + "/"
	// The vote names the lease the job's watch last saw on id's
	// registration, checked in the vote's own Txn: no read of its own
	// comes first. One that changed since comes back, and the vote is
	// cast against it.
	lease := m.job.keys.leaseOf(id)
	vote.Waiting = m.job.cfg.Waiting == nil || m.job.cfg.Waiting()
	var tresp *clientv3.TxnResponse
	for {
		if lease == 0 { // not seen: read it
			rctx, cancel := context.WithTimeout(ctx, attemptTimeout)
			resp, err := client.Get(rctx, targetKey)
			cancel()
			if err != nil {
				return Voted, fmt.Errorf("suspect %s: read registration: %w", id, err)
			}
			if lease = leaseIn(resp.Kvs); lease == 0 {
				return Gone, nil
			}
		}
		vote.Lease = lease
		b, err := json.Marshal(vote)
		if err != nil {
			return Voted, fmt.Errorf("suspect %s: %w", id, err)
		}
		rctx, cancel := context.WithTimeout(ctx, attemptTimeout)
		tresp, err = client.Txn(rctx).If(clientv3.Compare(clientv3.LeaseValue(targetKey), "=", lease)).Then(
			clientv3.OpPut(prefix+record.VoteKey(id, m.id), string(b), clientv3.WithLease(m.Lease())),
			clientv3.OpGet(votesPrefix, clientv3.WithPrefix()),
			clientv3.OpGet(prefix+record.MembersDir, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		).Else(clientv3.OpGet(targetKey)).Commit()
		cancel()
		if err != nil {
			return Voted, fmt.Errorf("suspect %s: vote: %w", id, err)
		}
		if tresp.Succeeded {
			break
		}
		if lease = leaseIn(tresp.Responses[0].GetResponseRange().Kvs); lease == 0 {
			return Gone, nil // the registration that came back instead
		}
	}
	votes := tresp.Responses[1].GetResponseRange().Kvs
	if tresp.Responses[2].GetResponseRange().Count-1 < Quorum {
		return Voted, nil // nobody else could confirm: the lease decides
	}
	// The votes that name the registration we saw, one per voter.
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(targetKey), "=", lease)}
	var standing []voteRev
	gone, unreachable, waiting := vote.Gone, true, false
	for _, kv := range votes {
		_, voter, v, err := record.DecodeVote(strings.TrimPrefix(string(kv.Key), prefix), kv.Value)
		if err != nil {
			m.job.reportBad(string(kv.Key), err)
			continue
		}
		if v.Lease == lease && voter != id {
			// The vote must still stand, not have been refuted (deleted)
			// and cast again: its creation is compared, not its last
			// write, since a voter repeats its vote while the suspicion
			// lasts, and a repeat must not restart the refute window.
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision))
			standing = append(standing, voteRev{string(kv.Key), kv.CreateRevision})
			gone = gone || v.Gone
			unreachable = unreachable && (v.Unreachable || v.Gone)
			waiting = waiting || v.Waiting
		}
	}
	if len(cmps)-1 < Quorum {
		return Voted, nil
	}
	// The quorum stands: the suspect still gets RefuteWindow to delete the
	// votes (a live member does within its etcd round trip), so two
	// observers that voted at the same moment cannot outrun its answer;
	// unless a voter found its process gone; the correlated window only
	// if a voter's check did not find its node unreachable. The window
	// counts from when this process first saw the oldest vote of the
	// quorum, which the suspect's own watch delivered at about the same
	// time: the eviction compares every vote, so the suspect had the whole
	// window to refute that one, and a second voter's check (one probe
	// timeout) no longer adds to it.
	var waited time.Duration
	if !gone {
		since := m.job.keys.firstSeen(standing)
		var err error
		if waiting, gone, err = m.awaitRefutation(ctx, id, !unreachable, waiting, since); err != nil {
			return Voted, err
		}
		waited = time.Since(since)
	}
	ectx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	eresp, err := client.Txn(ectx).If(cmps...).Then(
		clientv3.OpDelete(votesPrefix, clientv3.WithPrefix()),
		clientv3.OpPut(prefix+record.EvictedDir+id, leaseHex(clientv3.LeaseID(lease))),
	).Commit()
	if err != nil {
		return Voted, fmt.Errorf("suspect %s: evict: %w", id, err)
	}
	if !eresp.Succeeded {
		return Voted, nil // refuted, or re-registered, since we read
	}
	// Confirmed: revoke the lease the votes named. It deletes the member
	// key (the leader commits the generation without it) and, if it
	// campaigned, its election key. A live member whose lease this was
	// loses its session and registers again.
	err = retry(context.WithoutCancel(ctx), m.job.cfg.OnError, func(actx context.Context) error {
		_, err := client.Revoke(actx, clientv3.LeaseID(lease))
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return Evicted, fmt.Errorf("suspect %s: revoke lease %x: %w", id, lease, err)
	}
	m.log.Info("evicted a member confirmed unresponsive", "evicted", id, "lease", leaseHex(clientv3.LeaseID(lease)), "votes", len(cmps)-1,
		"gone", gone, "unreachable", unreachable, "trainer_waiting", waiting, "waited", waited)
	return Evicted, nil
}

// leaseIn returns the lease of the registration a read of its key found,
// 0 for none.
func leaseIn(kvs []*mvccpb.KeyValue) int64 {
	if len(kvs) == 0 {
		return 0
	}
	return kvs[0].Lease
}

// awaitRefutation gives a suspect, id, the time to refute the votes
// against it, counted from since: RefuteWindow if unreachable; if silent,
// RefuteWait (of whether a voter's trainer waits), stretched to
// CorrelatedWait of the number of other members that silent votes stand
// against, read at the end of each wait until no more is due. A silent
// suspect found exited meanwhile (Config.Exited) is waited for no longer.
// It returns whether a trainer was held up in the end, and whether the
// suspect exited.
func (m *Member) awaitRefutation(ctx context.Context, id string, silent, waiting bool, since time.Time) (bool, bool, error) {
	cfg := m.job.cfg
	if cfg.hooks != nil && cfg.hooks.refuteWait != nil {
		cfg.hooks.refuteWait(id, since)
	}
	window := cfg.RefuteWindow
	if silent {
		window = cfg.RefuteWait(waiting) // a stall explains silence, never an unreachable node
	}
	// A silence is looked at again every RefuteWindow: a frozen member
	// holds up every trainer of the ring at its next collective, this
	// member's among them, and from then on the job pays for every moment
	// waited; and a member that looked frozen may turn out to have exited.
	poll := max(cfg.RefuteWindow, 10*time.Millisecond)
	// waitUntil waits until end after since, or until the suspect exited;
	// the first wait (first) ends sooner once a trainer is held up.
	waitUntil := func(end time.Duration, first bool) (bool, error) {
		for {
			watchHeld := first && !waiting && cfg.Waiting != nil
			left := end - time.Since(since)
			if !silent || left <= 0 || (cfg.Exited == nil && !watchHeld) {
				return false, sleep(ctx, left)
			}
			if err := sleep(ctx, min(poll, left)); err != nil {
				return false, err
			}
			if cfg.Exited != nil && cfg.Exited(ctx, id) {
				return true, nil
			}
			if watchHeld && cfg.Waiting() {
				waiting, window = true, cfg.RefuteWait(true)
				end = window
			}
		}
	}
	if exited, err := waitUntil(window, true); exited || err != nil {
		return waiting, exited, err
	}
	waited := max(window, time.Since(since))
	for silent {
		others, err := m.othersSilent(ctx, id)
		if err != nil {
			return waiting, false, fmt.Errorf("suspect %s: read other votes: %w", id, err)
		}
		more := cfg.CorrelatedWait(len(others)) - waited
		if more <= 0 {
			return waiting, false, nil
		}
		m.log.Info("others are silent too: waiting longer for refutations", "suspect", id, "others", others, "wait", more)
		if exited, err := waitUntil(waited+more, false); exited || err != nil {
			return waiting, exited, err
		}
		waited += more
	}
	return waiting, false, nil
}

// RefuteWait is how long a quorum of silent votes stands before it evicts
// when no other member is silent (a quorum that found the node unreachable
// waits RefuteWindow alone: no stall keeps a kernel from answering a TCP
// handshake):
//
//	RefuteWait = RefuteWindow + 2 * LocalLag()       if a voter's trainer waits
//	RefuteWait = IdleRefuteWindow + 2 * LocalLag()   if none does
//
// LocalLag is 0 on a host whose cores keep up, so the window is
// RefuteWindow alone; on one where processes wait hundreds of milliseconds
// for a core, a live member that was among them gets the time to answer.
// A silence that holds up no trainer costs nothing yet, so it is given
// the idle window (see IdleRefuteWindow).
func (c Config) RefuteWait(waiting bool) time.Duration {
	w := max(c.IdleRefuteWindow, c.RefuteWindow)
	if waiting {
		w = c.RefuteWindow
	}
	if c.LocalLag == nil {
		return w
	}
	return w + 2*max(c.LocalLag(), 0)
}

// CorrelatedWait is how long, in all, the votes against a silent member
// stand before they evict it while silent votes stand against others
// other members too (0 when others is 0: RefuteWindow alone):
//
//	CorrelatedWait = min(TTL, CorrelatedRefuteWindow * (1 + others/CorrelatedStep))
//
// (others/CorrelatedStep in whole numbers). The more members fall silent
// together, the more surely it is one stall they share, and the longer
// that stall lasts: with 128 sidecars starting on two busy cores, live
// members that dozens of others suspected took more than a second to
// refute. No wait exceeds the lease TTL: by then a member that is silent
// for real has lost its lease, and the leader commits without it anyway.
func (c Config) CorrelatedWait(others int) time.Duration {
	if others <= 0 {
		return 0
	}
	return min(c.TTL, c.CorrelatedRefuteWindow*time.Duration(1+others/CorrelatedStep))
}

// CorrelatedStep is how many more members silent together add one
// CorrelatedRefuteWindow to the wait (see Config.CorrelatedWait).
const CorrelatedStep = 4

// othersSilent returns the members other than id that silent votes stand
// against: against their registrations as the job's watch last saw them.
// A vote against a member that left, or was evicted, since is stale, and
// no sign of a stall now (a voter whose vote landed after the eviction
// keeps it until it withdraws).
func (m *Member) othersSilent(ctx context.Context, id string) ([]string, error) {
	prefix := m.job.cfg.Prefix()
	rctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	resp, err := m.job.client.Get(rctx, prefix+record.SuspectsDir, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var others []string
	for _, kv := range resp.Kvs {
		target, _, v, err := record.DecodeVote(strings.TrimPrefix(string(kv.Key), prefix), kv.Value)
		if err != nil {
			m.job.reportBad(string(kv.Key), err)
			continue
		}
		if target != id && !v.Gone && v.Lease == m.job.keys.leaseOf(target) && !slices.Contains(others, target) {
			others = append(others, target)
		}
	}
	return others, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Withdraw deletes this member's vote against id, if any.
func (m *Member) Withdraw(ctx context.Context, id string) error {
	if _, err := m.job.client.Delete(ctx, m.job.cfg.Prefix()+record.VoteKey(id, m.id)); err != nil {
		return fmt.Errorf("withdraw vote against %s: %w", id, err)
	}
	return nil
}
