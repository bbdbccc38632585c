package autoscale

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/ringside/ringside/telemetry"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// Run runs the controller of cfg on the API server of restCfg and on etcd
// until ctx ends: it serves /metrics, /healthz and /readyz on
// cfg.MetricsAddr, campaigns for the leader lease (when
// cfg.LeaderElection.Enabled) and syncs while it leads. It returns nil
// when ctx ends and ErrLostLease when another replica took the lease.
func Run(ctx context.Context, restCfg *rest.Config, etcd *clientv3.Client, cfg Config, logger *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("autoscale: %w", err)
	}
	deps, err := NewDeps(restCfg, etcd)
	if err != nil {
		return fmt.Errorf("autoscale: %w", err)
	}
	reg := telemetry.NewRegistry() // the controller's metrics (registered by New) join the runtime's
	deps.Metrics, deps.Logger = reg, logger
	c, err := New(cfg, deps)
	if err != nil {
		return err
	}
	core, err := restClient(restCfg, corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return fmt.Errorf("autoscale: %w", err)
	}
	apiServer := newAPIServerProbe(core, reg, c.log)
	pctx, stopProbe := context.WithCancel(ctx)
	var probing sync.WaitGroup
	probing.Go(func() { apiServer.run(pctx) })
	defer probing.Wait()
	defer stopProbe()
	if !cfg.LeaderElection.Enabled {
		stop, err := serve(cfg.MetricsAddr, c.handler(reg, nil, apiServer), c.log)
		if err != nil {
			return err
		}
		defer stop()
		c.metrics.isLeader.Set(1)
		return c.Run(ctx)
	}
	le := cfg.LeaderElection
	elector, err := newLeaseElector(deps.Leases(le.Namespace), le, c.log, c.onLeading)
	if err != nil {
		return fmt.Errorf("autoscale: %w", err)
	}
	// The elector's watchdog fails /healthz when the leader has not
	// renewed for 20 s past its lease's expiry: it is stuck, and its
	// liveness probe should say so.
	stop, err := serve(cfg.MetricsAddr, c.handler(reg, elector, apiServer), c.log)
	if err != nil {
		return err
	}
	defer stop()
	c.leading.Store(false)
	var runErr error
	err = elector.run(ctx, func(lctx context.Context) {
		runErr = c.Run(lctx)
	})
	return errors.Join(err, runErr)
}

func (c *Controller) onLeading(leading bool) {
	was := c.leading.Swap(leading)
	if leading {
		c.metrics.isLeader.Set(1)
		c.log.Info("leading: syncing ElasticScalers")
		return
	}
	c.metrics.isLeader.Set(0)
	if was {
		c.log.Info("stopped leading")
	}
}

// healthCheck is a liveness check of /healthz: the elector's watchdog.
type healthCheck interface {
	Check(r *http.Request) error
}

var _ healthCheck = (*elector)(nil)

// handler serves the metrics of reg and the health checks: /healthz fails
// when the leader could not renew its lease for long (watchdog; nil: no
// leader election), /readyz until the controller does its work (Ready)
// and while the API server does not answer (apiServer; nil: not probed).
func (c *Controller) handler(reg *prometheus.Registry, watchdog, apiServer healthCheck) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", telemetry.MetricsHandler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if watchdog != nil {
			if err := watchdog.Check(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !c.Ready() {
			http.Error(w, "the informers' caches have not synced yet", http.StatusServiceUnavailable)
			return
		}
		if apiServer != nil {
			if err := apiServer.Check(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// serve serves h on addr ("" serves nothing) until stop is called. The
// address is bound before serve returns, so a taken port is an error here.
func serve(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("autoscale: metrics address: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := telemetry.Serve(ctx, srv, ln); err != nil {
			log.Error("metrics server stopped", "err", err)
		}
	})
	log.Info("serving metrics and health", "addr", ln.Addr().String())
	return func() {
		cancel()
		wg.Wait()
	}, nil
}
