package coordinator

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// PutStatus stores st under status/<id> on the member's lease, so it
// disappears with the member. Callers throttle: every call is one etcd write.
func (m *Member) PutStatus(ctx context.Context, st record.Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	key := m.job.cfg.Prefix() + record.StatusDir + m.id
	if _, err := m.job.client.Put(ctx, key, string(b), clientv3.WithLease(m.Lease())); err != nil {
		m.job.reportError("put status", err)
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Members lists the registered members, in join order. Malformed records
// are reported and left out.
func (j *Job) Members(ctx context.Context) ([]record.MemberInfo, error) {
	prefix := j.cfg.Prefix() + record.MembersDir
	resp, err := j.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		j.reportError("list members", err)
		return nil, fmt.Errorf("list members: %w", err)
	}
	out := make([]record.MemberInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		info, err := record.DecodeMember(string(kv.Key), kv.Value, kv.CreateRevision)
		if err != nil {
			j.reportBad(string(kv.Key), err)
			continue
		}
		out = append(out, info)
	}
	return out, nil
}

// Leader returns the id of the member that currently leads the job, or ""
// if none does.
func (j *Job) Leader(ctx context.Context) (string, error) {
	resp, err := j.client.Get(ctx, j.cfg.Prefix()+record.ElectionDir, append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
	if err != nil {
		j.reportError("get leader", err)
		return "", fmt.Errorf("get leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}
