package jobstatus

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// Follow calls refresh every interval, and at once whenever the job's
// generation key changes after revision rev (the Revision of the snapshot
// on screen), until ctx ends, when it returns nil, or refresh fails. A
// watch that etcd ends (after a compaction) leaves the ticker to refresh.
func Follow(ctx context.Context, client *clientv3.Client, namespace, job string, rev int64, interval time.Duration, refresh func() error) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gens := client.Watch(wctx, record.Prefix(namespace, job)+record.GenerationKey, clientv3.WithRev(rev+1))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case _, open := <-gens:
			if !open {
				gens = nil
			}
		}
		if ctx.Err() != nil {
			// The watch closes with ctx too, and select picks at random.
			return nil
		}
		if err := refresh(); err != nil {
			return err
		}
	}
}
