package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ringside/ringside/coordinator/record"
)

// ErrNotLeader is returned by leader-only calls on a member that does not
// lead the job.
var ErrNotLeader = errors.New("coordinator: not leader")

// ErrDuplicateMember means another live registration holds the member id:
// two pods were given the same id. Join returns it, and a member that finds
// its id taken over stops with it (see Member.Err).
var ErrDuplicateMember = errors.New("coordinator: member id is registered by another live member")

// ErrAccessDenied is returned when etcd's authentication refuses the
// client's user (or its certificate's common name) access to the job's
// keys: a member of another job's identity, or a job not granted.
var ErrAccessDenied = errors.New("coordinator: etcd denies this client access to the job's keys")

func accessDenied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserNotFound) || errors.Is(err, rpctypes.ErrAuthFailed)
}

// attemptTimeout bounds one etcd call inside a retry loop, so a dead
// endpoint costs a retry, not a hang.
const attemptTimeout = 2 * time.Second

// Member is one worker's registration in a job: its key, its campaign for
// leadership and, while elected, the leader's duties.
type Member struct {
	job *Job
	id  string
	key string
	log *slog.Logger

	gens chan *record.Generation

	mu   sync.Mutex // guards info, sess and err
	info record.MemberInfo
	sess *concurrency.Session
	err  error // why the member stopped on its own

	leader atomic.Bool
	lease  atomic.Int64 // sess's lease, readable without mu (held through registration)

	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once
}

// Join registers info as a member of the job and starts campaigning. It
// blocks until the registration is stored, retrying with backoff while etcd
// is unreachable, until ctx ends. A registration under the same id that is
// still there (a restarted pod's predecessor) is waited for until its lease
// expires, up to its TTL; if it is still kept alive then, another live
// member holds the id and Join fails with ErrDuplicateMember.
func (j *Job) Join(ctx context.Context, info record.MemberInfo) (*Member, error) {
	if info.State == "" {
		info.State = record.StateActive
	}
	if info.State == record.StateActive && info.ActiveSince.IsZero() {
		info.ActiveSince = time.Now()
	}
	if err := info.Validate(); err != nil {
		return nil, fmt.Errorf("member: %w", err)
	}
	if info.Instance == "" {
		info.Instance = rand.Text()[:16]
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m := &Member{
		job:    j,
		id:     info.ID,
		key:    j.cfg.Prefix() + record.MembersDir + info.ID,
		log:    j.log.With("member", info.ID),
		info:   info,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	j.addLocal(m)
	sess, err := m.register(ctx, runCtx, 0)
	if err != nil {
		j.removeLocal(m)
		cancel()
		return nil, fmt.Errorf("join %s: %w", info.ID, err)
	}
	m.gens = j.subscribe()
	go m.run(runCtx, sess)
	return m, nil
}

// ID returns the member's id.
func (m *Member) ID() string { return m.id }

// Generations delivers committed generations, newest first: a slow reader
// skips generations it was too late for. It is closed when the member
// leaves or is closed, or when it stops on its own (Err says why).
func (m *Member) Generations() <-chan *record.Generation { return m.gens }

// Err returns why the member stopped on its own, once Generations is
// closed: ErrDuplicateMember when another registration took its id while
// its own had lapsed. It is nil while the member runs and after Leave or
// Close.
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// IsLeader reports whether the member currently leads the job.
func (m *Member) IsLeader() bool { return m.leader.Load() }

// Lease returns the member's current session lease.
func (m *Member) Lease() clientv3.LeaseID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sess.Lease()
}

// Restart records that the member's trainer failed and restarts: the leader
// commits a new generation with the same members at once, so every trainer
// re-forms its group (restart mode's equivalent of torchrun restarting all
// workers).
func (m *Member) Restart(ctx context.Context) error {
	return m.update(ctx, func(info *record.MemberInfo) { info.Incarnation++ })
}

// SetState publishes the member's state (draining excludes it from the next
// generation), retrying until ctx ends.
func (m *Member) SetState(ctx context.Context, s record.State) error {
	if err := m.update(ctx, func(info *record.MemberInfo) { info.State = s }); err != nil {
		return fmt.Errorf("set state %s: %w", s, err)
	}
	return nil
}

// Activate turns a pending member active, so the next generation places
// it. It changes no other state: a member already draining stays draining.
func (m *Member) Activate(ctx context.Context) error {
	err := m.update(ctx, func(info *record.MemberInfo) {
		if info.State == record.StatePending {
			info.State = record.StateActive
			info.ActiveSince = time.Now()
		}
	})
	if err != nil {
		return fmt.Errorf("activate: %w", err)
	}
	return nil
}

// SetRestartMode publishes that the member's trainer runs in restart mode,
// retrying until ctx ends: the leader batches joins for longer
// (Config.RestartSettle).
func (m *Member) SetRestartMode(ctx context.Context) error {
	if err := m.update(ctx, func(info *record.MemberInfo) { info.RestartMode = true }); err != nil {
		return fmt.Errorf("set restart mode: %w", err)
	}
	return nil
}

// update changes the member's record and stores it, retrying until ctx
// ends.
func (m *Member) update(ctx context.Context, change func(*record.MemberInfo)) error {
	return retry(ctx, m.job.cfg.OnError, func(ctx context.Context) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		info := m.info
		change(&info)
		if err := info.Validate(); err != nil {
			return backoff.Permanent(err)
		}
		if err := m.put(ctx, info, m.sess.Lease()); err != nil {
			return err
		}
		m.info = info
		return nil
	})
}

