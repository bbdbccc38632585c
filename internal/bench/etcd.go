package bench

import (
	"context"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ringside/ringside/etcdserver"
)

// startEtcd runs an embedded etcd in a fresh temporary directory; stop
// closes it and removes the directory.
func startEtcd(ctx context.Context, noFsync bool) (srv *etcdserver.Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", "ringside-bench-etcd-")
	if err != nil {
		return nil, nil, err
	}
	cfg := etcdserver.EphemeralConfig(dir)
	cfg.UnsafeNoFsync = noFsync
	if srv, err = etcdserver.Start(ctx, cfg); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() { srv.Close(); os.RemoveAll(dir) }, nil
}

func newClient(srv *etcdserver.Server) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return c, nil
}

// etcdCounter sums a counter that the embedded etcd registers with the
// default Prometheus registry (for example etcd_mvcc_put_total).
func etcdCounter(name string) float64 {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
