package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// errDrainsChanged is a compare-and-swap of the drains key that lost to
// another member's: read again and retry.
var errDrainsChanged = errors.New("the drains key changed under the write")

// RecordDrain appends d, how long this member's drain took, to the job's
// drains key (record.Drains), retrying until ctx ends. Members draining
// together each append theirs: the write is a compare-and-swap on the
// key's revision, and a write that loses reads again. A malformed value
// is replaced by d alone.
func (m *Member) RecordDrain(ctx context.Context, d time.Duration) error {
	key := m.job.cfg.Prefix() + record.DrainsKey
	seconds := d.Seconds()
	return retry(ctx, m.job.cfg.OnError, func(ctx context.Context) error {
		resp, err := m.job.client.Get(ctx, key)
		if err != nil {
			return err
		}
		var cur record.Drains
		rev := int64(0)
		if len(resp.Kvs) > 0 {
			rev = resp.Kvs[0].ModRevision
			if cur, err = record.DecodeDrains(resp.Kvs[0].Value); err != nil {
				m.log.Warn("replacing a malformed drains record", "err", err)
				cur = record.Drains{}
			}
		}
		b, err := json.Marshal(cur.Add(seconds))
		if err != nil {
			return fmt.Errorf("encode drains: %w", err)
		}
		txn, err := m.job.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(b))).
			Commit()
		if err != nil {
			return err
		}
		if !txn.Succeeded {
			return errDrainsChanged
		}
		return nil
	})
}
