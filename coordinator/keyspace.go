package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// A Job follows the keys its members react to in one watch, whatever
// number of members joined through it: one range (election/, evicted/,
// generation and members/ sort together) for the generation, the
// campaigns and the registrations. The votes its members need are followed
// apart (votewatch.go). Its members share what the watches teach: the
// candidacies read the campaigns and registrations kept here
// (candidacy.go), the votes against a member of this process are refuted
// here, and WatchVotes fans the votes out. Per-member watches cost a
// process of many members (a benchmark, a test) O(members) setup after
// every join storm, and etcd as many watchers.
type keyspace struct {
	mu       sync.Mutex
	synced   chan struct{}         // closed once the first read is in
	campaign map[string]campaigner // by election key
	// registered holds the lease of each member key, by id: a vote names
	// it without reading it first.
	registered map[string]int64
	changed    map[chan struct{}]struct{}
	voteSubs   map[*voteQueue]struct{}
	locals     map[string]*Member // this process's members, by id
	// voteSeen is when this process first saw each vote (by key and
	// creation revision): the refute window counts from there (see
	// Member.Suspect).
	voteSeen map[voteRev]time.Time
}

// voteRev names one casting of a vote: a repeat keeps its creation
// revision, a vote refuted and cast again gets a new one.
type voteRev struct {
	key string
	rev int64
}

func newKeyspace() keyspace {
	return keyspace{
		synced:     make(chan struct{}),
		campaign:   make(map[string]campaigner),
		registered: make(map[string]int64),
		changed:    make(map[chan struct{}]struct{}),
		voteSubs:   make(map[*voteQueue]struct{}),
		locals:     make(map[string]*Member),
		voteSeen:   make(map[voteRev]time.Time),
	}
}

