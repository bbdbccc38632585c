package autoscale

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrLostLease is Run's error when another controller took the leader
// lease while this one led: the process should exit and restart as a
// standby, as kube-controller-manager does, so that no sync of the old
// leader overlaps the new one's.
var ErrLostLease = errors.New("autoscale: lost the leader lease")

// LeaderElection configures the coordination.k8s.io Lease that lets one
// of several controller replicas sync.
type LeaderElection struct {
	// Enabled runs leader election; without it the controller syncs at
	// once (one replica only).
	Enabled bool
	// Namespace and Name name the Lease.
	Namespace, Name string
	// Identity is this replica's holder identity; "" picks the host name
	// with a random suffix (NewIdentity).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's: how
	// long a standby waits before taking a lease that was not renewed, how
	// long the leader tries to renew before it gives up, and how often
	// each tries.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultLeaderElection returns the defaults of Kubernetes' controllers.
func DefaultLeaderElection() LeaderElection {
	return LeaderElection{
		Enabled:   true,
		Namespace: "default",
		Name:      "ringside-controller",
		// 15 s, 10 s, 2 s: kube-controller-manager's; a dead leader is
		// replaced within about 17 s, and an API server hiccup shorter
		// than 10 s costs no leadership.
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
	}
}

// Validate reports what is wrong with the settings.
func (l LeaderElection) Validate() error {
	var errs []error
	if l.Namespace == "" || l.Name == "" {
		errs = append(errs, fmt.Errorf("the leader lease needs a namespace and a name, got %q and %q", l.Namespace, l.Name))
	}
	if !(l.LeaseDuration > l.RenewDeadline && l.RenewDeadline > l.RetryPeriod && l.RetryPeriod > 0) {
		errs = append(errs, fmt.Errorf("leader election wants lease duration (%s) > renew deadline (%s) > retry period (%s) > 0",
			l.LeaseDuration, l.RenewDeadline, l.RetryPeriod))
	}
	return errors.Join(errs...)
}

// NewIdentity returns the host name with a random suffix: unique even for
// two replicas on one host, or a restarted pod that kept its name.
func NewIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("leader identity: %w", err)
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("leader identity: %w", err)
	}
	return host + "_" + hex.EncodeToString(b), nil
}

// lead campaigns for the lease and runs run while this replica holds it.
// It returns nil when ctx ends (after releasing the lease, so a standby
// takes over at once) and ErrLostLease when the lease was lost while ctx
// was live; in both cases only after run returned.
func lead(ctx context.Context, kube kubernetes.Interface, l LeaderElection, watchdog *leaderelection.HealthzAdaptor,
	onLeading func(bool), run func(ctx context.Context)) error {
	if l.Identity == "" {
		id, err := NewIdentity()
		if err != nil {
			return err
		}
		l.Identity = id
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.Identity},
	}
	var (
		// The elector starts OnStartedLeading in a goroutine it does not
		// wait for: mu, stopped and wg make sure run either never starts
		// or is waited for.
		mu      sync.Mutex
		stopped bool
		wg      sync.WaitGroup
		lost    = make(chan struct{})
	)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   l.LeaseDuration,
		RenewDeadline:   l.RenewDeadline,
		RetryPeriod:     l.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        watchdog,
		Name:            l.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if stopped {
					mu.Unlock()
					return
				}
				wg.Add(1)
				mu.Unlock()
				defer wg.Done()
				onLeading(true)
				run(lctx)
			},
			OnStoppedLeading: func() {
				onLeading(false)
				if ctx.Err() == nil {
					close(lost)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("autoscale: leader election: %w", err)
	}
	elector.Run(ctx)
	mu.Lock()
	stopped = true
	mu.Unlock()
	wg.Wait()
	select {
	case <-lost:
		return ErrLostLease
	default:
		return nil
	}
}
