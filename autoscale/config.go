package autoscale

import (
	"errors"
	"fmt"
	"time"
)

// Config configures the controller.
type Config struct {
	// Namespace limits the controller to one namespace's ElasticScalers
	// (and pods); "" watches all.
	Namespace string
	// SyncPeriod is how often every ElasticScaler is synced even without
	// a change to it: measurements change without an API event.
	SyncPeriod time.Duration
	// Workers is how many ElasticScalers sync at once.
	Workers int
	// SyncTimeout bounds one sync: its API calls and the etcd read.
	SyncTimeout time.Duration
	// EtcdTimeout bounds the read of a job's status from etcd.
	EtcdTimeout time.Duration
	// MeasureMaxAge is the oldest a member's heartbeat may be for the
	// job's throughput to be measured from it.
	MeasureMaxAge time.Duration
	// MeasureSettle is how long a generation must have been seen before
	// its throughput is measured: the sidecars' rates span their last
	// two heartbeats, so the first readings after a resize still hold the
	// stall of the re-form, or a joiner's wait.
	MeasureSettle time.Duration
	// RetryBaseDelay and RetryMaxDelay bound the back-off of a sync that
	// failed (its key waits base, 2 base, 4 base ... up to max).
	RetryBaseDelay, RetryMaxDelay time.Duration
	// HistoryMaxAge and HistoryMaxLen bound the recommendations and scale
	// changes kept per ElasticScaler for the stabilization windows and
	// policies.
	HistoryMaxAge time.Duration
	HistoryMaxLen int
	// LeaderElection configures the lease that picks the one controller
	// that syncs (Run only).
	LeaderElection LeaderElection
	// MetricsAddr is where Run serves /metrics, /healthz and /readyz
	// ("" serves none).
	MetricsAddr string
	// DrainSafetyFactor and DrainGraceMax size the drain grace a job's
	// workers get from its measured drains (status.drain): the 99th
	// percentile times the factor, rounded up to a second, at most the
	// max (see drain.go).
	DrainSafetyFactor float64
	DrainGraceMax     time.Duration
}

// DefaultConfig returns the controller's defaults.
func DefaultConfig() Config {
	return Config{
		// 15 s: the HorizontalPodAutoscaler's sync period; a few
		// heartbeats per member (the sidecars store one a second) and far
		// below the minutes a resize pays back over.
		SyncPeriod: 15 * time.Second,
		// 2: a sync is a few round trips, so two workers keep up with
		// hundreds of scalers per sync period.
		Workers: 2,
		// 30 s: twice the sync period; an API server or etcd slower than
		// that is better retried than waited on.
		SyncTimeout: 30 * time.Second,
		// 5 s: an etcd read of one job is one Get; `ringside status`
		// waits as long.
		EtcdTimeout: 5 * time.Second,
		// 30 s: a few steps of a slow trainer (heartbeats come once a
		// step), so a healthy job always measures, while a member that
		// stopped reporting half a minute ago no longer counts.
		MeasureMaxAge: 30 * time.Second,
		// 10 s: several heartbeats (one a second) past the re-form, and
		// under one sync period, so a steady job is measured every sync.
		MeasureSettle: 10 * time.Second,
		// 1 s to 5 min: a missing target or an unreachable etcd rarely
		// heals within milliseconds (the workqueue's default base), and
		// the resync tries again every sync period regardless.
		RetryBaseDelay: time.Second,
		RetryMaxDelay:  5 * time.Minute,
		// 1 h and 512: the longest stabilization window HPA allows is one
		// hour (policies look back at most 30 min); 512 entries hold an
		// hour of 15 s syncs twice over.
		HistoryMaxAge:  time.Hour,
		HistoryMaxLen:  512,
		LeaderElection: DefaultLeaderElection(),
		MetricsAddr:    ":8080",
		// 2: a drain waits for the next generation, whose commit varies
		// with the leader's settle window and etcd's latency; twice the
		// slowest drain seen covers a slower one without keeping a
		// dead pod's node for long.
		DrainSafetyFactor: 2,
		// 10 min: past any drain that ends (one is a commit and a
		// generation); a drain that keeps running into its grace would
		// otherwise raise it by the factor at each round.
		DrainGraceMax: 10 * time.Minute,
	}
}

// Validate reports every setting out of its bounds.
func (c Config) Validate() error {
	var errs []error
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"sync period", c.SyncPeriod}, {"sync timeout", c.SyncTimeout}, {"etcd timeout", c.EtcdTimeout},
		{"measure max age", c.MeasureMaxAge}, {"retry base delay", c.RetryBaseDelay}, {"history max age", c.HistoryMaxAge},
	}
	for _, p := range positive {
		if p.d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", p.name, p.d))
		}
	}
	if c.MeasureSettle < 0 {
		errs = append(errs, fmt.Errorf("measure settle must not be negative, got %s", c.MeasureSettle))
	}
	if c.RetryMaxDelay < c.RetryBaseDelay {
		errs = append(errs, fmt.Errorf("retry max delay %s is shorter than the base delay %s", c.RetryMaxDelay, c.RetryBaseDelay))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers must be at least 1, got %d", c.Workers))
	}
	if c.HistoryMaxLen < 1 {
		errs = append(errs, fmt.Errorf("history max len must be at least 1, got %d", c.HistoryMaxLen))
	}
	if c.DrainSafetyFactor < 1 || c.DrainSafetyFactor > 100 {
		errs = append(errs, fmt.Errorf("drain safety factor must be in 1-100, got %v", c.DrainSafetyFactor))
	}
	if c.DrainGraceMax < time.Second {
		errs = append(errs, fmt.Errorf("drain grace max must be at least 1s, got %s", c.DrainGraceMax))
	}
	if c.LeaderElection.Enabled {
		errs = append(errs, c.LeaderElection.Validate())
	}
	return errors.Join(errs...)
}