// Leave removes the member at once: it stops campaigning and revokes its
// lease, which deletes its keys.
func (m *Member) Leave(ctx context.Context) error {
	m.stop()
	lease := m.Lease()
	if g := m.job.Generation(); g != nil {
		if _, in := g.Member(m.id); in {
			// The record tells the leader this departure is meant
			// (expiry.go); the generation without us deletes it.
			if _, err := m.job.client.Put(ctx, m.job.cfg.Prefix()+record.EvictedDir+m.id, leaseHex(lease)); err != nil {
				return fmt.Errorf("leave %s: %w", m.id, err)
			}
		}
	}
	_, err := m.job.client.Revoke(ctx, lease)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("leave %s: revoke lease: %w", m.id, err)
	}
	m.log.Info("left the job")
	return nil
}

// Close stops the member without revoking its lease, as a crash would: the
// job sees it leave when the lease expires (or when gossip has it revoked).
func (m *Member) Close() {
	m.stop()
	m.mu.Lock()
	m.sess.Orphan()
	m.mu.Unlock()
}

func (m *Member) stop() {
	m.stopped.Do(func() {
		m.job.removeLocal(m)
		m.cancel()
		<-m.done
	})
}

// run keeps the member registered and campaigning until ctx ends or
// another registration takes the member's id. When the session is lost
// (etcd unreachable for longer than the TTL), it registers again as the
// same member: on the same lease if etcd still has it (a restarted etcd
// restores its leases), or with the key rewritten in place on a new one,
// so the job sees no change.
func (m *Member) run(ctx context.Context, sess *concurrency.Session) {
	defer func() {
		m.job.unsubscribe(m.gens)
		close(m.gens)
		close(m.done)
	}()
	for {
		lctx, lcancel := context.WithCancel(ctx)
		campaignDone := make(chan struct{})
		go func() {
			defer close(campaignDone)
			m.campaign(lctx, sess)
		}()
		select {
		case <-ctx.Done():
		case <-sess.Done():
		}
		lcancel()
		<-campaignDone
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("session lost; registering again", "lease", leaseHex(sess.Lease()))
		next, err := m.register(ctx, ctx, sess.Lease())
		if errors.Is(err, ErrDuplicateMember) {
			m.log.Error("member id taken over by another registration; stopping", "err", err)
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
			return
		}
		if err != nil {
			return // ctx ended
		}
		sess = next
	}
}

