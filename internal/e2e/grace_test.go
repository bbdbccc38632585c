package e2e

import (
	"context"
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
	workersIn(ctx, t, ns, job, 2, true)
	// A factor of 100 turns a drain of a fraction of a second into a
	// grace far above the webhook's 1 s floor below.
	stop := runControllerOn(ctx, t, ns, env.EtcdClient, func(c *autoscale.Config) { c.DrainSafetyFactor = 100 })
	defer stop()
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
		return measured != nil, nil
	}); err != nil {
		t.Fatalf("the ElasticScaler's status never showed the drain: %v", err)
	}
	if measured.Samples != 1 || measured.P99Seconds <= 0 || measured.P99Seconds > env.InjectConfig().Grace.Seconds() {
		t.Fatalf("drain status %+v: want one drain, within the sidecar's grace", measured)
	}
	// The status shows the p99 rounded to the millisecond; the grace is
	// the unrounded one x 100, rounded up.
	lo, hi := int32(math.Ceil((measured.P99Seconds-0.0005)*100)), int32(math.Ceil((measured.P99Seconds+0.0005)*100))
	if g := measured.GracePeriodSeconds; g < lo || g > hi {
		t.Fatalf("measured grace %d s, want p99 %v s (to the ms) x 100 rounded up: %d to %d s", g, measured.P99Seconds, lo, hi)
	}
	if measured.GracePeriodSeconds <= 1 {
		t.Fatalf("measured grace %d s: not above the webhook's floor, the test would show nothing", measured.GracePeriodSeconds)
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
