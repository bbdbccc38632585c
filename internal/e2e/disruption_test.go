package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/sidecar/preempt"
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
	workersIn(ctx, t, ns, job, 2, true)
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

// A termination taint on a worker's Node (here Karpenter's, as a spot
// interruption handler or the cluster autoscaler puts theirs) reaches that
// worker's sidecar through its watch of its own Node, before any SIGTERM:
// it drains, and no committed step is lost.
func TestANodeTerminationTaintDrainsTheWorkersOnIt(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "taint", "gpt"
	// Both workers on node-b, so the taint takes them together.
	workersIn(ctx, t, ns, job, 2, true, func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-b"}
	})
	w := &jobWatch{t: t, ns: ns, job: job}
	waitSize(ctx, t, w, 2, 3*time.Minute)
	// Both drain: the job pauses below its minimum, as a job whose node
	// is taken away does until its workers are placed elsewhere.
	drained := []<-chan struct{}{awaitDraining(ctx, t, ns, job, job+"-0"), awaitDraining(ctx, t, ns, job, job+"-1")}
	nodes := env.Client.CoreV1().Nodes()
	// A read, change and write of the Node, again on a conflict: the
	// node agent writes the Node's status meanwhile, as a kubelet does.
	taint := func(add bool) error {
		ctx := context.WithoutCancel(ctx) // also when the test's ends, to untaint
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := nodes.Get(ctx, "node-b", metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == preempt.TaintKarpenterDisrupted })
			if add {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: preempt.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule})
			}
			_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
	}
	t.Cleanup(func() {
		if err := taint(false); err != nil {
			t.Errorf("untaint node-b: %v", err)
		}
	})
	if err := taint(true); err != nil {
		t.Fatal(err)
	}
	for i, ch := range drained {
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("%s-%d on the tainted node never drained", job, i)
		}
	}
	w.read(ctx) // the step never went back
}

// A preemption notice from the instance metadata endpoint (as AWS's spot
// instance-action answers once a reclaim is scheduled) reaches the sidecar
// of the pod on that instance, which drains; the other worker's sidecar,
// whose endpoint says nothing, stays.
func TestAMetadataPreemptionNoticeDrainsTheWorker(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "notice", "t5"
	var reclaimed atomic.Value // the pod IP whose instance is reclaimed
	reclaimed.Store("")
	ln, err := net.Listen("tcp", net.JoinHostPort(env.Network.HostIP(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if host != reclaimed.Load().(string) {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"action": "terminate", "time": "2026-12-05T12:00:00Z"}`)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	workersIn(ctx, t, ns, job, 2, true, func(s *appsv1.StatefulSet) {
		side := &s.Spec.Template.Spec.InitContainers[0]
		side.Args = append(side.Args, "--preemption-notice-url=http://"+ln.Addr().String()+"/latest/meta-data/spot/instance-action")
	})
	w := &jobWatch{t: t, ns: ns, job: job}
	waitSize(ctx, t, w, 2, 3*time.Minute)
	pod, err := env.Client.CoreV1().Pods(ns).Get(ctx, job+"-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	drained := awaitDraining(ctx, t, ns, job, job+"-1")
	reclaimed.Store(pod.Status.PodIP)
	select {
	case <-drained:
	case <-time.After(time.Minute):
		t.Fatalf("%s-1 (%s) never drained on its instance's notice", job, pod.Status.PodIP)
	}
	if err := Poll(ctx, time.Minute, func() (bool, error) {
		s := w.read(ctx)
		return s.WorldSize == 1 && len(s.Members) > 0 && s.Members[0].ID == job+"-0", nil
	}); err != nil {
		t.Fatalf("the job did not go on with %s-0 alone: %v", job, err)
	}
}