// register starts a session (its keep-alive bound to sessCtx) and stores
// the member key on it. old is the lease of a previous session of this
// process, or 0 on the first registration: if etcd still has it, the new
// session keeps it, and with it the member and election keys. A key held
// by another live lease is waited for (up to that lease's TTL: a crashed
// predecessor stops keeping it alive); if it outlives the wait, register
// fails with ErrDuplicateMember.
func (m *Member) register(ctx, sessCtx context.Context, old clientv3.LeaseID) (*concurrency.Session, error) {
	waited := clientv3.NoLease
	for {
		sess, h, err := m.tryRegister(ctx, sessCtx, old)
		if err != nil {
			return nil, err
		}
		if h.lease == clientv3.NoLease {
			m.log.Info("registered", "lease", leaseHex(sess.Lease()))
			return sess, nil
		}
		if h.lease == waited {
			return nil, fmt.Errorf("%w: %q is registered on lease %s, still kept alive after its TTL (%s): give every member its own id",
				ErrDuplicateMember, m.id, leaseHex(h.lease), h.ttl)
		}
		m.log.Warn("member id held by another registration; waiting for it to expire",
			"holder_lease", leaseHex(h.lease), "ttl", h.ttl)
		if err := m.awaitRelease(ctx, h); err != nil {
			return nil, err
		}
		waited = h.lease
	}
}

// holder is a live registration of this member's id on a lease that is not
// ours.
type holder struct {
	lease clientv3.LeaseID
	rev   int64 // revision at which the key was seen held
	ttl   time.Duration
}

// tryRegister retries until it has a session and either stored the member
// key on it or found the key held by another live lease (then the session
// is dropped again and holder says who).
func (m *Member) tryRegister(ctx, sessCtx context.Context, old clientv3.LeaseID) (*concurrency.Session, holder, error) {
	var sess *concurrency.Session
	var h holder
	err := retry(ctx, m.job.cfg.OnError, func(actx context.Context) error {
		s, err := m.session(actx, sessCtx, old)
		if err != nil {
			return err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		h, err = m.claim(actx, s.Lease(), old)
		if err == nil && h.lease != clientv3.NoLease {
			h.ttl, err = m.grantedTTL(actx, h.lease)
		}
		if err != nil || h.lease != clientv3.NoLease {
			m.dropSession(s, old)
			return err
		}
		m.sess = s
		m.lease.Store(int64(s.Lease()))
		sess = s
		return nil
	})
	return sess, h, err
}

// session resumes lease old if etcd still has it (a restarted etcd restores
// its leases and refreshes their TTL, so a lease whose keep-alive gave up
// on our side may be alive there), or starts one on a new lease.
func (m *Member) session(ctx, sessCtx context.Context, old clientv3.LeaseID) (*concurrency.Session, error) {
	client := m.job.client
	lease := old
	if old != clientv3.NoLease {
		_, err := client.KeepAliveOnce(ctx, old)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			lease = clientv3.NoLease
		case err != nil:
			return nil, fmt.Errorf("keep lease %s alive: %w", leaseHex(old), err)
		}
	}
	if lease == clientv3.NoLease {
		resp, err := client.Grant(ctx, int64(m.job.cfg.TTL/time.Second))
		if err != nil {
			return nil, fmt.Errorf("grant lease: %w", err)
		}
		lease = resp.ID
	}
	s, err := concurrency.NewSession(client, concurrency.WithLease(lease), concurrency.WithContext(sessCtx))
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	return s, nil
}

