package coordinator

import (
	"context"
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

	mu   sync.Mutex // guards info and sess
	info record.MemberInfo
	sess *concurrency.Session

	leader atomic.Bool

	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once
}

// Join registers info as a member of the job and starts campaigning. It
// blocks until the registration is stored, retrying with backoff while etcd
// is unreachable, until ctx ends. A live registration under the same id (a
// restarted pod) is replaced: its lease is revoked first, so the job sees
// the old incarnation leave.
func (j *Job) Join(ctx context.Context, info record.MemberInfo) (*Member, error) {
	if info.State == "" {
		info.State = record.StateActive
	}
	if err := info.Validate(); err != nil {
		return nil, fmt.Errorf("member: %w", err)
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
	sess, err := m.register(ctx, runCtx, 0)
	if err != nil {
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
// leaves or is closed.
func (m *Member) Generations() <-chan *record.Generation { return m.gens }

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
		}
	})
	if err != nil {
		return fmt.Errorf("activate: %w", err)
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
		m.cancel()
		<-m.done
		m.job.unsubscribe(m.gens)
		close(m.gens)
	})
}

// run keeps the member registered and campaigning until ctx ends. When the
// session is lost (etcd unreachable for longer than the TTL), it registers
// again under the same key: if the key survived, the job sees no change.
func (m *Member) run(ctx context.Context, sess *concurrency.Session) {
	defer close(m.done)
	for {
		lctx, lcancel := context.WithCancel(ctx)
		campaignDone := make(chan struct{})
		go func() {
			defer close(campaignDone)
			m.campaign(lctx, sess)
		}()
		refuteDone := make(chan struct{})
		go func() {
			defer close(refuteDone)
			m.refuteWhileAlive(lctx, sess)
		}()
		select {
		case <-ctx.Done():
		case <-sess.Done():
		}
		lcancel()
		<-campaignDone
		<-refuteDone
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("session lost; registering again")
		next, err := m.register(ctx, ctx, sess.Lease())
		if err != nil {
			return // ctx ended
		}
		sess = next
	}
}

// register grants a lease, starts its keep-alive (bound to sessCtx) and
// stores the member key on it. old is the lease of a previous session of
// this process, or 0 on the first registration.
func (m *Member) register(ctx, sessCtx context.Context, old clientv3.LeaseID) (*concurrency.Session, error) {
	client := m.job.client
	ttl := int64(m.job.cfg.TTL / time.Second)
	var sess *concurrency.Session
	err := retry(ctx, m.job.cfg.OnError, func(actx context.Context) error {
		lease, err := client.Grant(actx, ttl)
		if err != nil {
			return fmt.Errorf("grant lease: %w", err)
		}
		s, err := concurrency.NewSession(client, concurrency.WithLease(lease.ID), concurrency.WithContext(sessCtx))
		if err != nil {
			return fmt.Errorf("session: %w", err)
		}
		if old == 0 {
			if err := m.takeOver(actx, lease.ID); err != nil {
				s.Orphan()
				return err
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.put(actx, m.info, lease.ID); err != nil {
			s.Orphan()
			return err
		}
		m.sess = s
		sess = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	if old != 0 {
		// The old lease may still be alive on the server; it holds our
		// former election key.
		rctx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		client.Revoke(rctx, old) //nolint:errcheck // best effort: it expires anyway
	}
	m.log.Info("registered", "lease", fmt.Sprintf("%x", int64(sess.Lease())))
	return sess, nil
}

// takeOver revokes a registration of the same id left by an earlier
// incarnation on another lease.
func (m *Member) takeOver(ctx context.Context, mine clientv3.LeaseID) error {
	resp, err := m.job.client.Get(ctx, m.key)
	if err != nil {
		return fmt.Errorf("read %s: %w", m.key, err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 || clientv3.LeaseID(resp.Kvs[0].Lease) == mine {
		return nil
	}
	m.log.Info("replacing an earlier registration of this id")
	_, err = m.job.client.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoke earlier registration: %w", err)
	}
	return nil
}

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
// succeeds or ctx ends.
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
		return err
	}, backoff.WithContext(newBackoff(), ctx))
}
