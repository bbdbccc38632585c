package e2e

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ringside/ringside/autoscale"
	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/webhook"
)

// A worker's drain is measured: its sidecar stores how long it took, the
// controller puts the grace it asks for (p99 x the safety factor) on the
// ElasticScaler's status, and the webhook gives the job's next pod that
// drain grace and a termination grace period to match, where the
// configured floor alone would give less.
func TestANewWorkerGetsItsGracePeriodFromTheMeasuredDrains(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "grace", "roberta"
	// An earlier worker of the job drained in 2.5 s (a checkpoint on the
	// way out). The drain this test causes takes a few etcd round trips,
	// which x any allowed factor may round to the webhook's 1 s floor
	// below; the slow one makes the measured grace stand above it.
	const earlier = 2.5
	seed, err := json.Marshal(record.Drains{}.Add(earlier))
	if err != nil {
		t.Fatal(err)
	}
	drainsKey := record.Prefix(ns, job) + record.DrainsKey
	if _, err := env.EtcdClient.Put(ctx, drainsKey, string(seed)); err != nil {
		t.Fatal(err)
	}
	workersIn(ctx, t, ns, job, 2, true)
	stop := runControllerOn(ctx, t, ns, env.EtcdClient)
	defer stop()
	factor := autoscale.DefaultConfig().DrainSafetyFactor
	es := elasticScaler(ns, job, 1, 2, 0.7)
	es.Spec.Replicas = 2
	if err := env.CreateScaler(ctx, es); err != nil {
		t.Fatal(err)
	}
	w := &jobWatch{t: t, ns: ns, job: job}
	waitSize(ctx, t, w, 2, 3*time.Minute)

	// SIGTERM to a worker: its sidecar drains (the StatefulSet brings the
	// pod back).
	drained := awaitDraining(ctx, t, ns, job, job+"-1")
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, job+"-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-drained:
	case <-time.After(time.Minute):
		t.Fatal("the deleted worker never drained")
	}
	var measured *v1alpha1.DrainStatus
	if err := Poll(ctx, 2*time.Minute, func() (bool, error) {
		got, err := env.Scaler(ctx, ns, job)
		if err != nil {
			return false, err
		}
		measured = got.Status.Drain
		return measured != nil && measured.Samples == 2, nil
	}); err != nil {
		t.Fatalf("the ElasticScaler's status never showed the earlier drain and the new one: %+v: %v", measured, err)
	}
	resp, err := env.EtcdClient.Get(ctx, drainsKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the drains: %v (%d keys)", err, len(resp.Kvs))
	}
	drains, err := record.DecodeDrains(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if s := drains.Seconds; len(s) != 2 || s[0] != earlier || s[1] <= 0 || s[1] > env.InjectConfig().Grace.Seconds() {
		t.Fatalf("drains %v: want the earlier %v s, then the sidecar's, within its grace", s, earlier)
	}
	// The p99 of the newest drains is their slowest. The status shows it
	// rounded to the millisecond; the grace is the unrounded one x the
	// factor, rounded up.
	if measured.P99Seconds != earlier {
		t.Fatalf("drain status %+v: want the slowest drain, %v s, as the p99", measured, earlier)
	}
	if g, want := measured.GracePeriodSeconds, int32(math.Ceil(earlier*factor)); g != want {
		t.Fatalf("measured grace %d s, want p99 %v s x %v rounded up: %d s", g, earlier, factor, want)
	}

	// The webhook, watching the ElasticScalers of the real API server,
	// injects the job's next pod with what was measured.
	graces := autoscale.NewDrainGraces(env.Dynamic, ns)
	gctx, stopGraces := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopGraces()
	wg.Go(func() { graces.Run(gctx) })
	if !cache.WaitForCacheSync(ctx.Done(), graces.HasSynced) {
		t.Fatal("the ElasticScalers' cache never synced")
	}
	floor := env.InjectConfig()
	floor.Grace = time.Second
	h := &webhook.Handler{Config: floor, Measured: graces}
	tmpl, err := env.Workers(ns, job, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: tmpl.Spec.Template.ObjectMeta, Spec: tmpl.Spec.Template.Spec}
	pod.Name, pod.Namespace = job+"-next", ns
	pod.Spec.NodeSelector = map[string]string{"ringside.dev/test": "nowhere"} // admitted, never run
	injected, skipped, err := webhook.Inject(pod, ns, h.ConfigFor(ns, pod))
	if err != nil || injected == nil {
		t.Fatalf("inject: %v (skipped: %q)", err, skipped)
	}
	created, err := env.Client.CoreV1().Pods(ns).Create(ctx, injected, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(measured.GracePeriodSeconds) + 15
	if got := created.Spec.TerminationGracePeriodSeconds; got == nil || *got != want {
		t.Errorf("the new worker's terminationGracePeriodSeconds %v, want the measured %d s + 15 s", got, measured.GracePeriodSeconds)
	}
	if args := created.Spec.InitContainers[0].Args; !slices.Contains(args, "--grace="+(time.Duration(measured.GracePeriodSeconds)*time.Second).String()) {
		t.Errorf("the new worker's sidecar args %q, want the measured drain grace", args)
	}
}