// dropSession gives up a session that did not register: a lease granted
// for it is revoked, our old lease is only no longer kept alive from it.
func (m *Member) dropSession(s *concurrency.Session, old clientv3.LeaseID) {
	s.Orphan()
	if s.Lease() == old {
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	m.job.client.Revoke(rctx, s.Lease()) //nolint:errcheck // best effort: nothing is stored on it, it expires anyway
}

// claim stores the member's record on lease in place: over an absent key
// (or one on no lease), one stored on lease itself or on old (our previous
// registration), never over a key another lease holds. Each write is one
// Txn compared on the lease the key was last seen on, so a registration
// made meanwhile is never overwritten; the key is never deleted first, so
// the job sees at most an update of the record. A key already holding this
// record on lease is left alone. A foreign holder is returned, not
// overwritten.
func (m *Member) claim(ctx context.Context, lease, old clientv3.LeaseID) (holder, error) {
	b, err := json.Marshal(m.info)
	if err != nil {
		return holder{}, fmt.Errorf("encode member: %w", err)
	}
	expect := clientv3.NoLease
	for range 3 {
		resp, err := m.job.client.Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(m.key), "=", expect)).
			Then(clientv3.OpPut(m.key, string(b), clientv3.WithLease(lease))).
			Else(clientv3.OpGet(m.key)).
			Commit()
		if err != nil {
			return holder{}, fmt.Errorf("store %s: %w", m.key, err)
		}
		if resp.Succeeded {
			return holder{}, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			expect = clientv3.NoLease
			continue
		}
		held := clientv3.LeaseID(kvs[0].Lease)
		switch {
		case held == lease && string(kvs[0].Value) == string(b):
			return holder{}, nil
		case held == clientv3.NoLease || held == lease || (old != clientv3.NoLease && held == old):
			expect = held
		default:
			return holder{lease: held, rev: resp.Header.Revision}, nil
		}
	}
	return holder{}, fmt.Errorf("store %s: the key kept changing", m.key)
}

// grantedTTL returns lease's TTL: a lease nobody keeps alive any more
// expires within it. (The remaining TTL etcd reports is rounded down to
// whole seconds, too short a wait.)
func (m *Member) grantedTTL(ctx context.Context, lease clientv3.LeaseID) (time.Duration, error) {
	resp, err := m.job.client.TimeToLive(ctx, lease)
	if err != nil {
		return 0, fmt.Errorf("read lease %s: %w", leaseHex(lease), err)
	}
	return time.Duration(max(resp.GrantedTTL, 0)) * time.Second, nil
}

// expirySlack is how long after a lease's TTL runs out etcd may take to
// delete its keys: the lessor looks for expired leases every 500 ms and
// the revoke goes through raft.
const expirySlack = time.Second

// awaitRelease waits until h's key is deleted, or until h's lease, if
// nobody keeps it alive, would have expired (its TTL and expirySlack from
// now): then the caller finds it still held by a live registration. It
// fails only when ctx ends.
func (m *Member) awaitRelease(ctx context.Context, h holder) error {
	wctx, cancel := context.WithTimeout(ctx, h.ttl+expirySlack)
	defer cancel()
	for {
		err := waitDelete(wctx, m.job.client, m.key, h.rev+1)
		if err == nil || wctx.Err() != nil {
			return ctx.Err()
		}
		// A broken watch (etcd unreachable, the revision compacted) is
		// no answer: watch again until the wait is over.
		m.log.Warn("watching the earlier registration", "err", err)
		select {
		case <-wctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func leaseHex(l clientv3.LeaseID) string { return fmt.Sprintf("%x", int64(l)) }

func (m *Member) put(ctx context.Context, info record.MemberInfo, lease clientv3.LeaseID) error {
	b, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("encode member: %w", err)
	}
	if _, err := m.job.client.Put(ctx, m.key, string(b), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("put %s: %w", m.key, err)
	}
	return nil
}

// retry runs op with a per-attempt timeout and exponential backoff until it
// succeeds or ctx ends, or etcd refuses the client access to the job's
// keys (ErrAccessDenied): no retry changes that.
func retry(ctx context.Context, onErr func(string, error), op func(context.Context) error) error {
	return backoff.Retry(func() error {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		err := op(actx)
		if err != nil && onErr != nil {
			onErr("retry", err)
		}
		if ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		if accessDenied(err) {
			return backoff.Permanent(fmt.Errorf("%w: %w", ErrAccessDenied, err))
		}
		return err
	}, backoff.WithContext(newBackoff(), ctx))
}
