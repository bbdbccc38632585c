package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/record"
)

// awaitDraining returns a channel closed when member id of the job is
// stored as draining: its sidecar started a drain.
func awaitDraining(ctx context.Context, t *testing.T, ns, job, id string) <-chan struct{} {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	ch := env.EtcdClient.Watch(wctx, record.Prefix(ns, job)+record.MembersDir+id)
	done := make(chan struct{})
	go func() {
		defer cancel()
		for resp := range ch {
			for _, ev := range resp.Events {
				var m record.MemberInfo
				if ev.Type == clientv3.EventTypePut && json.Unmarshal(ev.Kv.Value, &m) == nil && m.State == record.StateDraining {
					close(done)
					return
				}
			}
		}
	}()
	return done
}

// An ElasticScaler with podDisruptionBudget keeps a budget of its
// minReplicas over the workers, owned by it: an eviction that would take
// the job below its minimum is refused; one that would not reaches the
// evicted worker's sidecar, which drains (0 committed steps lost), and the
// budget goes with the scaler.
func TestTheJobsDisruptionBudgetGuardsItsMinimumAndAnEvictionDrains(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "evict", "bert"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sts, err := env.Workers(ns, job, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := runController(ctx, t, ns)
	defer stop()
	es := elasticScaler(ns, job, 2, 3, 0.7)
	es.Spec.Replicas, es.Spec.PodDisruptionBudget = 2, true
	if err := env.CreateScaler(ctx, es); err != nil {
		t.Fatal(err)
	}
	w := &jobWatch{t: t, ns: ns, job: job}
	waitSize(ctx, t, w, 2, 3*time.Minute)

	pdbs := env.Client.PolicyV1().PodDisruptionBudgets(ns)
	budget := func(allowed int32) *policyv1.PodDisruptionBudget {
		t.Helper()
		var pdb *policyv1.PodDisruptionBudget
		if err := Poll(ctx, time.Minute, func() (bool, error) {
			var err error
			pdb, err = pdbs.Get(ctx, job, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == allowed, err
		}); err != nil {
			t.Fatalf("PodDisruptionBudget %+v: want %d disruptions allowed: %v", pdb, allowed, err)
		}
		return pdb
	}
	pdb := budget(0)
	if pdb.Spec.MinAvailable.IntValue() != 2 || metav1.GetControllerOf(pdb) == nil || metav1.GetControllerOf(pdb).Kind != "ElasticScaler" {
		t.Fatalf("budget minAvailable %v, owner %+v; want 2, the ElasticScaler", pdb.Spec.MinAvailable, metav1.GetControllerOf(pdb))
	}
	evict := func(pod string) error {
		return env.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}})
	}
	if err := evict(job + "-1"); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting a worker of a job at its minimum: %v, want refused (429) by the budget", err)
	}

	// A lower minimum lets one worker go.
	patch := []byte(`{"spec":{"minReplicas":1}}`)
	if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(ns).Patch(ctx, job, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	budget(1)
	drained := awaitDraining(ctx, t, ns, job, job+"-1")
	step := w.lastStep
	if err := evict(job + "-1"); err != nil {
		t.Fatalf("evicting a worker above the minimum: %v", err)
	}
	select {
	case <-drained:
	case <-time.After(time.Minute):
		t.Fatal("the evicted worker's member never drained")
	}
	waitSize(ctx, t, w, 2, 3*time.Minute)
	if err := Poll(ctx, time.Minute, func() (bool, error) { return w.read(ctx).Members[0].Step > step, nil }); err != nil {
		t.Fatalf("the job did not train on past step %d after the eviction", step)
	}

	// The budget is the scaler's: the garbage collector removes it.
	if err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(ns).Delete(ctx, job, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Poll(ctx, time.Minute, func() (bool, error) {
		_, err := pdbs.Get(ctx, job, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the budget outlived its ElasticScaler")
	}
}