// watchKeys follows the job's keys until ctx ends, resuming after etcd
// outages where it left off, or from a fresh read when etcd compacted
// that revision away.
func (j *Job) watchKeys(ctx context.Context) {
	bo := newBackoff()
	var rev int64 // where the watch resumes; 0: read everything first
	for ctx.Err() == nil {
		err := j.followKeys(ctx, bo, &rev)
		if ctx.Err() != nil {
			return
		}
		wait := bo.NextBackOff()
		j.reportError("watch job", err)
		j.log.Warn("job watch interrupted; retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (j *Job) followKeys(ctx context.Context, bo backoff.BackOff, rev *int64) error {
	p := j.cfg.Prefix()
	if *rev == 0 {
		r, err := j.readKeys(ctx)
		if err != nil {
			return err
		}
		*rev = r + 1
	}
	bo.Reset()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	keys := j.client.Watch(wctx, p+record.ElectionDir,
		clientv3.WithRange(clientv3.GetPrefixRangeEnd(p+record.MembersDir)), clientv3.WithRev(*rev))
	for wr := range keys {
		if err := wr.Err(); err != nil {
			if wr.CompactRevision != 0 || errors.Is(err, rpctypes.ErrCompacted) {
				*rev = 0 // read everything again
			}
			return fmt.Errorf("watch job keys: %w", err)
		}
		*rev = wr.Header.Revision + 1
		j.applyKeys(wr.Events)
		j.votes.keysAt(wr.Header.Revision)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("watch closed")
}

// readKeys reads, at one revision, what the watches follow, and replaces
// what the job knew of it. It returns the revision.
func (j *Job) readKeys(ctx context.Context) (int64, error) {
	p := j.cfg.Prefix()
	resp, err := j.client.Txn(ctx).Then(
		clientv3.OpGet(j.genKey()),
		clientv3.OpGet(p+record.ElectionDir, clientv3.WithPrefix()),
		clientv3.OpGet(p+record.MembersDir, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(p+record.SuspectsDir, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("read job keys: %w", err)
	}
	// No generation key, or one older than what we hold (a restore),
	// changes nothing: publish only takes newer numbers.
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		j.accept(kv.Value)
	}
	ks := &j.keys
	ks.mu.Lock()
	clear(ks.campaign)
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		ks.campaign[string(kv.Key)] = campaigner{id: string(kv.Value), rev: kv.CreateRevision}
	}
	clear(ks.registered)
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		ks.registered[strings.TrimPrefix(string(kv.Key), p+record.MembersDir)] = kv.Lease
	}
	select {
	case <-ks.synced:
	default:
		close(ks.synced)
	}
	ks.notifyLocked()
	ks.mu.Unlock()
	// Votes cast before the read are refuted, not delivered: the
	// watchers of votes follow them from now on.
	for _, kv := range resp.Responses[3].GetResponseRange().Kvs {
		if target, _, v, ok := j.decodeVote(kv); ok {
			j.refuteIfLocal(ctx, target, v.Lease, kv)
		}
	}
	j.votes.keysAt(resp.Header.Revision)
	j.refollowVotes()
	return resp.Header.Revision, nil
}

// applyKeys applies events of the generation, election and members keys.
func (j *Job) applyKeys(events []*clientv3.Event) {
	p := j.cfg.Prefix()
	ks := &j.keys
	for _, ev := range events {
		key := string(ev.Kv.Key)
		put := ev.Type == clientv3.EventTypePut
		switch {
		case key == j.genKey():
			// A deleted key (by hand, or lost in a restore) keeps the
			// generation we hold: the members train in it until the
			// leader commits the next one, numbered above it.
			if put {
				j.accept(ev.Kv.Value)
			}
		case strings.HasPrefix(key, p+record.ElectionDir):
			ks.mu.Lock()
			if put {
				ks.campaign[key] = campaigner{id: string(ev.Kv.Value), rev: ev.Kv.CreateRevision}
			} else {
				delete(ks.campaign, key)
			}
			ks.notifyLocked()
			ks.mu.Unlock()
		case strings.HasPrefix(key, p+record.MembersDir):
			id := strings.TrimPrefix(key, p+record.MembersDir)
			// A registration matters to the candidacies only when it
			// comes or goes, and a new one only for a member the latest
			// generation names: a join storm wakes nobody.
			named := false
			if put {
				_, named = j.candidatesOf(j.Generation()).rank[id]
			}
			ks.mu.Lock()
			if _, had := ks.registered[id]; put {
				ks.registered[id] = ev.Kv.Lease
				if !had && named {
					ks.notifyLocked()
				}
			} else {
				delete(ks.registered, id)
				ks.notifyLocked()
			}
			ks.mu.Unlock()
		}
	}
}

// notifyLocked tells every candidacy that the campaigns or registrations
// changed.
func (ks *keyspace) notifyLocked() {
	for ch := range ks.changed {
		select {
		case ch <- struct{}{}:
		default: // already told
		}
	}
}

// watchChanges returns a channel told (coalesced) whenever the campaigns
// or registrations change.
func (j *Job) watchChanges() chan struct{} {
	ch := make(chan struct{}, 1)
	j.keys.mu.Lock()
	defer j.keys.mu.Unlock()
	j.keys.changed[ch] = struct{}{}
	return ch
}

func (j *Job) unwatchChanges(ch chan struct{}) {
	j.keys.mu.Lock()
	defer j.keys.mu.Unlock()
	delete(j.keys.changed, ch)
}

// addLocal makes the job refute votes against m's registration while m
// runs (a member of the same id already running keeps that role: m will
// find its id taken); removeLocal stops it, as a crash would.
func (j *Job) addLocal(m *Member) {
	j.keys.mu.Lock()
	if _, dup := j.keys.locals[m.id]; !dup {
		j.keys.locals[m.id] = m
	}
	j.keys.mu.Unlock()
	j.refollowVotes()
}

func (j *Job) removeLocal(m *Member) {
	j.keys.mu.Lock()
	if j.keys.locals[m.id] == m {
		delete(j.keys.locals, m.id)
	}
	j.keys.mu.Unlock()
	j.refollowVotes()
}

// leaseOf returns the lease of id's member key as the watch last saw it,
// 0 if it saw none.
func (ks *keyspace) leaseOf(id string) int64 {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.registered[id]
}

func (j *Job) decodeVote(kv *mvccpb.KeyValue) (target, voter string, v record.Vote, ok bool) {
	key := string(kv.Key)
	target, voter, v, err := record.DecodeVote(strings.TrimPrefix(key, j.cfg.Prefix()), kv.Value)
	if err != nil {
		j.reportBad(key, err)
		return "", "", v, false
	}
	return target, voter, v, true
}

// applyVote refutes kv, a vote, if it stands against this process's
// member, and delivers it to WatchVotes.
func (j *Job) applyVote(ctx context.Context, kv *mvccpb.KeyValue) {
	target, voter, v, ok := j.decodeVote(kv)
	if !ok {
		return
	}
	j.refuteIfLocal(ctx, target, v.Lease, kv)
	j.keys.mu.Lock()
	defer j.keys.mu.Unlock()
	j.keys.sawVote(kv, j.cfg.TTL)
	for q := range j.keys.voteSubs {
		q.push(VoteEvent{Target: target, Voter: voter, Lease: v.Lease})
	}
}

// sawVote records when kv, a vote, was first seen, and forgets the
// sightings older than ttl: the deletes of votes are not watched, and a
// vote without a sighting counts as seen now, which only waits longer.
// ks.mu is held.
func (ks *keyspace) sawVote(kv *mvccpb.KeyValue, ttl time.Duration) {
	k := voteRev{string(kv.Key), kv.CreateRevision}
	if _, ok := ks.voteSeen[k]; ok {
		return // a repeat: the vote keeps its first sighting
	}
	now := time.Now()
	for old, at := range ks.voteSeen {
		if now.Sub(at) > ttl {
			delete(ks.voteSeen, old)
		}
	}
	ks.voteSeen[k] = now
}

// firstSeen returns when this process first saw the earliest of the
// votes named, or now for a vote it has not seen yet.
func (ks *keyspace) firstSeen(votes []voteRev) time.Time {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	first := time.Now()
	for _, k := range votes {
		if at, ok := ks.voteSeen[k]; ok && at.Before(first) {
			first = at
		}
	}
	return first
}

// refuteIfLocal deletes a vote against the current registration of a
// member running in this process: a member that reaches etcd is alive,
// whatever a peer that cannot reach it over gossip believes. A vote
// against an earlier registration is harmless and left alone. The delete
// runs on its own, so a slow refute holds up no other key.
func (j *Job) refuteIfLocal(ctx context.Context, target string, lease int64, kv *mvccpb.KeyValue) {
	j.keys.mu.Lock()
	m := j.keys.locals[target]
	j.keys.mu.Unlock()
	if m == nil || m.lease.Load() != lease {
		return
	}
	key, modRev := string(kv.Key), kv.ModRevision
	j.wg.Go(func() {
		if h := j.cfg.hooks; h != nil && h.beforeRefute != nil {
			h.beforeRefute()
		}
		rctx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		// Only the vote we saw: a newer one is refuted when its event comes.
		_, err := j.client.Txn(rctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			j.reportError("refute", err)
			return
		}
		m.log.Info("refuted a suspicion: this member is alive", "vote", strings.TrimPrefix(key, j.cfg.Prefix()))
	})
}

// VoteEvent is a vote cast by a member of the job.
type VoteEvent struct {
	Target, Voter string
	Lease         int64
}

// WatchVotes delivers the votes members cast (see Suspect) from now until
// ctx ends; members that check a suspect on another's word use it. Only
// the votes the job follows come (see voteTargets): those against its
// members and the members they check, or every vote in a job without a
// member here. The
// channel is closed when ctx ends, after its goroutine is done: the caller
// owns it by reading until then.
func (j *Job) WatchVotes(ctx context.Context) <-chan VoteEvent {
	q := &voteQueue{wake: make(chan struct{}, 1)}
	j.keys.mu.Lock()
	j.keys.voteSubs[q] = struct{}{}
	j.keys.mu.Unlock()
	out := make(chan VoteEvent)
	go func() {
		defer close(out)
		defer func() {
			j.keys.mu.Lock()
			delete(j.keys.voteSubs, q)
			j.keys.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-q.wake:
			}
			for _, v := range q.take() {
				select {
				case out <- v:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// voteQueue holds the votes not yet read by one WatchVotes caller: the
// watch never waits for a slow reader.
type voteQueue struct {
	mu   sync.Mutex
	q    []VoteEvent
	wake chan struct{}
}

func (q *voteQueue) push(v VoteEvent) {
	q.mu.Lock()
	q.q = append(q.q, v)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *voteQueue) take() []VoteEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.q
	q.q = nil
	return out
}
