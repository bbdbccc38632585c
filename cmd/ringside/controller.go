package main

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/ringside/ringside/autoscale"
	"github.com/ringside/ringside/coordinator/etcdconn"
)

// controllerOptions are the flags of `ringside controller`.
type controllerOptions struct {
	cfg        autoscale.Config
	etcd       etcdconn.Config
	kubeconfig string
}

func newControllerCmd() *cobra.Command {
	o := controllerOptions{cfg: autoscale.DefaultConfig(), etcd: etcdconn.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the ElasticScaler controller: scale training jobs on measured goodput",
		Long: `controller scales ringside training jobs on what training cares about: the
useful throughput each worker adds, not CPU. For every ElasticScaler
(ringside.dev/v1alpha1) it reads the target's scale subresource (a
StatefulSet, a Deployment, a JobSet ...), the job's members and their
measured samples/s from etcd (the same keys the sidecars write) and the
target's Pending pods, decides the size with the goodput policy, updates
the target's scale when the size changes, and reports in the scaler's
status: current and desired replicas, the throughput measured at each
world size, the marginal efficiency, the conditions AbleToScale,
ScalingActive and ScalingLimited, and Events (SuccessfulRescale,
FailedRescale, FailedGetScale, InvalidSpec).

Every scaler is synced when it changes and every --sync-period. Replicas
elect one leader with a coordination.k8s.io Lease; the others stand by,
and a leader that loses the lease exits non-zero so that it restarts as a
standby. /metrics, /healthz and /readyz are served on --metrics-addr.

Credentials: --kubeconfig, else the pod's service account, else
$KUBECONFIG or ~/.kube/config. The controller reads every job's keys
under /ringside/: with etcd's authentication on, its etcd user needs read
access to that prefix. The etcd flags are the sidecar's, with the same
environment variables (RINGSIDE_ETCD_ENDPOINTS and so on).

RBAC: get, list and watch elasticscalers.ringside.dev; update
elasticscalers/status; get and update the targets' scale subresource;
list and watch pods; create and patch events; get, create and update
leases.coordination.k8s.io in --leader-elect-namespace.`,
		Example: `  # against the cluster of ~/.kube/config and a local 'ringside etcd'
  kubectl apply -f autoscale/crd/ringside.dev_elasticscalers.yaml
  ringside controller --leader-elect=false --metrics-addr 127.0.0.1:8080

  # in a Deployment of two replicas, one namespace, etcd over mTLS
  ringside controller --namespace ml --leader-elect-namespace ml \
    --etcd-endpoints https://etcd:2379 --etcd-ca ca.crt \
    --etcd-cert controller.crt --etcd-key controller.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runController(cmd, o)
		},
	}
	f := cmd.Flags()
	c, le := &o.cfg, &o.cfg.LeaderElection
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster credentials, then $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&c.Namespace, "namespace", "", "only ElasticScalers and pods of this namespace (default: all)")
	f.DurationVar(&c.SyncPeriod, "sync-period", c.SyncPeriod, "how often every ElasticScaler is synced even when nothing of it changed (measurements change without an API event)")
	f.IntVar(&c.Workers, "workers", c.Workers, "ElasticScalers synced at once")
	addEtcdFlags(f, &o.etcd)
	f.BoolVar(&le.Enabled, "leader-elect", le.Enabled, "elect one leader among the controller's replicas with a Lease; only the leader syncs")
	f.StringVar(&le.Namespace, "leader-elect-namespace", le.Namespace, "namespace of the leader Lease")
	withEnv(f, "leader-elect-namespace", "RINGSIDE_LEADER_ELECT_NAMESPACE", "POD_NAMESPACE")
	f.StringVar(&le.Name, "leader-elect-lease-name", le.Name, "name of the leader Lease")
	f.DurationVar(&le.LeaseDuration, "leader-elect-lease-duration", le.LeaseDuration, "how long a standby waits before taking a lease its leader stopped renewing")
	f.DurationVar(&le.RenewDeadline, "leader-elect-renew-deadline", le.RenewDeadline, "how long the leader retries renewing before it gives up leading (less than the lease duration)")
	f.DurationVar(&le.RetryPeriod, "leader-elect-retry-period", le.RetryPeriod, "how often the leader renews and a standby tries to acquire the lease")
	f.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, `address of /metrics, /healthz and /readyz ("" serves none)`)
	f.Float64Var(&c.DrainSafetyFactor, "drain-safety-factor", c.DrainSafetyFactor, "a job's measured drain grace (status.drain.gracePeriodSeconds, which the webhook gives its new workers when longer than its --drain-grace) is the 99th percentile of its drains times this, rounded up to a second (1-100)")
	f.DurationVar(&c.DrainGraceMax, "drain-grace-max", c.DrainGraceMax, "the longest measured drain grace (at least 1s): drains that keep running into their grace stop raising it here")
	return cmd
}

func (o controllerOptions) validate() error {
	c, le := o.cfg, o.cfg.LeaderElection
	var errs []error
	if c.SyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--sync-period must be positive, got %s", c.SyncPeriod))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", c.Workers))
	}
	if c.DrainSafetyFactor < 1 || c.DrainSafetyFactor > 100 {
		errs = append(errs, fmt.Errorf("--drain-safety-factor must be in 1-100, got %v", c.DrainSafetyFactor))
	}
	if c.DrainGraceMax < time.Second {
		errs = append(errs, fmt.Errorf("--drain-grace-max must be at least 1s, got %s", c.DrainGraceMax))
	}
	if le.Enabled {
		if le.Namespace == "" || le.Name == "" {
			errs = append(errs, errors.New("--leader-elect-namespace and --leader-elect-lease-name must not be empty"))
		}
		if !(le.LeaseDuration > le.RenewDeadline && le.RenewDeadline > le.RetryPeriod && le.RetryPeriod > 0) {
			errs = append(errs, fmt.Errorf("want --leader-elect-lease-duration (%s) > --leader-elect-renew-deadline (%s) > --leader-elect-retry-period (%s) > 0",
				le.LeaseDuration, le.RenewDeadline, le.RetryPeriod))
		}
	}
	if err := o.etcd.Validate(); err != nil {
		errs = append(errs, flagErrors(err, etcdFieldFlags))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// What the flags above do not cover (the defaults of the rest).
	return c.Validate()
}

func runController(cmd *cobra.Command, o controllerOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	restCfg, err := kubeConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := etcdconn.New(o.etcd)
	if err != nil {
		return err
	}
	defer client.Close()
	// client-go logs through klog: into our log, in our format.
	klog.SetSlogLogger(slog.Default())
	return autoscale.Run(cmd.Context(), restCfg, client, o.cfg, slog.Default())
}

// kubeConfig loads the API server's credentials: the file named, else the
// pod's service account, else $KUBECONFIG or ~/.kube/config.
func kubeConfig(path string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case path != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
		}
	default:
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				return nil, fmt.Errorf("no Kubernetes credentials: not in a cluster, and none in $KUBECONFIG or %s (pass --kubeconfig): %w", clientcmd.RecommendedHomeFile, err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("in-cluster credentials: %w", err)
		}
	}
	cfg.UserAgent = "ringside-controller"
	// 20 and 30: kube-controller-manager's; client-go's 5 and 10 would
	// throttle a sync period's worth of scalers.
	// No cfg.Timeout: it would cut the informers' watches too; every
	// sync is bounded by its own context instead.
	cfg.QPS, cfg.Burst = 20, 30
	return cfg, nil
}
