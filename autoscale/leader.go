package autoscale

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"k8s.io/utils/clock"
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
	// LeaseDuration, RenewDeadline and RetryPeriod mean what they mean
	// in client-go's leader election: how long a standby waits before
	// taking a lease that was not renewed (whole seconds, at least 1), how
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
	if l.LeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("the leader lease's duration is in whole seconds, at least 1s, got %s", l.LeaseDuration))
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

// newLeaseElector returns an elector of l on the real clock, with an
// identity picked when l has none.
func newLeaseElector(leases LeaseClient, l LeaderElection, log *slog.Logger, onLeading func(bool)) (*elector, error) {
	if l.Identity == "" {
		id, err := NewIdentity()
		if err != nil {
			return nil, err
		}
		l.Identity = id
	}
	return newElector(leases, l, clock.RealClock{}, log, onLeading), nil
}
