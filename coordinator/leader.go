package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ringside/ringside/coordinator/record"
)

// errFenced means a commit's Txn failed its compares: this member is no
// longer the leader, or someone else wrote the generation.
var errFenced = errors.New("coordinator: commit fenced off")

// commitTimeout bounds a commit Txn. It is generous: a commit that times
// out on our side may still apply, and the next one is then fenced off and
// costs a re-read of every member.
const commitTimeout = 10 * time.Second

// campaign runs for the leadership on sess while the candidacy rule wants
// this member to (see candidacy) and, once elected, leads until ctx ends or
// the session is lost; then it campaigns again.
func (m *Member) campaign(ctx context.Context, sess *concurrency.Session) {
	bo := newBackoff()
	for ctx.Err() == nil {
		key, rev, withdrawn, err := m.stand(ctx, sess)
		if withdrawn {
			m.log.Info("withdrew from the election: enough candidates ahead")
			continue // nothing failed: no backoff
		}
		if err == nil {
			m.leader.Store(true)
			m.log.Info("elected leader")
			var committed bool
			committed, err = m.lead(ctx, sess, key, rev)
			m.leader.Store(false)
			if committed {
				// A term that committed was healthy: the next campaign
				// starts from the shortest wait, not one that grew over
				// every interruption since the member started.
				bo.Reset()
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := bo.NextBackOff()
		m.job.reportError("lead", err)
		m.log.Warn("leadership interrupted; campaigning again", "err", err, "in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// stand waits until this member should campaign, then campaigns until it
// is elected or the candidacy finds it no longer needed: then its campaign
// is cancelled, which deletes its election key, and withdrawn is true. The
// candidacy is followed only until the election is won: a leader does not
// withdraw.
func (m *Member) stand(ctx context.Context, sess *concurrency.Session) (key string, rev int64, withdrawn bool, err error) {
	cand := m.newCandidacy(sess)
	defer cand.close()
	// A member that kept its lease through an etcd outage may still hold
	// its election key: it campaigns already, and other candidates wait for
	// the keys before theirs to go. Waiting on the candidacy with the key in
	// place would hold them up for good; it runs again instead, and
	// withdraws the key if the candidacy finds it surplus.
	own, err := sess.Client().Get(ctx, fmt.Sprintf("%s%x", cand.prefix, sess.Lease()), clientv3.WithCountOnly())
	if err != nil {
		return "", 0, false, fmt.Errorf("read own election key: %w", err)
	}
	if own.Count == 0 {
		if err := cand.await(ctx); err != nil {
			return "", 0, false, err
		}
	}
	ectx, withdraw := context.WithCancel(ctx)
	defer withdraw()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	surplus := make(chan error, 1)
	go func() {
		err := cand.awaitSurplus(wctx)
		if err == nil {
			withdraw()
		}
		surplus <- err
	}()
	key, rev, err = elect(ectx, sess, cand.prefix, m.id)
	stopWatch()
	serr := <-surplus
	switch {
	case err == nil:
		return key, rev, false, nil
	case serr == nil && ctx.Err() == nil:
		return "", 0, true, nil
	}
	if serr != nil && wctx.Err() == nil {
		// Campaigning on without the candidacy only costs a candidate too
		// many; the next campaign follows a new one.
		m.log.Warn("lost track of the candidates while campaigning", "err", serr)
	}
	return "", 0, false, err
}

// leaderState is what the leader knows: the registered members and the
// last committed generation with its ModRevision (the commit fence).
//
// floor keeps numbers growing when the generation key is lost (deleted by
// hand, restored from a backup): every member ignores a generation not
// newer than the one it holds. Each generation is numbered at most the
// revision it is committed at (the first is 1; the next is prev+1 or
// floor+1, committed at a revision above both), so once the key is gone
// the revision we saw it missing at is above every number ever committed.
// The newest generation this process saw raises the floor too: after a
// restore the key may hold an older one.
type leaderState struct {
	members   map[string]record.MemberInfo
	memberRev int64
	gen       *record.Generation
	genRev    int64
	floor     int64
	held      map[string]held         // members whose key timed out (expiry.go)
	crashes   map[string]record.Crash // each member's newest trainer crash (crash.go)
	// seenActive: when this term first saw each active member (start.go).
	seenActive map[string]time.Time
	// statuses: each member's newest status; stragglers: the findings
	// (straggler.go).
	statuses   map[string]record.Status
	stragglers *stragglers
}

// plan plans the generation that should follow the leader's. A stopped
// or finishing job (crash.go) plans nothing while a member of its last
// generation is registered as the same process, and afresh once every one
// was replaced.
func (st *leaderState) plan(cfg Config) (*record.Generation, delta) {
	if st.gen != nil && (st.gen.Stop != nil || len(st.finished()) > 0) {
		if st.lastHolds() {
			return nil, delta{}
		}
		return cfg.plan(nil, max(st.floor, st.gen.Number), st.planning())
	}
	return cfg.plan(st.gen, st.floor, st.planning())
}

// lead follows members/ and commits generations while leaderKey (created
// at fence) is held. It returns when ctx ends, the session is lost, a watch
// fails, or a commit is fenced off; committed says whether this term
// committed anything.
func (m *Member) lead(ctx context.Context, sess *concurrency.Session, leaderKey string, fence int64) (committed bool, err error) {
	client, cfg := m.job.client, m.job.cfg
	membersPrefix := cfg.Prefix() + record.MembersDir
	genKey := m.job.genKey()

	resp, err := client.Get(ctx, membersPrefix, clientv3.WithPrefix())
	if err != nil {
		return false, fmt.Errorf("read members: %w", err)
	}
	rev := resp.Header.Revision
	st := &leaderState{members: make(map[string]record.MemberInfo, len(resp.Kvs)), memberRev: rev,
		seenActive: make(map[string]time.Time, len(resp.Kvs))}
	now := time.Now()
	for _, kv := range resp.Kvs {
		m.applyMember(st, string(kv.Key), kv.Value, kv.CreateRevision, now)
	}
	gresp, err := client.Get(ctx, genKey, clientv3.WithRev(rev))
	if err != nil {
		return false, fmt.Errorf("read generation: %w", err)
	}
	for _, kv := range gresp.Kvs {
		m.applyGeneration(st, kv.Value, kv.ModRevision)
	}
	known := m.job.Generation()
	if len(gresp.Kvs) == 0 {
		// Plan from the ring the members still train in (they keep their
		// generation when the key goes), numbered above anything the key
		// ever held; the commit then expects the key absent.
		st.gen, st.floor = known, rev
	}
	if known != nil {
		st.floor = max(st.floor, known.Number)
	}
	if err := m.holdMissing(ctx, st, rev, time.Now()); err != nil {
		return false, fmt.Errorf("read evictions: %w", err)
	}
	if err := m.readCrashes(ctx, st, rev); err != nil {
		return false, fmt.Errorf("read crashes: %w", err)
	}
	if err := m.readStragglers(ctx, st, rev); err != nil {
		return false, fmt.Errorf("read stragglers: %w", err)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	memberWatch := client.Watch(wctx, membersPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	genWatch := client.Watch(wctx, genKey, clientv3.WithRev(rev+1))
	crashWatch := client.Watch(wctx, cfg.Prefix()+record.CrashesDir, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	statusWatch := client.Watch(wctx, cfg.Prefix()+record.StatusDir, clientv3.WithPrefix(), clientv3.WithRev(rev+1))

	c := committer{m: m, st: st, fence: fence, leaderKey: leaderKey}
	defer c.stopTimer()
	defer c.armHolds(time.Time{})
	defer c.releaseCrash()
	c.armHolds(st.expireHolds(time.Now()))
	if err := c.evaluate(ctx, time.Now()); err != nil {
		return c.committed, err
	}
	if err := c.attribute(ctx, time.Now()); err != nil {
		return c.committed, err
	}
	for {
		select {
		case <-ctx.Done():
			return c.committed, ctx.Err()
		case <-sess.Done():
			return c.committed, errors.New("session lost")
		case wr, ok := <-memberWatch:
			if !ok || wr.Err() != nil {
				return c.committed, fmt.Errorf("members watch ended: %v", wr.Err())
			}
			joinsOnly := true
			now := time.Now()
			for _, ev := range wr.Events {
				id := strings.TrimPrefix(string(ev.Kv.Key), membersPrefix)
				info, known := st.members[id]
				if ev.Type == clientv3.EventTypeDelete {
					delete(st.members, id)
					delete(st.seenActive, id)
					if known {
						m.holdIfTimedOut(ctx, st, id, info, now)
					}
				} else {
					m.applyMember(st, string(ev.Kv.Key), ev.Kv.Value, ev.Kv.CreateRevision, now)
					delete(st.held, id)
				}
				joinsOnly = joinsOnly && ev.Type == clientv3.EventTypePut && !known
			}
			st.memberRev = wr.Header.Revision
			c.armHolds(st.expireHolds(time.Now()))
			if joinsOnly {
				// Pure joins only (re)arm the settle timer; planning on
				// every join would cost O(n) per event under a join storm.
				c.armSettle(time.Now())
				continue
			}
		case wr, ok := <-genWatch:
			if !ok || wr.Err() != nil {
				return c.committed, fmt.Errorf("generation watch ended: %v", wr.Err())
			}
			m.applyGenerationEvents(st, wr.Events)
		case wr, ok := <-crashWatch:
			if !ok || wr.Err() != nil {
				return c.committed, fmt.Errorf("crashes watch ended: %v", wr.Err())
			}
			m.applyCrashes(st, wr.Events)
		case wr, ok := <-statusWatch:
			if !ok || wr.Err() != nil {
				return c.committed, fmt.Errorf("status watch ended: %v", wr.Err())
			}
			m.applyStatuses(st, wr.Events)
			// Statuses change no plan: they only say who computes slowly.
			if err := c.checkStragglers(ctx, time.Now()); err != nil {
				return c.committed, err
			}
			continue
		case <-c.crashC:
			c.crashC = nil
		case <-c.holdC:
			c.holdC = nil
			m.dropExited(ctx, st)
			c.armHolds(st.expireHolds(time.Now()))
		case <-c.timerC:
			c.timerC = nil
			if err := c.settled(ctx, time.Now()); err != nil {
				return c.committed, err
			}
			continue
		}
		if ctx.Err() != nil {
			// The term is ending: what arrived meanwhile is the next
			// leader's to commit.
			return c.committed, ctx.Err()
		}
		if err := c.evaluate(ctx, time.Now()); err != nil {
			return c.committed, err
		}
		if err := c.attribute(ctx, time.Now()); err != nil {
			return c.committed, err
		}
	}
}

// applyMember records a members/ value seen at now, or drops the member
// if the value is malformed.
func (m *Member) applyMember(st *leaderState, key string, value []byte, createRev int64, now time.Time) {
	info, err := record.DecodeMember(key, value, createRev)
	if err != nil {
		m.job.reportBad(key, err)
		id := key[strings.LastIndexByte(key, '/')+1:]
		delete(st.members, id)
		delete(st.seenActive, id)
		return
	}
	st.members[info.ID] = info
	st.noteActive(info, now)
}

// applyGenerationEvents records what the generation watch delivered. An
// event at or below the revision already applied is one of our own
// commits (the leader may commit twice before the watch delivers the
// first); taking it for a foreign write would roll the leader back to an
// older generation and fence its next commit. A deleted key keeps the
// generation we know, so numbers go on growing (and above the revision of
// the delete, see leaderState); the next commit then expects the key to be
// absent.
func (m *Member) applyGenerationEvents(st *leaderState, events []*clientv3.Event) {
	for _, ev := range events {
		switch {
		case ev.Kv.ModRevision <= st.genRev:
		case ev.Type == clientv3.EventTypeDelete:
			st.genRev = 0
			st.floor = max(st.floor, ev.Kv.ModRevision)
		default:
			m.applyGeneration(st, ev.Kv.Value, ev.Kv.ModRevision)
		}
	}
}

// applyGeneration records a stored generation. A malformed one is reported
// and the newest good generation this process saw stands in for it, so
// numbers keep increasing; its ModRevision still fences the next commit.
func (m *Member) applyGeneration(st *leaderState, value []byte, modRev int64) {
	st.genRev = modRev
	g, err := record.DecodeGeneration(value)
	if err != nil {
		m.job.reportBad(m.job.genKey(), err)
		if known := m.job.Generation(); known != nil && (st.gen == nil || known.Number > st.gen.Number) {
			st.gen = known
		}
		return
	}
	st.gen = g
}

// committer plans and commits generations for one term of leadership.
type committer struct {
	m         *Member
	st        *leaderState
	fence     int64 // CreateRevision of our election key
	leaderKey string

	timer     *time.Timer
	timerC    <-chan time.Time
	firstJoin time.Time
	holdTimer *time.Timer // ends the earliest hold
	holdC     <-chan time.Time
	committed bool // this term committed a generation

	// settle and maxSettle: the window of the batch that firstJoin began.
	settle, maxSettle time.Duration

	// A crash held (crash.go: a peer's death being confirmed, or a crash
	// loop's stop awaiting the generation's other crashes) since
	// crashHeldAt, looked at again when crashTimer fires.
	crashHeldAt time.Time
	crashTimer  *time.Timer
	crashC      <-chan time.Time
}

// evaluate commits the planned generation at once if it removes anyone, or
// arms the settle timer if it only adds members.
func (c *committer) evaluate(ctx context.Context, now time.Time) error {
	cfg := c.m.job.cfg
	next, d := c.st.plan(cfg)
	if next == nil {
		c.stopTimer()
		return nil
	}
	if d.urgent() {
		return c.commit(ctx, next, d)
	}
	c.armSettle(now)
	return nil
}

// settled commits the joins the settle window batched, unless the job is
// starting and its start window still waits for members (start.go): then
// the timer is set for the window's end.
func (c *committer) settled(ctx context.Context, now time.Time) error {
	cfg := c.m.job.cfg
	next, d := c.st.plan(cfg)
	if next == nil {
		return nil
	}
	if c.st.gen == nil {
		if open, end := cfg.startOpen(c.st.members, c.st.seenActive, now); !open {
			if h := cfg.hooks; h != nil && h.startWaits != nil {
				h.startWaits(next, end)
			}
			if !end.IsZero() {
				// Joins meanwhile begin a new batch: the start is planned
				// once per settle window, not once per join.
				c.firstJoin = now
				c.armTimer(now, end)
			}
			return nil
		}
	}
	return c.commit(ctx, next, d)
}

// armSettle sets the settle timer to the settle window from now, but no
// later than MaxSettle after the first join it is batching. The window is
// RestartSettle while a member's trainer runs in restart mode, but for a
// start that waits for ExpectedSize: that wait batches the joins there,
// and once every member expected is in there is nothing left to batch.
func (c *committer) armSettle(now time.Time) {
	if c.timerC == nil {
		// A new batch. Its window is chosen once, not on every join: that
		// would cost O(n) per event under a join storm.
		cfg := c.m.job.cfg
		c.firstJoin = now
		c.settle, c.maxSettle = cfg.Settle, cfg.MaxSettle
		if (c.st.gen != nil || !cfg.waitsAtStart()) && c.st.restartMode() {
			c.settle, c.maxSettle = cfg.RestartSettle, max(cfg.MaxSettle, cfg.RestartSettle)
		}
	}
	deadline := now.Add(c.settle)
	if latest := c.firstJoin.Add(c.maxSettle); deadline.After(latest) {
		deadline = latest
	}
	c.armTimer(now, deadline)
}

// armTimer sets the commit timer to fire at deadline.
func (c *committer) armTimer(now, deadline time.Time) {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = time.NewTimer(deadline.Sub(now))
	c.timerC = c.timer.C
}

// restartMode reports whether an active member's trainer runs in restart
// mode, where each new generation restarts every process.
func (st *leaderState) restartMode() bool {
	for _, m := range st.members {
		if m.RestartMode && m.State == record.StateActive {
			return true
		}
	}
	return false
}

// heldLook is how often the leader looks whether a member whose place it
// holds has exited: a killed process whose kernel is slow to close its
// sockets is held in a second or two, and seen gone soon after.
const heldLook = 250 * time.Millisecond

// armHolds sets the hold timer to fire at until (zero: stops it), or
// sooner, every heldLook, to look whether a held member exited (see
// dropExited).
func (c *committer) armHolds(until time.Time) {
	if c.holdTimer != nil {
		c.holdTimer.Stop()
	}
	c.holdTimer, c.holdC = nil, nil
	if soon := time.Now().Add(heldLook); !until.IsZero() && c.m.job.cfg.Exited != nil && soon.Before(until) {
		until = soon
	}
	if !until.IsZero() {
		c.holdTimer = time.NewTimer(time.Until(until))
		c.holdC = c.holdTimer.C
	}
}

func (c *committer) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer, c.timerC = nil, nil
}

// commit writes next in one Txn fenced by our election key and the previous
// generation's ModRevision. The Txn is not cancelled with ctx: once sent,
// the fence alone decides.
func (c *committer) commit(ctx context.Context, next *record.Generation, d delta) error {
	c.stopTimer()
	m := c.m
	next.Leader = m.id
	next.MemberRevision = c.st.memberRev
	if next.Reason == "" {
		next.Reason = d.String()
	}
	next.Left = d.left
	if prev := c.st.gen; prev != nil && prev.Stop == nil {
		next.Restarts = max(next.Restarts, prev.Restarts) // restarts only grow, whatever changed
	}
	token, err := record.NewStoreToken()
	if err != nil {
		return fmt.Errorf("commit generation %d: %w", next.Number, err)
	}
	next.StoreToken = token
	if h := m.job.cfg.hooks; h != nil && h.beforeCommit != nil {
		h.beforeCommit(next)
	}
	b, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("encode generation: %w", err)
	}
	genKey := m.job.genKey()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	ops := []clientv3.Op{clientv3.OpPut(genKey, string(b))}
	for _, id := range d.left {
		// The departure is committed: its eviction record has done its work.
		ops = append(ops, clientv3.OpDelete(m.job.cfg.Prefix()+record.EvictedDir+id))
	}
	resp, err := m.job.client.Txn(tctx).If(
		clientv3.Compare(clientv3.CreateRevision(c.leaderKey), "=", c.fence),
		clientv3.Compare(clientv3.ModRevision(genKey), "=", c.st.genRev),
	).Then(ops...).Commit()
	committed := err == nil && resp.Succeeded
	if h := m.job.cfg.hooks; h != nil && h.afterCommit != nil {
		h.afterCommit(next, committed, err)
	}
	if err != nil {
		m.job.reportError("commit", err)
		return fmt.Errorf("commit generation %d: %w", next.Number, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("commit generation %d: %w", next.Number, errFenced)
	}
	c.st.gen, c.st.genRev, c.committed = next, resp.Header.Revision, true
	m.log.Info("committed generation", "generation", next.Number, "world_size", next.WorldSize,
		"members", len(next.Members), "paused", next.Paused, "reason", next.Reason, "restarts", next.Restarts)
	return nil
}
