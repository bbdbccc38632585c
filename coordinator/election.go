package coordinator

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// elect campaigns on the same keys as concurrency.Election (prefix + lease
// in hex, lowest CreateRevision leads) and returns the leader key and its
// CreateRevision, the fence of every commit. It differs from
// concurrency.Election in one way that matters here: when ctx ends it
// resigns with a bounded context, so a member stops promptly even while etcd
// is unreachable (concurrency.Election resigns with the client's context and
// blocks until etcd answers).
func elect(ctx context.Context, sess *concurrency.Session, prefix, val string) (key string, rev int64, err error) {
	client := sess.Client()
	key = fmt.Sprintf("%s%x", prefix, sess.Lease())
	resp, err := client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(sess.Lease()))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		if ctx.Err() != nil {
			resign(ctx, client, key) // the Txn may have applied
		}
		return "", 0, fmt.Errorf("campaign: %w", err)
	}
	rev = resp.Header.Revision
	if !resp.Succeeded {
		rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}
	if err := waitPredecessors(ctx, client, prefix, rev-1); err != nil {
		if ctx.Err() != nil {
			resign(ctx, client, key)
		}
		return "", 0, fmt.Errorf("campaign: %w", err)
	}
	return key, rev, nil
}

// resign deletes the election key of a campaign whose ctx ended (the member
// stops, or withdraws), bounded so a member stops promptly while etcd is
// unreachable.
func resign(ctx context.Context, client *clientv3.Client, key string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptTimeout)
	defer cancel()
	client.Delete(rctx, key) //nolint:errcheck // best effort: the key dies with the lease anyway
}

// waitPredecessors waits until no key under prefix was created at or before
// maxRev.
func waitPredecessors(ctx context.Context, client *clientv3.Client, prefix string, maxRev int64) error {
	opts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(maxRev))
	for {
		resp, err := client.Get(ctx, prefix, opts...)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if err := waitDelete(ctx, client, string(resp.Kvs[0].Key), resp.Header.Revision); err != nil {
			return err
		}
	}
}

func waitDelete(ctx context.Context, client *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range client.Watch(wctx, key, clientv3.WithRev(rev)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch ended while waiting for the leader to go")
}
