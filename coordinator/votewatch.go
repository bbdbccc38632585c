package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// Checkers is how many members, the ones after a suspect in ring order
// (its voter skipped), check it when a vote against it appears: a second,
// independent observation follows the first within a probe timeout.
const Checkers = 3

// Which votes a process follows. A vote matters to its target, which
// refutes it, and to the target's Checkers, nobody else: every member
// watching every vote made each vote a wake-up of every sidecar of the
// job, and at 128 members on two busy cores the votes of one death (five
// or six of them) held up the eviction they were to bring about by a
// few hundred milliseconds. So a Job follows the votes against each of
// its members and against the Checkers+1 members before each in the
// ring (the voter is skipped among the checkers), one watch of
// suspects/<id>/ each, changed as generations change the ring; a Job
// without a member of its own (an observer) or with more than
// maxVoteWatches such targets (a benchmark of many members in one
// process) follows all of suspects/ in one watch instead.
const maxVoteWatches = 16

// voteWatches are the Job's running watches of votes.
type voteWatches struct {
	mu      sync.Mutex
	ctx     context.Context // the job's: cancelled under mu by Close
	rev     int64           // the keys' revision: a new watch starts after it; 0 until the first read
	running map[string]context.CancelFunc
}

// allVotes names the watch of every vote in voteWatches.running.
const allVotes = ""

// keysAt records that the job's keys have been read up to rev.
func (vw *voteWatches) keysAt(rev int64) {
	vw.mu.Lock()
	defer vw.mu.Unlock()
	vw.rev = rev
}

// refollowVotes starts and stops watches of votes to match voteTargets.
// A new watch starts after the revision the keys were last read at: a
// vote against a new predecessor cast since the generation that made it
// one is delivered.
func (j *Job) refollowVotes() {
	want := j.voteTargets()
	vw := &j.votes
	vw.mu.Lock()
	defer vw.mu.Unlock()
	if vw.rev == 0 || vw.ctx.Err() != nil {
		return // not read yet (readKeys calls again), or closed
	}
	for t, stop := range vw.running {
		if !slices.Contains(want, t) {
			stop()
			delete(vw.running, t)
		}
	}
	for _, t := range want {
		if _, ok := vw.running[t]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(vw.ctx)
		vw.running[t] = cancel
		from := vw.rev + 1
		j.wg.Go(func() { j.watchVotes(ctx, t, from) })
	}
}

// voteTargets returns the members whose votes this job follows, or
// allVotes alone (see maxVoteWatches).
func (j *Job) voteTargets() []string {
	j.keys.mu.Lock()
	locals := make([]string, 0, len(j.keys.locals))
	for id := range j.keys.locals {
		locals = append(locals, id)
	}
	j.keys.mu.Unlock()
	if len(locals) == 0 || len(locals) > maxVoteWatches {
		return []string{allVotes}
	}
	g := j.Generation()
	var want []string
	add := func(id string) {
		if !slices.Contains(want, id) {
			want = append(want, id)
		}
	}
	for _, id := range locals {
		add(id)
		if g == nil {
			continue
		}
		for _, p := range g.Predecessors(id, Checkers+1) {
			add(p)
		}
	}
	if len(want) > maxVoteWatches {
		return []string{allVotes}
	}
	return want
}

// watchVotes follows the votes against target (every vote for allVotes)
// from revision from until ctx ends, resuming after etcd outages where it
// left off, or from a fresh read of the standing votes when etcd
// compacted that revision away.
func (j *Job) watchVotes(ctx context.Context, target string, from int64) {
	key := j.cfg.Prefix() + record.SuspectsDir
	if target != allVotes {
		key += target + "/"
	}
	bo := newBackoff()
	for ctx.Err() == nil {
		err := j.followVotes(ctx, bo, key, &from)
		if ctx.Err() != nil {
			return
		}
		wait := bo.NextBackOff()
		j.reportError("watch votes", err)
		j.log.Warn("vote watch interrupted; retrying", "target", target, "err", err, "in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// followVotes delivers the votes under key from *from on, which it moves
// on; from 0 reads the standing votes first.
func (j *Job) followVotes(ctx context.Context, bo backoff.BackOff, key string, from *int64) error {
	if *from == 0 {
		resp, err := j.client.Get(ctx, key, clientv3.WithPrefix())
		if err != nil {
			return fmt.Errorf("read votes: %w", err)
		}
		for _, kv := range resp.Kvs {
			j.applyVote(ctx, kv)
		}
		*from = resp.Header.Revision + 1
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range j.client.Watch(wctx, key, clientv3.WithPrefix(), clientv3.WithRev(*from), clientv3.WithFilterDelete()) {
		if err := wr.Err(); err != nil {
			if wr.CompactRevision != 0 || errors.Is(err, rpctypes.ErrCompacted) {
				*from = 0
			}
			return fmt.Errorf("watch votes: %w", err)
		}
		*from = wr.Header.Revision + 1
		bo.Reset()
		for _, ev := range wr.Events {
			j.applyVote(ctx, ev.Kv)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("watch closed")
}
