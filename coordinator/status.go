package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// PutStatus stores v as JSON under status/<id> on the member's lease, so it
// disappears with the member. Callers throttle: every call is one etcd write.
func (m *Member) PutStatus(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	key := m.job.cfg.Prefix() + "status/" + m.id
	if _, err := m.job.client.Put(ctx, key, string(b), clientv3.WithLease(m.Lease())); err != nil {
		m.job.reportError("put status", err)
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Members lists the registered members, in join order. Malformed records
// are reported and left out.
func (j *Job) Members(ctx context.Context) ([]MemberInfo, error) {
	prefix := j.cfg.Prefix() + "members/"
	resp, err := j.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		j.reportError("list members", err)
		return nil, fmt.Errorf("list members: %w", err)
	}
	out := make([]MemberInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		info, err := parseMember(string(kv.Key), kv.Value)
		if err != nil {
			j.reportBad(string(kv.Key), err)
			continue
		}
		info.JoinRevision = kv.CreateRevision
		out = append(out, info)
	}
	return out, nil
}

// parseMember decodes and checks a members/<id> value.
func parseMember(key string, value []byte) (MemberInfo, error) {
	id := key[strings.LastIndexByte(key, '/')+1:]
	var info MemberInfo
	err := json.Unmarshal(value, &info)
	if err == nil {
		err = info.Validate()
	}
	if err == nil && info.ID != id {
		err = fmt.Errorf("id %q does not match the key", info.ID)
	}
	return info, err
}

// Leader returns the id of the member that currently leads the job, or ""
// if none does.
func (j *Job) Leader(ctx context.Context) (string, error) {
	resp, err := j.client.Get(ctx, j.cfg.Prefix()+"election/", append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
	if err != nil {
		j.reportError("get leader", err)
		return "", fmt.Errorf("get leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}
