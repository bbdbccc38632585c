package coordinator

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// FollowStraggler calls found with the leader's finding about this member
// each time it changes, nil when there is none (or it was cleared), until
// ctx ends. It reads the key, then watches it from there; a watch that
// fails (etcd down) is opened again with backoff, reading the key anew.
// A malformed finding is reported and taken as none.
func (m *Member) FollowStraggler(ctx context.Context, found func(*record.Straggler)) {
	key := m.job.cfg.Prefix() + record.StragglerKey(m.id)
	bo := newBackoff()
	decode := func(value []byte) *record.Straggler {
		if value == nil {
			return nil
		}
		_, s, err := record.DecodeStraggler(key, value)
		if err != nil {
			m.job.reportBad(key, err)
			return nil
		}
		return &s
	}
	for ctx.Err() == nil {
		resp, err := m.job.client.Get(ctx, key)
		if err == nil {
			bo.Reset()
			var value []byte
			if len(resp.Kvs) > 0 {
				value = resp.Kvs[0].Value
			}
			found(decode(value))
			wctx, cancel := context.WithCancel(ctx)
			for wr := range m.job.client.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypeDelete {
						found(nil)
					} else {
						found(decode(ev.Kv.Value))
					}
				}
			}
			cancel()
		} else {
			m.job.reportError("get straggler", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(bo.NextBackOff()):
		}
	}
}
