package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// stragglerWriteTimeout bounds the write of the leader's findings.
const stragglerWriteTimeout = 5 * time.Second

// readStragglers takes over the findings stored at rev (a previous
// leader's) and the members' statuses.
func (m *Member) readStragglers(ctx context.Context, st *leaderState, rev int64) error {
	prefix := m.job.cfg.Prefix()
	st.stragglers = newStragglers(m.job.cfg.Straggler)
	st.statuses = map[string]record.Status{}
	resp, err := m.job.client.Get(ctx, prefix+record.StragglersDir, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		id, s, err := record.DecodeStraggler(string(kv.Key), kv.Value)
		if err != nil {
			m.job.reportBad(string(kv.Key), err)
			continue
		}
		st.stragglers.named[id] = s
	}
	resp, err = m.job.client.Get(ctx, prefix+record.StatusDir, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		m.applyStatus(st, string(kv.Key), kv.Value)
	}
	return nil
}

// applyStatuses records what the status watch delivered.
func (m *Member) applyStatuses(st *leaderState, events []*clientv3.Event) {
	for _, ev := range events {
		if ev.Type == clientv3.EventTypeDelete {
			delete(st.statuses, strings.TrimPrefix(string(ev.Kv.Key), m.job.cfg.Prefix()+record.StatusDir))
			continue
		}
		m.applyStatus(st, string(ev.Kv.Key), ev.Kv.Value)
	}
}

func (m *Member) applyStatus(st *leaderState, key string, value []byte) {
	id := strings.TrimPrefix(key, m.job.cfg.Prefix()+record.StatusDir)
	s, err := record.DecodeStatus(value)
	if err != nil || record.ValidateID(id) != nil {
		m.job.reportBad(key, fmt.Errorf("status of %q: %w", id, err))
		delete(st.statuses, id)
		return
	}
	st.statuses[id] = s
}

// checkStragglers looks for stragglers and stores what changed, fenced by
// the leader's election key. A write that fails is tried again at the
// next status; one that is fenced off ends the term.
func (c *committer) checkStragglers(ctx context.Context, now time.Time) error {
	m, st := c.m, c.st
	ch := st.stragglers.observe(stragglerView{
		gen: st.gen, members: st.members, statuses: st.statuses, resizing: c.timerC != nil,
		min: m.job.cfg.Policy.Min, leader: m.id, now: now,
	})
	if ch.empty() {
		return nil
	}
	prefix := m.job.cfg.Prefix()
	var ops []clientv3.Op
	for id, s := range ch.put {
		b, err := json.Marshal(s)
		if err != nil {
			return fmt.Errorf("encode straggler %s: %w", id, err)
		}
		ops = append(ops, clientv3.OpPut(prefix+record.StragglerKey(id), string(b)))
	}
	for _, id := range ch.clear {
		ops = append(ops, clientv3.OpDelete(prefix+record.StragglerKey(id)))
	}
	tctx, cancel := context.WithTimeout(ctx, stragglerWriteTimeout)
	defer cancel()
	resp, err := m.job.client.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(c.leaderKey), "=", c.fence)).Then(ops...).Commit()
	if err != nil {
		m.job.reportError("put stragglers", err)
		m.log.Warn("stragglers not stored; trying again at the next status", "err", err)
		return nil
	}
	if !resp.Succeeded {
		return fmt.Errorf("store stragglers: %w", errFenced)
	}
	st.stragglers.apply(ch)
	for id, s := range ch.put {
		m.log.Warn("straggler", "member", id, "compute_time_s", s.ComputeTimeS, "median_compute_time_s", s.MedianComputeTimeS,
			"since_step", s.SinceStep, "step", s.Step, "action", s.Action, "generation", s.Generation)
	}
	for _, id := range ch.clear {
		m.log.Info("straggler cleared", "member", id)
	}
	return nil
}
