package coordinator

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// awaitCandidacy returns once this member should campaign: it is among the
// first Config.Candidates members of the ring, or fewer than that many
// members campaign (at the start, or after candidates died). Keeping the
// election to a few candidates keeps each campaign O(candidates): etcd
// sorts the whole election prefix to find a candidate's predecessor.
func (m *Member) awaitCandidacy(ctx context.Context) error {
	k := m.job.cfg.Candidates
	if k <= 0 {
		return nil
	}
	prefix := m.job.cfg.Prefix() + record.ElectionDir
	gens := m.job.subscribe()
	defer m.job.unsubscribe(gens)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deletes := m.job.client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut())
	inRing := func() bool {
		g := m.job.Generation()
		if g == nil {
			return false
		}
		for i := 0; i < k && i < len(g.Members); i++ {
			if g.Members[i].ID == m.id {
				return true
			}
		}
		return false
	}
	// Counting the candidates is an etcd read: do it at the start and when
	// a candidate goes, not on every generation.
	count := true
	for {
		if inRing() {
			return nil
		}
		if count {
			resp, err := m.job.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return fmt.Errorf("count candidates: %w", err)
			}
			if resp.Count < int64(k) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gens:
			count = false
		case wr, ok := <-deletes:
			if !ok || wr.Err() != nil {
				return fmt.Errorf("watch candidates: %v", wr.Err())
			}
			count = hasDelete(wr.Events)
		}
	}
}

func hasDelete(evs []*clientv3.Event) bool {
	for _, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			return true
		}
	}
	return false
}
