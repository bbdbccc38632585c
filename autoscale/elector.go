package autoscale

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// elector elects one leader among the controller's replicas with a
// coordination.k8s.io Lease, as client-go's leaderelection package does
// with its LeaseLock, and with the same record: holderIdentity,
// leaseDurationSeconds, acquireTime, renewTime and leaseTransitions, each
// write fenced by the resourceVersion it read.
//
// It is not client-go's package because that one cannot be linked alone:
// its resourcelock imports the typed clients of every lock kind and with
// them k8s.io/client-go/kubernetes/scheme, every built-in API group, tens
// of MB of a binary that uses one Lease.
//
// The rules, client-go's except the last:
//   - a standby takes the lease when it is free (no holder) or when its
//     record has not changed for the holder's leaseDurationSeconds, as
//     measured on the standby's own clock from when it first saw that
//     record (no comparison of two machines' clocks);
//   - the leader renews every RetryPeriod and stops leading when it could
//     not renew for RenewDeadline (less than the lease duration, so it
//     stops before a standby may take over);
//   - on a clean stop the leader releases the lease (no holder), so a
//     standby takes it at its next try instead of after the duration;
//   - a renewal that finds another holder, or whose write conflicts,
//     stops leading at once: someone else has the lease.
type elector struct {
	leases    LeaseClient
	cfg       LeaderElection
	clock     clock.Clock
	log       *slog.Logger
	onLeading func(bool)

	// observed is the lease as last read or written and observedAt when
	// this replica first saw its record so: only the goroutine of run
	// touches them.
	observed   *coordinationv1.Lease
	observedAt time.Time
	// renewed is the time of the last successful acquire or renewal, in
	// Unix nanoseconds, while this replica leads; 0 while it does not.
	renewed atomic.Int64
}

// errHeld is tryAcquireOrRenew's error when another replica holds a lease
// that has not expired.
var errHeld = errors.New("autoscale: the lease is held by another replica")

// watchdogTolerance is how long past its lease's expiry a leader that has
// not renewed may still report healthy (client-go's healthz adaptor's
// usual 20 s): a leader stuck that long should be restarted.
const watchdogTolerance = 20 * time.Second

// newElector returns an elector for the lease cfg names, through leases
// (a client of cfg.Namespace). onLeading is told when this replica starts
// and stops leading. cfg.Identity must be set.
func newElector(leases LeaseClient, cfg LeaderElection, clk clock.Clock, log *slog.Logger, onLeading func(bool)) *elector {
	return &elector{leases: leases, cfg: cfg, clock: clk, log: log.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity), onLeading: onLeading}
}

// run campaigns for the lease and runs fn while this replica holds it. It
// returns nil when ctx ends, or when fn returns by itself, after
// releasing the lease; ErrLostLease when the lease was lost while ctx was
// live. It returns only after fn returned.
func (e *elector) run(ctx context.Context, fn func(ctx context.Context)) error {
	if !e.acquire(ctx) {
		return nil // ctx ended while standing by
	}
	e.onLeading(true)
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	finished := make(chan struct{})
	wg.Go(func() {
		defer close(finished)
		fn(lctx)
	})
	lost := e.renew(ctx, finished)
	cancel()
	wg.Wait()
	e.renewed.Store(0)
	e.onLeading(false)
	if lost {
		return ErrLostLease
	}
	e.release(ctx)
	return nil
}

// acquire tries to take the lease every RetryPeriod (with up to 20 %
// jitter, so standbys do not try in step) until it holds it (true) or ctx
// ends (false).
func (e *elector) acquire(ctx context.Context) bool {
	e.log.Info("waiting for the leader lease")
	for {
		err := e.tryAcquireOrRenew(ctx)
		if err == nil {
			e.log.Info("acquired the leader lease")
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !errors.Is(err, errHeld) && !apierrors.IsConflict(err) {
			e.log.Warn("cannot acquire the leader lease", "err", err)
		}
		jitter := time.Duration(rand.Int64N(int64(e.cfg.RetryPeriod)/5 + 1))
		select {
		case <-ctx.Done():
			return false
		case <-e.clock.After(e.cfg.RetryPeriod + jitter):
		}
	}
}

// renew renews the lease every RetryPeriod until ctx ends or finished is
// closed (false), or the lease is lost (true): another holder or a
// conflicting write seen, or no renewal for RenewDeadline.
func (e *elector) renew(ctx context.Context, finished <-chan struct{}) (lost bool) {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-finished:
			return false
		case <-e.clock.After(e.cfg.RetryPeriod):
		}
		deadline := time.Unix(0, e.renewed.Load()).Add(e.cfg.RenewDeadline)
		rctx, cancel := context.WithTimeout(ctx, deadline.Sub(e.clock.Now()))
		err := e.tryAcquireOrRenew(rctx)
		cancel()
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil:
			return false
		case errors.Is(err, errHeld) || apierrors.IsConflict(err):
			e.log.Error("lost the leader lease to another replica", "err", err)
			return true
		case !e.clock.Now().Before(deadline):
			e.log.Error("could not renew the leader lease within the renew deadline", "renew_deadline", e.cfg.RenewDeadline, "err", err)
			return true
		default:
			e.log.Warn("cannot renew the leader lease; retrying", "err", err)
		}
	}
}

// tryAcquireOrRenew reads the lease and, if it is free, expired or this
// replica's, writes this replica's record into it with the
// resourceVersion read, so that of two replicas that read the same
// record only one write succeeds.
func (e *elector) tryAcquireOrRenew(ctx context.Context) error {
	now := e.clock.Now()
	old, err := e.leases.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	missing := apierrors.IsNotFound(err)
	if err != nil && !missing {
		return fmt.Errorf("read the lease: %w", err)
	}
	next := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name}}
	if !missing {
		if err := e.check(old, now); err != nil {
			return err
		}
		next = old.DeepCopy()
	}
	e.claim(next, now)
	var written *coordinationv1.Lease
	if missing {
		written, err = e.leases.Create(ctx, next, metav1.CreateOptions{})
	} else {
		written, err = e.leases.Update(ctx, next, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write the lease: %w", err)
	}
	e.observe(written, now)
	return nil
}

// check observes the lease l read at now and returns errHeld when another
// replica holds it and its record has not been unchanged for the
// holder's lease duration.
func (e *elector) check(l *coordinationv1.Lease, now time.Time) error {
	if e.observed == nil || !sameRecord(e.observed.Spec, l.Spec) {
		e.observe(l, now)
	}
	h := holder(l.Spec)
	if h == "" || h == e.cfg.Identity {
		return nil
	}
	duration := e.cfg.LeaseDuration
	if s := l.Spec.LeaseDurationSeconds; s != nil {
		duration = time.Duration(*s) * time.Second
	}
	if e.observedAt.Add(duration).After(now) {
		return fmt.Errorf("%w: %s", errHeld, h)
	}
	return nil
}

// claim writes this replica's record into l at now: a new holder sets the
// acquire time and counts a transition; the holder only renews.
func (e *elector) claim(l *coordinationv1.Lease, now time.Time) {
	s := &l.Spec
	transitions := ptr.Deref(s.LeaseTransitions, 0)
	if holder(*s) != e.cfg.Identity {
		if holder(*s) != "" || s.AcquireTime != nil {
			transitions++
		}
		s.HolderIdentity = ptr.To(e.cfg.Identity)
		s.AcquireTime = ptr.To(metav1.NewMicroTime(now))
	}
	s.LeaseTransitions = ptr.To(transitions)
	s.LeaseDurationSeconds = ptr.To(int32(max(time.Second, e.cfg.LeaseDuration) / time.Second))
	s.RenewTime = ptr.To(metav1.NewMicroTime(now))
}

// observe records l as seen at now; a successful write of this replica's
// record is a renewal.
func (e *elector) observe(l *coordinationv1.Lease, now time.Time) {
	e.observed, e.observedAt = l, now
	if holder(l.Spec) == e.cfg.Identity {
		e.renewed.Store(now.UnixNano())
	}
}

// release gives the lease up (no holder, a duration of 1 s), so that a
// standby takes it at its next try. A write that conflicts means another
// replica has it already: nothing to give up.
func (e *elector) release(ctx context.Context) {
	if e.observed == nil || holder(e.observed.Spec) != e.cfg.Identity {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RenewDeadline)
	defer cancel()
	now := metav1.NewMicroTime(e.clock.Now())
	l := e.observed.DeepCopy()
	l.Spec.HolderIdentity = ptr.To("")
	l.Spec.LeaseDurationSeconds = ptr.To(int32(1))
	l.Spec.RenewTime, l.Spec.AcquireTime = &now, &now
	if _, err := e.leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		e.log.Warn("cannot release the leader lease; a standby takes it once it expires", "err", err)
		return
	}
	e.observed = nil
	e.log.Info("released the leader lease")
}

// Check is the liveness check of /healthz: it fails while this replica
// leads but has not renewed its lease for the lease duration plus
// watchdogTolerance, a renewal loop that is stuck.
func (e *elector) Check(*http.Request) error {
	last := e.renewed.Load()
	if last == 0 {
		return nil
	}
	since := e.clock.Since(time.Unix(0, last))
	if since > e.cfg.LeaseDuration+watchdogTolerance {
		return fmt.Errorf("the leader has not renewed its lease for %s", since.Truncate(time.Second))
	}
	return nil
}

// sameRecord reports whether two lease specs hold the same record: a
// standby's clock for expiry restarts whenever the record changes.
func sameRecord(a, b coordinationv1.LeaseSpec) bool {
	return holder(a) == holder(b) && ptr.Deref(a.LeaseDurationSeconds, 0) == ptr.Deref(b.LeaseDurationSeconds, 0) &&
		ptr.Deref(a.LeaseTransitions, 0) == ptr.Deref(b.LeaseTransitions, 0) &&
		microEqual(a.RenewTime, b.RenewTime) && microEqual(a.AcquireTime, b.AcquireTime)
}

func holder(s coordinationv1.LeaseSpec) string { return ptr.Deref(s.HolderIdentity, "") }

func microEqual(a, b *metav1.MicroTime) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}
